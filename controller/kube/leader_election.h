// Leader election on a coordination.k8s.io/v1 Lease, the way client-go's leaderelection does it:
// acquire when the lease is free or expired, renew every retry period, step down when renewal
// fails for renew_deadline, release on a graceful stop. Owns two threads (the campaign, and one
// that makes the API calls so that a hung call cannot keep a leader past its deadline); no
// controller logic.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "controller/kube/kube_client.h"

namespace ringtrain::kube {

struct LeaderElectionConfig {
  std::string lease_namespace = "default";
  std::string lease_name = "ringtrain-controller-leader";
  std::string identity;  // unique per replica: pod name + random suffix
  Duration lease_duration{15'000};
  Duration renew_deadline{10'000};
  Duration retry_period{2'000};
  // Clear holderIdentity on Stop() so another replica takes over at once, not after expiry.
  bool release_on_stop = true;
  // How long Stop() waits for the release (a Get and an Update) before giving up on it.
  Duration release_timeout{5'000};
  // Called on the elector's threads (must not throw); on_stopped_leading also after a lost
  // renewal, as soon as renew_deadline passes, whether or not the renewal call has returned.
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& identity)> on_new_leader;
  const Clock* clock = nullptr;  // default: the real clock; must outlive the elector
  // Set by Stop() once the elector has no more use for a call still in flight: after the release
  // has ended or run out of release_timeout (or at once when there is nothing to release). Give
  // it to the election client as ClientOptions::exec_stop: a credential plugin that such a call
  // waits for is then killed rather than waited for up to its own timeout (60 s), while the
  // release may still run the plugin within its budget. Must outlive the elector.
  std::atomic<bool>* calls_abandoned = nullptr;
};

class LeaderElector {
 public:
  // `client` must outlive the elector. Checks the durations (lease > renew deadline > retry).
  static StatusOr<std::unique_ptr<LeaderElector>> Create(KubeClient* client,
                                                         LeaderElectionConfig config);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Campaigns until Stop(); after losing the lease it campaigns again.
  void Start();
  // Stops campaigning; a leader steps down (on_stopped_leading) and releases the lease if asked
  // (waiting at most release_timeout for it). Then sets calls_abandoned and waits for an API call
  // still in flight, which the client's own timeout bounds (or calls_abandoned, where a plugin
  // runs).
  void Stop();
  bool IsLeader() const;
  // The holder this elector last saw on the lease ("" = none).
  std::string CurrentLeader() const;

 private:
  LeaderElector(KubeClient* client, LeaderElectionConfig config);
  void Run();
  // One attempt to take or renew the lease; ok means we hold it now.
  Status TryAcquireOrRenew();
  Status Release();
  // Runs `call` on caller_ and waits for it until `deadline` (or, if `stoppable`, until
  // Stop()). nullopt when it did not finish in time: it goes on, and the next Call waits for it
  // first, so that two calls never race on the lease.
  std::optional<Status> Call(std::function<Status()> call, SteadyTime deadline, bool stoppable);
  void CallerLoop();
  void SetLeader(bool leader);
  bool SleepUnlessStopped(Duration d);
  WallTime Now() const;
  SteadyTime SteadyNow() const;

  KubeClient* const client_;
  const LeaderElectionConfig config_;
  RealClock real_clock_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool leader_ = false;
  std::string observed_holder_;
  std::string observed_record_;  // the lease spec as last read, to see whether it moved
  // Monotonic time when observed_record_ last changed: expiry is measured on it, so a step of
  // the wall clock (NTP) neither expires a live lease nor prolongs a dead one.
  SteadyTime observed_time_{};
  Json observed_lease_;  // the lease as last read or written (resourceVersion for updates)
  // The call handed to caller_: posted_ counts calls handed over, done_ those finished.
  std::function<Status()> call_;
  std::uint64_t posted_ = 0;
  std::uint64_t done_ = 0;
  Status call_result_;
  bool caller_exit_ = false;
  std::thread caller_;
  std::thread thread_;
};

// metav1.MicroTime as the API wants it: "2026-11-21T15:27:49.859018Z" (exactly 6 digits).
std::string FormatMicroTime(WallTime t);

}  // namespace ringtrain::kube
