#include "runner/metrics/runner_metrics.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include <prometheus/client_metric.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/http.h"
#include "common/runner_contract.h"
#include "common/utf8.h"
#include "runner/metrics/nvml.h"

namespace ringtrain::metrics {
namespace {

prometheus::Histogram::BucketBoundaries TimeBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The operator keeps 1024 bytes of a /status text (common/runner_status.cc).
constexpr std::size_t kMaxRecoveryCauseBytes = 1024;

// `text` as one line of at most `max` bytes, cut between characters (a cut through one would
// be written as U+FFFD, a character the text never had).
std::string OneLine(std::string_view text, std::size_t max) {
  std::string s(text.substr(0, Utf8Cut(text, max)));
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

prometheus::Family<prometheus::Gauge>* GaugeFamily(prometheus::Registry& r, const char* name,
                                                   const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

}  // namespace

struct RunnerMetrics::GpuFamilies {
  prometheus::Family<prometheus::Gauge>* utilization;
  prometheus::Family<prometheus::Gauge>* busy;
  prometheus::Family<prometheus::Gauge>* memory_used;
  prometheus::Family<prometheus::Gauge>* memory_total;
  prometheus::Family<prometheus::Gauge>* power;
  prometheus::Family<prometheus::Gauge>* sm_clock;
};

struct RunnerMetrics::GpuSeries {
  std::string label;
  prometheus::Gauge* utilization;
  prometheus::Gauge* busy;
  prometheus::Gauge* memory_used;
  prometheus::Gauge* memory_total;
  prometheus::Gauge* power;
  prometheus::Gauge* sm_clock;
};

RunnerMetrics::RunnerMetrics(const RunnerLabels& labels, const Clock& clock)
    : registry_(std::make_shared<prometheus::Registry>()),
      labels_(labels),
      clock_(&clock),
      progressed_at_(clock.SteadyNow()) {
  const prometheus::Labels l{
      {"job", labels.job}, {"namespace", labels.ns}, {"rank", std::to_string(labels.rank)}};
  auto& r = *registry_;
  step_seconds_ = &prometheus::BuildHistogram()
                       .Name("ringtrain_step_duration_seconds")
                       .Help(
                           "Wall time of one training step: data, forward, backward, "
                           "all-reduce wait and optimizer")
                       .Register(r)
                       .Add(l, TimeBuckets());
  samples_ = &prometheus::BuildCounter()
                  .Name("ringtrain_samples_total")
                  .Help("Training samples processed by this rank")
                  .Register(r)
                  .Add(l);
  steps_ = &prometheus::BuildCounter()
                .Name("ringtrain_steps_total")
                .Help("Optimizer steps taken by this rank in this process")
                .Register(r)
                .Add(l);
  data_wait_ = &prometheus::BuildCounter()
                    .Name("ringtrain_data_wait_seconds_total")
                    .Help("Seconds the trainer waited for the input pipeline")
                    .Register(r)
                    .Add(l);
  allreduce_seconds_ = &prometheus::BuildHistogram()
                            .Name("ringtrain_allreduce_duration_seconds")
                            .Help("Duration of one gradient-bucket all-reduce")
                            .Register(r)
                            .Add(l, TimeBuckets());
  allreduce_bytes_ = &prometheus::BuildCounter()
                          .Name("ringtrain_allreduce_bytes_total")
                          .Help("Bytes of gradients all-reduced by this rank")
                          .Register(r)
                          .Add(l);
  allreduce_wait_ = &prometheus::BuildCounter()
                         .Name("ringtrain_allreduce_wait_seconds_total")
                         .Help(
                             "Seconds the trainer waited for all-reduce after backward "
                             "(communication not hidden by overlap)")
                         .Register(r)
                         .Add(l);
  loss_family_ = GaugeFamily(r, "ringtrain_loss",
                             "Mean training loss of this rank's steps in the last report window "
                             "(1 s, or to an epoch end)");
  epoch_ =
      &prometheus::BuildGauge().Name("ringtrain_epoch").Help("Epochs completed").Register(r).Add(l);
  step_ = &prometheus::BuildGauge()
               .Name("ringtrain_step")
               .Help("Global optimizer step")
               .Register(r)
               .Add(l);
  samples_per_second_ = &prometheus::BuildGauge()
                             .Name("ringtrain_samples_per_second")
                             .Help(
                                 "This rank's training throughput over the last report window; "
                                 "0 while the rank is stalled or recovering")
                             .Register(r)
                             .Add(l);
  last_step_family_ = GaugeFamily(r, "ringtrain_last_step_timestamp_seconds",
                                  "Unix time of this rank's last completed training step (no "
                                  "series before the first); time() minus it is the time since "
                                  "progress");
  test_accuracy_family_ =
      GaugeFamily(r, "ringtrain_test_accuracy_ratio",
                  "Test accuracy of the last evaluation (0-1; classification models)");
  test_mse_family_ = GaugeFamily(r, "ringtrain_test_mse",
                                 "Test mean squared error of the last evaluation (regression "
                                 "models)");
  world_size_ = &prometheus::BuildGauge()
                     .Name("ringtrain_world_size")
                     .Help("Ranks in the gang")
                     .Register(r)
                     .Add(l);
  checkpoints_ = &prometheus::BuildCounter()
                      .Name("ringtrain_checkpoints_total")
                      .Help("Checkpoints written by this rank")
                      .Register(r)
                      .Add(l);
  auto recovery_labels = l;
  recovery_labels["kind"] = "in_place";
  recoveries_ = &prometheus::BuildCounter()
                     .Name("ringtrain_recoveries_total")
                     .Help(
                         "Recoveries this rank took part in, by kind (in_place: the gang kept "
                         "its state and replaced only the lost rank)")
                     .Register(r)
                     .Add(recovery_labels);
  recovery_seconds_ = &prometheus::BuildCounter()
                           .Name("ringtrain_recovery_seconds_total")
                           .Help(
                               "Seconds the gang did not train between losing a peer and "
                               "training again in place, accrued while it does not")
                           .Register(r)
                           .Add(l);
  recovery_steps_lost_ = &prometheus::BuildCounter()
                              .Name("ringtrain_recovery_steps_lost_total")
                              .Help(
                                  "Steps whose work an in-place recovery threw away (a step in "
                                  "flight when the peer was lost)")
                              .Register(r)
                              .Add(l);
  gpu_families_ = std::make_unique<GpuFamilies>(GpuFamilies{
      GaugeFamily(r, "ringtrain_gpu_utilization_ratio",
                  "NVML utilization: the fraction of the last sample period in which a kernel "
                  "ran (0-1)"),
      GaugeFamily(r, "ringtrain_gpu_busy_ratio",
                  "ringtrain's own measure: CUDA kernel time / step time, from CUDA events (0-1)"),
      GaugeFamily(r, "ringtrain_gpu_memory_used_bytes", "Device memory in use"),
      GaugeFamily(r, "ringtrain_gpu_memory_total_bytes", "Device memory in total"),
      GaugeFamily(r, "ringtrain_gpu_power_watts", "Board power draw"),
      GaugeFamily(r, "ringtrain_gpu_sm_clock_hertz",
                  "Streaming-multiprocessor clock (drops when throttled)"),
  });
}

RunnerMetrics::~RunnerMetrics() { StopServing(); }

Status RunnerMetrics::Serve(const std::string& host, int port) {
  std::map<std::string, http::Handler> handlers;
  handlers["/metrics"] = [this] {
    return http::Response{200, "text/plain; version=0.0.4; charset=utf-8", RenderText()};
  };
  handlers["/status"] = [this] {
    return http::Response{200, "application/json", RenderStatusJson()};
  };
  handlers["/healthz"] = [] { return http::Response{200, "text/plain", "ok\n"}; };
  ASSIGN_OR_RETURN(server_, http::Server::Create(host, port, std::move(handlers)));
  return Status::Ok();
}

int RunnerMetrics::port() const { return server_ ? server_->port() : -1; }

void RunnerMetrics::StopServing() {
  if (server_) server_->Stop();
}

void RunnerMetrics::ObserveStep(double seconds, int samples) {
  step_seconds_->Observe(seconds);
  samples_->Increment(samples);
  steps_->Increment();
  Lazy(last_step_, last_step_family_)
      ->Set(std::chrono::duration<double>(clock_->Now().time_since_epoch()).count());
  std::lock_guard<std::mutex> lock(mu_);
  progressed_at_ = clock_->SteadyNow();
  if (between_steps_) {
    between_steps_ = false;  // this step waited for that work: not a step time to learn from
    return;
  }
  mean_step_seconds_ = mean_step_seconds_ == 0
                           ? seconds
                           : mean_step_seconds_ + kStepTimeWeight * (seconds - mean_step_seconds_);
}
void RunnerMetrics::ObserveDataWait(double seconds) { data_wait_->Increment(seconds); }
void RunnerMetrics::ObserveAllReduce(double seconds, std::size_t bytes) {
  allreduce_seconds_->Observe(seconds);
  allreduce_bytes_->Increment(static_cast<double>(bytes));
}
void RunnerMetrics::ObserveAllReduceWait(double seconds) { allreduce_wait_->Increment(seconds); }
void RunnerMetrics::SetLoss(double loss) { Lazy(loss_, loss_family_)->Set(loss); }
void RunnerMetrics::SetEpoch(int epoch) { epoch_->Set(epoch); }
void RunnerMetrics::SetStep(long long step) { step_->Set(static_cast<double>(step)); }
void RunnerMetrics::SetSamplesPerSecond(double v) { samples_per_second_->Set(v); }
void RunnerMetrics::SetTestAccuracy(double v) {
  Lazy(test_accuracy_, test_accuracy_family_)->Set(v);
}
void RunnerMetrics::SetTestMse(double v) { Lazy(test_mse_, test_mse_family_)->Set(v); }
void RunnerMetrics::SetWorldSize(int n) { world_size_->Set(n); }
void RunnerMetrics::IncCheckpoints() { checkpoints_->Increment(); }

prometheus::Gauge* RunnerMetrics::Lazy(std::atomic<prometheus::Gauge*>& gauge,
                                       prometheus::Family<prometheus::Gauge>* family) {
  prometheus::Gauge* g = gauge.load(std::memory_order_acquire);
  if (g != nullptr) return g;
  std::lock_guard<std::mutex> lock(mu_);
  g = gauge.load(std::memory_order_relaxed);
  if (g == nullptr) {
    g = &family->Add(
        {{"job", labels_.job}, {"namespace", labels_.ns}, {"rank", std::to_string(labels_.rank)}});
    gauge.store(g, std::memory_order_release);
  }
  return g;
}

void RunnerMetrics::AccrueRecoveryLocked() const {
  if (!recovering_) return;
  const SteadyTime now = clock_->SteadyNow();
  if (now <= accrued_to_) return;
  const double seconds = std::chrono::duration<double>(now - accrued_to_).count();
  accrued_to_ = now;
  outage_accrued_ += seconds;
  recovery_seconds_->Increment(seconds);
}

double RunnerMetrics::StallThresholdLocked() const {
  return std::max(kStallFloorSeconds, kStallStepFactor * mean_step_seconds_);
}

bool RunnerMetrics::StalledLocked() const {
  if (progress_.state != "running" || between_steps_) return false;
  const double since = std::chrono::duration<double>(clock_->SteadyNow() - progressed_at_).count();
  return since > StallThresholdLocked();
}

double RunnerMetrics::stall_threshold_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return StallThresholdLocked();
}

void RunnerMetrics::BeginWorkBetweenSteps() {
  std::lock_guard<std::mutex> lock(mu_);
  between_steps_ = true;
}

void RunnerMetrics::EndWorkBetweenSteps() {
  std::lock_guard<std::mutex> lock(mu_);
  between_steps_ = false;
  progressed_at_ = clock_->SteadyNow();
}

void RunnerMetrics::BeginRecovery(SteadyTime since, std::string_view cause) {
  samples_per_second_->Set(0);
  std::lock_guard<std::mutex> lock(mu_);
  progress_.state = "recovering";
  progress_.recovery_cause = OneLine(cause, kMaxRecoveryCauseBytes);
  progress_.samples_per_second = 0;
  between_steps_ = false;  // the failure ended that work
  if (recovering_) return;
  recovering_ = true;
  recovering_since_ = since;
  outage_accrued_ = 0;
  accrued_to_ = since;
}

void RunnerMetrics::EndRecovery() {
  std::lock_guard<std::mutex> lock(mu_);
  AccrueRecoveryLocked();
  recovering_ = false;
}

void RunnerMetrics::ObserveRecovery(double seconds_without_training, long long steps_lost) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (recovering_) {
      AccrueRecoveryLocked();
      recovery_seconds_->Increment(std::max(0.0, seconds_without_training - outage_accrued_));
      recovering_ = false;
    }
  }
  recoveries_->Increment();
  recovery_steps_lost_->Increment(static_cast<double>(std::max(0LL, steps_lost)));
}

void RunnerMetrics::SetGpu(const std::string& gpu_label) {
  std::lock_guard<std::mutex> lock(mu_);
  if (gpu_series_owner_) {
    if (gpu_series_owner_->label != gpu_label) {
      spdlog::warn("metrics: already exporting gpu {}; ignoring gpu {}", gpu_series_owner_->label,
                   gpu_label);
    }
    return;
  }
  const prometheus::Labels l{{"job", labels_.job},
                             {"namespace", labels_.ns},
                             {"rank", std::to_string(labels_.rank)},
                             {"gpu", gpu_label}};
  auto add = [&](prometheus::Family<prometheus::Gauge>* family) {
    prometheus::Gauge* g = &family->Add(l);
    g->Set(kNaN);  // no value yet, rather than a fake 0
    return g;
  };
  const GpuFamilies& f = *gpu_families_;
  gpu_series_owner_ = std::make_unique<GpuSeries>(
      GpuSeries{gpu_label, add(f.utilization), add(f.busy), add(f.memory_used), add(f.memory_total),
                add(f.power), add(f.sm_clock)});
  gpu_series_.store(gpu_series_owner_.get(), std::memory_order_release);
}

void RunnerMetrics::SetGpuSample(const GpuSample& sample) {
  const GpuSeries* g = gpu_series_.load(std::memory_order_acquire);
  if (g == nullptr) return;
  g->utilization->Set(sample.utilization_ratio.value_or(kNaN));
  g->memory_used->Set(static_cast<double>(sample.memory_used_bytes));
  g->memory_total->Set(static_cast<double>(sample.memory_total_bytes));
  g->power->Set(sample.power_watts.value_or(kNaN));
  g->sm_clock->Set(sample.sm_clock_hertz.value_or(kNaN));
}

void RunnerMetrics::SetGpuBusy(double ratio) {
  const GpuSeries* g = gpu_series_.load(std::memory_order_acquire);
  if (g != nullptr) g->busy->Set(ratio);
}

void RunnerMetrics::UpdateProgress(const Progress& p) {
  std::lock_guard<std::mutex> lock(mu_);
  if (p.state == "running" && progress_.state != "running") {
    progressed_at_ = clock_->SteadyNow();
    between_steps_ = false;
  }
  progress_ = p;
}

Progress RunnerMetrics::progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  Progress p = progress_;
  if (p.state == "recovering" && recovering_) {
    p.recovering_seconds = std::max(
        0.0, std::chrono::duration<double>(clock_->SteadyNow() - recovering_since_).count());
  }
  if (StalledLocked()) {
    const double since =
        std::chrono::duration<double>(clock_->SteadyNow() - progressed_at_).count();
    p.state = "stalled";
    p.samples_per_second = 0;
    if (p.message.empty()) {
      p.message = fmt::format("no step completed for {:.0f}s (stall threshold {:.0f}s)", since,
                              StallThresholdLocked());
    }
  }
  return p;
}

std::string RunnerMetrics::RenderText() const {
  bool stalled = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    AccrueRecoveryLocked();
    stalled = StalledLocked();
  }
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  if (stalled) {
    // The gauge keeps the trainer's last report (it sets the next one); a stalled rank reads 0.
    for (prometheus::MetricFamily& f : families) {
      if (f.name != "ringtrain_samples_per_second") continue;
      for (prometheus::ClientMetric& c : f.metric) c.gauge.value = 0;
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

namespace {

nlohmann::json StatusObject(const RunnerLabels& labels_, const Progress& p) {
  nlohmann::json j = {{"job", labels_.job},
                      {"namespace", labels_.ns},
                      {"rank", labels_.rank},
                      {"attempt", p.attempt},
                      {"world_size", p.world_size},
                      {"state", p.state},
                      {"epoch", p.epoch},
                      {"step", p.step},
                      {"steps_total", p.steps_total},
                      {"samples_per_second", p.samples_per_second},
                      {"loss", p.loss},
                      {"message", p.message}};
  if (p.test_mse >= 0) j["test_mse"] = p.test_mse;
  if (p.test_accuracy >= 0) j["test_accuracy"] = p.test_accuracy;
  j[std::string(contract::kStatusStartStep)] = p.start_step;
  if (p.recoveries > 0) {
    j[std::string(contract::kStatusRecoveries)] = p.recoveries;
    j[std::string(contract::kStatusRecoverySeconds)] = p.recovery_seconds;
    j[std::string(contract::kStatusRecoveryStepsLost)] = p.recovery_steps_lost;
    j[std::string(contract::kStatusLastRecoveryStep)] = p.last_recovery_step;
  }
  if (!p.resume_warning.empty()) {
    j[std::string(contract::kStatusResumeWarning)] = p.resume_warning;
  }
  if (p.state == "recovering") {
    if (!p.recovery_cause.empty())
      j[std::string(contract::kStatusRecoveryCause)] = p.recovery_cause;
    // Absent once the outage is counted as over (ObserveRecovery) while the state still says
    // recovering until the next report: an age of 0 would read as a new outage.
    if (p.recovering_seconds >= 0) {
      j[std::string(contract::kStatusRecoveringSeconds)] = p.recovering_seconds;
    }
  }
  return j;
}

}  // namespace

std::string RunnerMetrics::RenderStatusJson() const {
  return StatusObject(labels_, progress())
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

std::string RunnerMetrics::FinalStatusJson() const {
  Progress p = progress();
  // The kubelet keeps 4096 bytes of a termination message: shorten the free-text fields.
  constexpr std::size_t kMax = 4096;
  std::string out;
  for (std::size_t limit : {std::size_t{1024}, std::size_t{256}, std::size_t{0}}) {
    if (p.message.size() > limit) p.message.resize(limit);
    if (p.resume_warning.size() > limit) p.resume_warning.resize(limit);
    out = StatusObject(labels_, p).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (out.size() <= kMax) break;
  }
  return out;
}

}  // namespace ringtrain::metrics
