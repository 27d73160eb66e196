#include "controller/executors/kubernetes/controller_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
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
                           .Help(
                               "Reconciles that ended in an error (retried with backoff), and "
                               "creates refused for the controller's configuration (RBAC, a "
                               "missing CRD)")
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
  recovered_in_place_ = &prometheus::BuildCounter()
                             .Name("ringtrain_controller_recovered_in_place_total")
                             .Help(
                                 "In-place recoveries the gangs completed, as rank 0 accounts "
                                 "them (status.recovery.inPlace), with or without a replaced pod")
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
  list_errors_family_ = &prometheus::BuildCounter()
                             .Name("ringtrain_controller_list_errors_total")
                             .Help(
                                 "Lists of the informers that failed (a CRD not installed, "
                                 "RBAC, the API server away), by resource")
                             .Register(r);
  // At 0 from the start, so that increase() sees the first failure.
  for (const char* resource : {"trainingjobs", "pods"}) {
    list_errors_family_->Add({{"resource", resource}});
  }
  pods_ready_seconds_ = &prometheus::BuildHistogram()
                             .Name("ringtrain_controller_job_pods_ready_seconds")
                             .Help("Seconds from a job's creation until all its pods existed")
                             .Register(r)
                             .Add({}, prometheus::Histogram::BucketBoundaries{
                                          0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300});
  job_phase_family_ = &prometheus::BuildGauge()
                           .Name("ringtrain_controller_job_phase")
                           .Help("1 for each TrainingJob, labelled with its status.phase")
                           .Register(r);
  job_step_family_ = &prometheus::BuildGauge()
                          .Name("ringtrain_controller_job_step")
                          .Help("Each TrainingJob's last global step (status.progress.step)")
                          .Register(r);
  job_accuracy_family_ =
      &prometheus::BuildGauge()
           .Name("ringtrain_controller_job_test_accuracy_ratio")
           .Help("Each TrainingJob's last test accuracy (status.progress.testAccuracy)")
           .Register(r);
  job_mse_family_ = &prometheus::BuildGauge()
                         .Name("ringtrain_controller_job_test_mse")
                         .Help("Each TrainingJob's last test MSE (status.progress.testMSE)")
                         .Register(r);
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
  if (phase.empty()) {
    ForgetJobLocked(key);
    return;
  }
  auto it = jobs_.find(key);
  if (it == jobs_.end()) {
    const std::size_t slash = key.find('/');
    JobSeries job;
    job.ns = slash == std::string::npos ? "" : key.substr(0, slash);
    job.name = slash == std::string::npos ? key : key.substr(slash + 1);
    it = jobs_.emplace(key, std::move(job)).first;
  }
  JobSeries& job = it->second;
  if (job.phase == phase) return;
  if (!job.phase.empty()) PhaseGauge(job.phase)->Decrement();
  if (job.phase_gauge != nullptr) job_phase_family_->Remove(job.phase_gauge);
  job.phase = phase;
  PhaseGauge(phase)->Increment();
  job.phase_gauge =
      &job_phase_family_->Add({{"namespace", job.ns}, {"job", job.name}, {"phase", phase}});
  job.phase_gauge->Set(1);
}

void ControllerMetrics::SetOrRemoveLocked(prometheus::Family<prometheus::Gauge>* family,
                                          prometheus::Gauge** g, const JobSeries& job,
                                          double value) {
  if (value < 0) {
    if (*g != nullptr) family->Remove(*g);
    *g = nullptr;
    return;
  }
  if (*g == nullptr) *g = &family->Add({{"namespace", job.ns}, {"job", job.name}});
  (*g)->Set(value);
}

void ControllerMetrics::SetJobFigures(const std::string& key, long long step, double test_accuracy,
                                      double test_mse) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;
  JobSeries& job = it->second;
  SetOrRemoveLocked(job_step_family_, &job.step, job, static_cast<double>(step));
  SetOrRemoveLocked(job_accuracy_family_, &job.test_accuracy, job, test_accuracy);
  SetOrRemoveLocked(job_mse_family_, &job.test_mse, job, test_mse);
}

void ControllerMetrics::ForgetJobLocked(const std::string& key) {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return;
  JobSeries& job = it->second;
  if (!job.phase.empty()) PhaseGauge(job.phase)->Decrement();
  if (job.phase_gauge != nullptr) job_phase_family_->Remove(job.phase_gauge);
  SetOrRemoveLocked(job_step_family_, &job.step, job, -1);
  SetOrRemoveLocked(job_accuracy_family_, &job.test_accuracy, job, -1);
  SetOrRemoveLocked(job_mse_family_, &job.test_mse, job, -1);
  jobs_.erase(it);
}

void ControllerMetrics::IncGangRestarts() { gang_restarts_->Increment(); }
void ControllerMetrics::IncInPlaceRecoveries() { in_place_recoveries_->Increment(); }
void ControllerMetrics::AddRecoveredInPlace(int n) {
  if (n > 0) recovered_in_place_->Increment(n);
}
void ControllerMetrics::IncPodsCreated() { pods_created_->Increment(); }
void ControllerMetrics::IncWatchRestarts() { watch_restarts_->Increment(); }

void ControllerMetrics::IncListErrors(const std::string& resource) {
  list_errors_family_->Add({{"resource", resource}}).Increment();
}
void ControllerMetrics::ObservePodsReady(double seconds) { pods_ready_seconds_->Observe(seconds); }
void ControllerMetrics::SetLeader(bool leader) {
  is_leader_->Set(leader ? 1 : 0);
  if (leader) return;
  std::lock_guard<std::mutex> lock(mu_);
  while (!jobs_.empty()) ForgetJobLocked(jobs_.begin()->first);
}

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
