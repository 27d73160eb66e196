#include "controller/executors/kubernetes/controller_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <sstream>

namespace ringtrain::op {
namespace {

constexpr std::size_t kMaxSamples = 1'000'000;
const char* const kPhases[] = {"Pending", "Running",   "Restarting", "Succeeded",
                               "Failed",  "Suspended", "Unknown"};

}  // namespace

ControllerMetrics::ControllerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  reconcile_seconds_ = &prometheus::BuildHistogram()
                            .Name("ringtrain_controller_reconcile_duration_seconds")
                            .Help("Wall time of one reconcile of one TrainingJob")
                            .Register(r)
                            .Add({}, prometheus::Histogram::BucketBoundaries{
                                         0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5, 1, 2.5, 5, 10});
  reconcile_errors_ = &prometheus::BuildCounter()
                           .Name("ringtrain_controller_reconcile_errors_total")
                           .Help("Reconciles that ended in an error and were retried with backoff")
                           .Register(r)
                           .Add({});
  auto& phases = prometheus::BuildGauge()
                     .Name("ringtrain_controller_jobs")
                     .Help("TrainingJobs known to the controller, by phase")
                     .Register(r);
  for (const char* p : kPhases) phase_gauges_[p] = &phases.Add({{"phase", p}});
  gang_restarts_ = &prometheus::BuildCounter()
                        .Name("ringtrain_controller_gang_restarts_total")
                        .Help("Gang restarts ordered (retryable failures, disruptions, stalls)")
                        .Register(r)
                        .Add({});
  in_place_recoveries_ = &prometheus::BuildCounter()
                              .Name("ringtrain_controller_in_place_recoveries_total")
                              .Help(
                                  "Lost replicas replaced alone while the survivors kept "
                                  "their state (runPolicy.recovery InPlace)")
                              .Register(r)
                              .Add({});
  pods_created_ = &prometheus::BuildCounter()
                       .Name("ringtrain_controller_pods_created_total")
                       .Help("Pods created by the controller")
                       .Register(r)
                       .Add({});
  watch_restarts_ = &prometheus::BuildCounter()
                         .Name("ringtrain_controller_watch_restarts_total")
                         .Help("Watches re-established or relisted by the informers")
                         .Register(r)
                         .Add({});
  pods_ready_seconds_ = &prometheus::BuildHistogram()
                             .Name("ringtrain_controller_job_pods_ready_seconds")
                             .Help("Seconds from a job's creation until all its pods existed")
                             .Register(r)
                             .Add({}, prometheus::Histogram::BucketBoundaries{
                                          0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300});
  is_leader_ = &prometheus::BuildGauge()
                    .Name("ringtrain_controller_is_leader")
                    .Help("1 while this replica holds the leader Lease")
                    .Register(r)
                    .Add({});
}

ControllerMetrics::~ControllerMetrics() = default;

void ControllerMetrics::ObserveReconcile(double seconds) {
  reconcile_seconds_->Observe(seconds);
  std::lock_guard<std::mutex> lock(mu_);
  if (samples_.size() < kMaxSamples) samples_.push_back(seconds);
}

void ControllerMetrics::IncReconcileErrors() { reconcile_errors_->Increment(); }

prometheus::Gauge* ControllerMetrics::PhaseGauge(const std::string& phase) {
  auto it = phase_gauges_.find(phase);
  return it != phase_gauges_.end() ? it->second : phase_gauges_["Unknown"];
}

void ControllerMetrics::SetJobPhase(const std::string& key, const std::string& phase) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = job_phase_.find(key);
  if (it != job_phase_.end()) {
    if (it->second == phase) return;
    PhaseGauge(it->second)->Decrement();
    job_phase_.erase(it);
  }
  if (phase.empty()) return;
  job_phase_[key] = phase;
  PhaseGauge(phase)->Increment();
}

void ControllerMetrics::IncGangRestarts() { gang_restarts_->Increment(); }
void ControllerMetrics::IncInPlaceRecoveries() { in_place_recoveries_->Increment(); }
void ControllerMetrics::IncPodsCreated() { pods_created_->Increment(); }
void ControllerMetrics::IncWatchRestarts() { watch_restarts_->Increment(); }
void ControllerMetrics::ObservePodsReady(double seconds) { pods_ready_seconds_->Observe(seconds); }
void ControllerMetrics::SetLeader(bool leader) { is_leader_->Set(leader ? 1 : 0); }

std::string ControllerMetrics::RenderText() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

double ControllerMetrics::ReconcileQuantile(double q) const {
  std::vector<double> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = samples_;
  }
  if (s.empty()) return 0;
  std::sort(s.begin(), s.end());
  auto i = static_cast<std::size_t>(q * static_cast<double>(s.size() - 1));
  return s[std::min(i, s.size() - 1)];
}

std::size_t ControllerMetrics::ReconcileCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_.size();
}

}  // namespace ringtrain::op
