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
  // The job's phase now ("" forgets the job: it was deleted).
  void SetJobPhase(const std::string& key, const std::string& phase);
  void IncGangRestarts();
  void IncInPlaceRecoveries();
  void IncPodsCreated();
  void IncWatchRestarts();
  void ObservePodsReady(double seconds);
  void SetLeader(bool leader);

  std::string RenderText() const;

  // Reconcile durations seen so far (the last 1M), for the benchmark's percentiles.
  double ReconcileQuantile(double q) const;
  std::size_t ReconcileCount() const;

 private:
  prometheus::Gauge* PhaseGauge(const std::string& phase);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* reconcile_seconds_;
  prometheus::Counter* reconcile_errors_;
  prometheus::Counter* gang_restarts_;
  prometheus::Counter* in_place_recoveries_;
  prometheus::Counter* pods_created_;
  prometheus::Counter* watch_restarts_;
  prometheus::Histogram* pods_ready_seconds_;
  prometheus::Gauge* is_leader_;
  std::map<std::string, prometheus::Gauge*> phase_gauges_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> job_phase_;
  std::vector<double> samples_;
};

}  // namespace ringtrain::op
