// The TrainingJob operator: informers for TrainingJobs and their pods, a work queue with N
// workers running the Reconciler, and (optionally) Lease leader election so that of several
// replicas only the leader reconciles and writes; followers keep warm caches. No flag parsing,
// no HTTP serving (controller_command.cc does those).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "controller/executors/kubernetes/controller_metrics.h"
#include "controller/executors/kubernetes/reconciler.h"
#include "controller/kube/informer.h"
#include "controller/kube/kube_client.h"
#include "controller/kube/leader_election.h"
#include "controller/runtime/event_recorder.h"
#include "controller/runtime/work_queue.h"

namespace ringtrain::op {

struct OperatorOptions {
  std::string ns;  // "" = all namespaces
  int workers = 4;
  ReconcilerOptions reconciler;
  WorkQueueOptions queue;
  int watch_timeout_seconds = 300;
  bool leader_elect = false;
  // Its callbacks are set by the operator; identity also names the Events' reportingInstance.
  kube::LeaderElectionConfig election;
  // The client the election calls the API with (null: the operator's own). Give it a short
  // request timeout and no retries: the election steps down at its renew deadline whatever a
  // call is doing, but waits for that call before its next campaign and when it stops.
  kube::KubeClient* election_client = nullptr;
  // The client Events are written with (null: the operator's own): one that a stop does not
  // cancel writes the last Events at shutdown, within EventRecorder::kFlushTimeout.
  kube::KubeClient* events_client = nullptr;
  // Set once that budget is spent (EventRecorder's writes_abandoned): the events client's
  // ClientOptions::exec_stop. The election's counterpart is election.calls_abandoned.
  std::atomic<bool>* events_abandoned = nullptr;
};

class Operator {
 public:
  // `client`, the clients in `options`, `metrics` and `clock` (null: the real clock) must
  // outlive the operator.
  static StatusOr<std::unique_ptr<Operator>> Create(kube::KubeClient* client,
                                                    OperatorOptions options,
                                                    ControllerMetrics* metrics,
                                                    const Clock* clock = nullptr);
  ~Operator();
  Operator(const Operator&) = delete;
  Operator& operator=(const Operator&) = delete;

  // Starts the informers and the election (or, without it, the workers once synced).
  void Start();
  // Stops the workers (a reconcile in progress finishes), writes the queued Events (a few
  // seconds at most), stops the election (releasing the lease, a few seconds at most) and the
  // informers. Idempotent.
  void Stop();

  bool Ready() const;  // both informers have synced
  bool IsLeader() const;
  // True after the lease was lost while running: the process should exit and start afresh,
  // as client-go's controllers do, rather than risk writing as a follower.
  bool LostLeadership() const { return lost_leadership_; }
  std::size_t QueueLength() const { return queue_.Len(); }

 private:
  class Cache;
  Operator(kube::KubeClient* client, OperatorOptions options, ControllerMetrics* metrics,
           const Clock* clock);
  void StartWorkers();
  void StopWorkers();
  void Worker();
  void EnqueueJob(const Json& job);
  void EnqueuePod(const Json& pod);

  kube::KubeClient* client_;
  OperatorOptions options_;
  ControllerMetrics* metrics_;
  const Clock* clock_;
  RealClock real_clock_;
  std::unique_ptr<Cache> cache_;
  std::unique_ptr<EventRecorder> events_;
  std::unique_ptr<Reconciler> reconciler_;
  WorkQueue queue_;
  std::unique_ptr<kube::Informer> jobs_;
  std::unique_ptr<kube::Informer> pods_;
  std::unique_ptr<kube::LeaderElector> elector_;
  std::mutex workers_mu_;
  std::vector<std::thread> workers_;
  std::thread starter_;  // waits for the informers to sync, then starts the workers
  std::atomic<bool> stopping_{false};
  std::atomic<bool> leading_{false};
  std::atomic<bool> lost_leadership_{false};
};

}  // namespace ringtrain::op
