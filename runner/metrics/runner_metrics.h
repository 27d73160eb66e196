// The runner's Prometheus metrics and JSON /status, served on one port. Families and series are
// created once here (prometheus-cpp's Add is never called on the hot path); the trainer only
// observes, increments and sets. Must not know about the model or the communicator.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace ringtrain::http {
class Server;
}

namespace ringtrain::metrics {

struct GpuSample;

struct RunnerLabels {
  std::string job;
  std::string ns;
  int rank = 0;
};

// What /status reports: job-wide progress as seen by this rank.
struct Progress {
  // starting | running | stalled | recovering | evaluating | succeeded | failed. "recovering":
  // this rank lost a peer and waits, keeping its state, for the gang to train again in place
  // (samples/s reads 0 until the first report after it does); a replacement rank is "starting".
  // "stalled" is never set by the trainer: RunnerMetrics reads a "running" rank as stalled, with
  // 0 samples/s, while it has completed no step for longer than its stall threshold (a peer
  // that hangs in a collective, an input pipeline that starves it), and as running again from
  // its next step.
  std::string state = "starting";
  int attempt = 0;
  int world_size = 1;
  int epoch = 0;       // epochs completed (a 10-epoch job ends at 10)
  long long step = 0;  // global optimizer steps
  long long steps_total = 0;
  double samples_per_second = 0;  // whole job: this rank's rate × world size
  double loss = 0;
  double test_accuracy = -1;  // -1 until the first evaluation (and for regression)
  double test_mse = -1;       // regression: -1 until the first evaluation
  std::string message;
  // Rank 0: checkpoints existed but none could be resumed from (contract::kStatusResumeWarning).
  std::string resume_warning;
  long long start_step = 0;  // where this run started (a checkpoint's or a kept state's step)
  // In-place recoveries of this attempt, the gang's totals (train::TrainResult).
  int recoveries = 0;
  double recovery_seconds = 0;
  long long recovery_steps_lost = 0;
  long long last_recovery_step = -1;
  // While "recovering": the loss this rank recovers from (contract::kStatusRecoveryCause), and
  // the seconds since the outage began (contract::kStatusRecoveringSeconds; set by progress()).
  std::string recovery_cause;
  double recovering_seconds = -1;  // -1: not known (the outage already counted as over)
};

class RunnerMetrics {
 public:
  // A "running" rank reads as stalled when it has completed no step for longer than
  // max(kStallFloorSeconds, kStallStepFactor × its recent mean step time): the factor leaves
  // room for a slow step, and the floor for jitter of fast ones (an epoch's input reopening, a
  // GC pause). The mean is an exponential moving average (weight kStepTimeWeight) of the step
  // times, so one slow step moves it only a little.
  static constexpr double kStallFloorSeconds = 10;
  static constexpr double kStallStepFactor = 10;
  static constexpr double kStepTimeWeight = 0.1;

  // `clock` measures recoveries and stalls (monotonic time) and stamps the last step (wall
  // time); it must outlive this object.
  explicit RunnerMetrics(const RunnerLabels& labels, const Clock& clock = SystemClock());
  ~RunnerMetrics();

  // Serves /metrics, /status and /healthz on `port` (0 = ephemeral).
  Status Serve(const std::string& host, int port);
  int port() const;
  void StopServing();

  // A completed step: `seconds` since the previous one completed. It sets
  // ringtrain_last_step_timestamp_seconds (the clock's wall time; no series before the first
  // step) and restarts the stall clock.
  void ObserveStep(double seconds, int samples);
  void ObserveDataWait(double seconds);
  void ObserveAllReduce(double seconds, std::size_t bytes);
  void ObserveAllReduceWait(double seconds);
  // The mean training loss of the steps in the last report window (train::TrainingLoop: at least
  // 1 s, or to an epoch end), whatever the step engine.
  // The loss and test series exist only from their first value (no fake 0 before it), and a job
  // gets only the test series of its kind: an accuracy (classification) or an MSE (regression).
  void SetLoss(double loss);
  void SetEpoch(int epoch);
  void SetStep(long long step);
  void SetSamplesPerSecond(double v);
  void SetTestAccuracy(double v);
  void SetTestMse(double v);  // regression, instead of an accuracy
  void SetWorldSize(int n);
  void IncCheckpoints();
  // This rank lost a peer, its outage beginning at `since` (its last progress before it noticed),
  // and waits, keeping its state, for the
  // gang to train again in place: /status says "recovering" with 0 samples/s and `cause` (the
  // loss, one line; the latest loss of the outage), the samples/s
  // gauge reads 0, and ringtrain_recovery_seconds_total accrues from `since` until
  // ObserveRecovery (brought up to date at every read of /metrics, so its rate() is the fraction
  // of time lost at any moment). A second call during the same outage keeps the first `since`.
  void BeginRecovery(SteadyTime since, std::string_view cause = {});
  // An in-place recovery completed: the gang trains again `seconds_without_training` after it
  // lost a peer (its own account: from the earliest last progress of any rank), and threw away
  // `steps_lost`
  // steps. After BeginRecovery, ringtrain_recovery_seconds_total stops accruing and gets the
  // rest of `seconds_without_training` if the gang's account is longer than what accrued here
  // (a peer's outage began earlier). A replacement (no BeginRecovery: this process was not in the
  // outage) counts the recovery and its lost steps, but no seconds: the survivors' series hold
  // them, and a lump added now would read as time lost after training resumed.
  void ObserveRecovery(double seconds_without_training, long long steps_lost);
  // The rank trains again without an in-place recovery (no rank kept a state, so the gang
  // started over): ringtrain_recovery_seconds_total stops accruing. A no-op outside an outage.
  void EndRecovery();

  // GPU series: the labels above plus `gpu` (the device index in the pod). Their families exist
  // from the start, their series only after SetGpu, so a CPU rank exports no GPU series. A gauge
  // reads NaN until it has a value and where the device does not report it. One GPU per rank:
  // a later SetGpu with another label is ignored with a warning. The setters are no-ops until
  // SetGpu, and thread-safe.
  void SetGpu(const std::string& gpu_label);
  void SetGpuSample(const GpuSample& sample);  // an NVML reading (see nvml.h)
  void SetGpuBusy(double ratio);               // CUDA kernel time / step time, 0-1

  // Work between steps that may take long and is no stall: an evaluation, rank 0's checkpoint
  // write, and on the other ranks the next step, which waits in its collectives for that write.
  // From here until EndWorkBetweenSteps or the next completed step, whichever comes first, this
  // rank does not read as stalled, and that next step's time (the wait) stays out of the mean.
  void BeginWorkBetweenSteps();
  // That work is done: the stall clock restarts now.
  void EndWorkBetweenSteps();
  // The stall threshold now, in seconds (see kStallFloorSeconds).
  double stall_threshold_seconds() const;

  // The trainer's progress. A change of state to "running" restarts the stall clock (the first
  // report of a pass: after a start or a recovery, no step of this pass is late yet).
  void UpdateProgress(const Progress& p);
  // As /status reads it now: "stalled" with 0 samples/s where the trainer's says "running" and
  // the rank is stalled.
  Progress progress() const;

  std::string RenderText() const;
  std::string RenderStatusJson() const;
  // The /status object on one line without a newline, at most contract's 4096 bytes: what
  // rank 0 writes as its termination message on success (common/runner_contract.h).
  std::string FinalStatusJson() const;

 private:
  // The series of `family` with this rank's labels, created on first use.
  prometheus::Gauge* Lazy(std::atomic<prometheus::Gauge*>& gauge,
                          prometheus::Family<prometheus::Gauge>* family);
  // Brings ringtrain_recovery_seconds_total up to now during an outage. Caller holds mu_.
  void AccrueRecoveryLocked() const;
  // Whether this rank reads as stalled now. Caller holds mu_.
  bool StalledLocked() const;
  double StallThresholdLocked() const;

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* step_seconds_;
  prometheus::Counter* samples_;
  prometheus::Counter* steps_;
  prometheus::Counter* data_wait_;
  prometheus::Histogram* allreduce_seconds_;
  prometheus::Counter* allreduce_bytes_;
  prometheus::Counter* allreduce_wait_;
  prometheus::Gauge* epoch_;
  prometheus::Gauge* step_;
  prometheus::Gauge* samples_per_second_;
  prometheus::Family<prometheus::Gauge>* last_step_family_;
  std::atomic<prometheus::Gauge*> last_step_{nullptr};
  prometheus::Gauge* world_size_;
  prometheus::Counter* checkpoints_;
  prometheus::Counter* recoveries_;
  prometheus::Counter* recovery_seconds_;
  prometheus::Counter* recovery_steps_lost_;
  // Series that exist from their first value on: their families, and the series (created by
  // Lazy under mu_, then read without it).
  prometheus::Family<prometheus::Gauge>* loss_family_;
  prometheus::Family<prometheus::Gauge>* test_accuracy_family_;
  prometheus::Family<prometheus::Gauge>* test_mse_family_;
  std::atomic<prometheus::Gauge*> loss_{nullptr};
  std::atomic<prometheus::Gauge*> test_accuracy_{nullptr};
  std::atomic<prometheus::Gauge*> test_mse_{nullptr};
  struct GpuFamilies;
  struct GpuSeries;
  std::unique_ptr<GpuFamilies> gpu_families_;
  std::unique_ptr<GpuSeries> gpu_series_owner_;  // set once by SetGpu, under mu_
  std::atomic<const GpuSeries*> gpu_series_{nullptr};
  RunnerLabels labels_;
  const Clock* clock_;
  mutable std::mutex mu_;
  Progress progress_;
  // The outage in progress (BeginRecovery until ObserveRecovery), under mu_: the seconds
  // accrued to ringtrain_recovery_seconds_total for it, and up to when.
  bool recovering_ = false;
  SteadyTime recovering_since_{};  // the outage's start, while recovering_
  mutable double outage_accrued_ = 0;
  mutable SteadyTime accrued_to_;
  // The stall clock, under mu_: when the rank last made progress (a completed step, a start of
  // "running", the end of work between steps), its mean step time (0 before its first step),
  // and whether it does work between steps now.
  SteadyTime progressed_at_;
  double mean_step_seconds_ = 0;
  bool between_steps_ = false;

  std::unique_ptr<http::Server> server_;
};

}  // namespace ringtrain::metrics
