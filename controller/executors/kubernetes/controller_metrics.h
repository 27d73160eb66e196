// The controller's Prometheus metrics (ringtrain_controller_*): families registered once in the
// constructor, children kept, nothing registered on the reconcile path. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace prometheus {
class Registry;
class Histogram;
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace ringtrain::op {

class ControllerMetrics {
 public:
  ControllerMetrics();
  ~ControllerMetrics();
  ControllerMetrics(const ControllerMetrics&) = delete;
  ControllerMetrics& operator=(const ControllerMetrics&) = delete;

  void ObserveReconcile(double seconds);
  void IncReconcileErrors();
  // The job's phase now, for the counts by phase and its own series; `key` is "namespace/name"
  // (JobKey). "" forgets the job (it was deleted): its series go.
  void SetJobPhase(const std::string& key, const std::string& phase);
  // What the job's status says of its progress (step -1: none yet; a test figure -1: no
  // evaluation of that kind), as its own series (labels namespace and job, the TrainingJob's, as
  // the runners'): they outlive the runners, so a job's final figures stay in Prometheus for as
  // long as the TrainingJob exists. A job SetJobPhase never named is ignored.
  void SetJobFigures(const std::string& key, long long step, double test_accuracy, double test_mse);
  void IncGangRestarts();
  void IncInPlaceRecoveries();
  // In-place recoveries the gang completed (status.recovery.inPlace grew by `n`): with or without
  // a pod the controller replaced (a peer that hung and came back heals without one).
  void AddRecoveredInPlace(int n);
  void IncPodsCreated();
  void IncWatchRestarts();
  // A list of `resource` (trainingjobs, pods) failed: the informer holds nothing until one
  // succeeds, and no job is reconciled meanwhile.
  void IncListErrors(const std::string& resource);
  void ObservePodsReady(double seconds);
  // Losing the lead forgets every job (the counts by phase and the per-job series): only the
  // leader reconciles, so only its figures are current.
  void SetLeader(bool leader);

  std::string RenderText() const;

  // Reconcile durations seen so far (the last 1M), for the benchmark's percentiles.
  double ReconcileQuantile(double q) const;
  std::size_t ReconcileCount() const;

 private:
  prometheus::Gauge* PhaseGauge(const std::string& phase);
  // One job's own series (nullptr: none yet).
  struct JobSeries {
    std::string ns, name, phase;
    prometheus::Gauge* phase_gauge = nullptr;
    prometheus::Gauge* step = nullptr;
    prometheus::Gauge* test_accuracy = nullptr;
    prometheus::Gauge* test_mse = nullptr;
  };
  // Sets `*g` (created on first use) to `value`, or removes it when `value` < 0. Caller holds
  // mu_.
  void SetOrRemoveLocked(prometheus::Family<prometheus::Gauge>* family, prometheus::Gauge** g,
                         const JobSeries& job, double value);
  void ForgetJobLocked(const std::string& key);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* reconcile_seconds_;
  prometheus::Counter* reconcile_errors_;
  prometheus::Counter* gang_restarts_;
  prometheus::Counter* in_place_recoveries_;
  prometheus::Counter* recovered_in_place_;
  prometheus::Counter* pods_created_;
  prometheus::Counter* watch_restarts_;
  prometheus::Family<prometheus::Counter>* list_errors_family_;
  prometheus::Histogram* pods_ready_seconds_;
  prometheus::Gauge* is_leader_;
  std::map<std::string, prometheus::Gauge*> phase_gauges_;
  prometheus::Family<prometheus::Gauge>* job_phase_family_;
  prometheus::Family<prometheus::Gauge>* job_step_family_;
  prometheus::Family<prometheus::Gauge>* job_accuracy_family_;
  prometheus::Family<prometheus::Gauge>* job_mse_family_;
  mutable std::mutex mu_;
  std::map<std::string, JobSeries> jobs_;  // by key; the phase counts follow their phases
  std::vector<double> samples_;
};

}  // namespace ringtrain::op
