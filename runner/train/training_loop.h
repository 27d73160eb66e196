// The synchronous data-parallel training driver, written once for every step engine: identical
// start on every rank (rank 0's checkpoint or weights broadcast), the learning-rate schedule,
// the epoch/step/sample bookkeeping that checkpoints record, evaluation and checkpoint cadence,
// progress and metrics with one meaning whatever the engine, and the epilogue. The step itself
// is the engine's (runner/train/step_engine.h). Owns no sockets, processes or devices.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runner/comm/communicator.h"
#include "runner/comm/root_work.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/train/checkpoint.h"
#include "runner/train/config.h"
#include "runner/train/step_engine.h"

namespace ringtrain::train {

struct TrainResult {
  // Regression (a model with loss mse): test_loss is the test MSE and test_accuracy stays 0.
  bool regression = false;
  double test_accuracy = 0;
  double test_loss = 0;
  int epochs = 0;                     // epochs completed
  std::int64_t steps = 0;             // global optimizer steps at the end
  std::int64_t samples_this_run = 0;  // by the whole gang in this process (after any resume)
  std::int64_t steps_this_run = 0;    // taken by this process (after any resume)
  double wall_seconds = 0;
  // Whole job, this run: samples_this_run over the seconds from this process's first step to its
  // last (an in-place recovery's outage included).
  double samples_per_second = 0;
  int world_size = 1;
  double data_wait_seconds = 0;
  double allreduce_wait_seconds = 0;  // the steps waited for gradients after backward
  double allreduce_seconds = 0;       // the gradient collectives took, hidden or not
  double device_busy = 0;             // fraction of training time the accelerator was busy
  bool step_graph = false;            // the engine replayed the step as a CUDA graph
  // In-place recoveries of this attempt, as the gang counts them (a replacement takes the
  // survivors' totals): how many, the steps they threw away (a step in flight when the peer
  // was lost; 0 when the gang stopped at a step boundary), and the seconds the gang did not
  // train (from the earliest last progress of any rank before the loss to training again: a
  // peer that hangs before it is lost counts from the hang).
  int recoveries = 0;
  double recovery_seconds = 0;
  std::int64_t recovery_steps_lost = 0;
  std::int64_t last_recovery_step = -1;  // where the last one continued
  bool resumed = false;
  // Rank 0 only: checkpoints existed but none could be read, so training started from step 0.
  std::string resume_warning;
};

struct LoopDeps {
  comm::Communicator* comm = nullptr;
  StepEngine* engine = nullptr;
  bool evaluate = false;                      // the engine has a test set
  metrics::RunnerMetrics* metrics = nullptr;  // may be null
  const std::atomic<bool>* stop = nullptr;    // set by a signal handler; may be null
  // A drain request (SIGTERM while draining, common/stop.h); may be null. Every
  // kDrainVoteSteps steps the ranks agree whether any of them was asked to leave; if so the
  // whole gang stops after that same step: rank 0 writes a checkpoint (when it has a directory),
  // the ranks that were asked leave (Cancelled), the others keep their state for the next round
  // (Aborted naming the ranks that left).
  const std::atomic<bool>* drain = nullptr;
  int attempt = 0;
  // Rank 0's checkpoint reads and writes run while the others hear from it every
  // comm::HeartbeatFor(collective_timeout), for up to checkpoint_timeout (comm/root_work.h).
  Duration collective_timeout = comm::kDefaultCollectiveTimeout;
  Duration checkpoint_timeout = contract::kCheckpointTimeout;
};

// How often the gang agrees on drain requests: a SIGTERM is answered within this many steps
// (one 4-byte all-gather each time).
inline constexpr std::int64_t kDrainVoteSteps = 16;

// The loop's part of an engine's dependencies.
inline LoopDeps LoopDepsFor(const EngineDeps& deps, StepEngine* engine) {
  LoopDeps d;
  d.comm = deps.comm;
  d.engine = engine;
  d.evaluate = deps.test != nullptr || deps.test_table != nullptr;
  d.metrics = deps.metrics;
  d.stop = deps.stop;
  d.drain = deps.drain;
  d.attempt = deps.attempt;
  d.collective_timeout = deps.collective_timeout;
  d.checkpoint_timeout = deps.checkpoint_timeout;
  return d;
}

class TrainingLoop {
 public:
  TrainingLoop(const TrainConfig& config, LoopDeps deps) : config_(config), deps_(deps) {}
  // Trains from the start every rank agrees on: the most advanced state a rank kept from an
  // earlier round (Rejoin), else rank 0's newest checkpoint, else rank 0's initial weights.
  StatusOr<TrainResult> Run();
  void set_max_steps(std::int64_t max_steps) { config_.max_steps = max_steps; }
  // In-place recovery, after Run failed because the gang lost a rank: this rank keeps its state
  // (the model and optimizer as of the last step it completed, and that step's position in the
  // data) and goes on with `comm`, the communicator of the gang's next round. Rebinds the
  // engine (FailedPrecondition where it cannot recover in place).
  Status Rejoin(comm::Communicator* comm);
  // After Run failed because the gang lost a rank, when this rank is to wait for the next round
  // (in-place recovery): until the gang trains again, its metrics say so (state "recovering",
  // 0 samples/s, and `cause`, the loss, for the operator to show) and count the time from its
  // last progress before the failure (metrics::RunnerMetrics::BeginRecovery).
  void BeginRecovery(std::string_view cause = {});
  // An in-place recovery given up (from BeginRecovery until a Run trains again: waiting for the
  // next round, forming it, Rejoin, agreeing on the start), stopped or failed: rank 0, when it
  // has a checkpoint dir, writes a checkpoint of the state it kept (the gang's, as of the last
  // step it completed: a step's update is applied only once its all-reduce completed; the
  // position a checkpoint at that step written while training records), unless a checkpoint of
  // that step is already there. The gang is gone: no collective, rank 0 alone
  // (comm::WorkAlone), for up to the checkpoint timeout or until a second SIGTERM. `why` begins
  // its log lines ("stopped while recovering in place"). Ok with nothing to do: another rank,
  // no directory, not recovering, no state kept.
  Status CheckpointKeptState(std::string_view why);
  // After Run failed because the gang lost a rank, when this rank does not recover in place (no
  // recovery timeout, runPolicy.recovery GangRestart, a stop): the same save of the state as of
  // the last step the gang completed, recovering or not, so that the gang restart resumes from
  // there rather than from the last periodic checkpoint. Host engines only: the caller keeps a
  // GPU rank out (a step's NCCL all-reduce and update are one graph).
  Status CheckpointLastStep(std::string_view why);

 private:
  // Where this rank stands after its last completed step.
  struct Position {
    std::int64_t global_step = 0;
    int epoch = 0;
    std::int64_t epoch_samples = 0;
    std::int64_t step_in_epoch = 0;  // in the world of the pass that reached it
    int world_size = 0;
  };
  // Where a run starts: a kept state, rank 0's checkpoint (if any), the same on every rank.
  struct Start {
    bool recovered = false;  // from a rank's kept state (in-place recovery)
    int source = 0;          // the rank whose state every rank took
    bool resumed = false;
    std::int64_t global_step = 0;
    int epoch = 0;
    std::int64_t epoch_samples = 0;  // of `epoch`, by the whole gang
    int checkpoint_world = 0;        // 0 = unknown or no checkpoint
    std::string warning;             // rank 0: why no checkpoint could be used
    // A recovery's cost and the gang's totals after it (recovered only).
    double idle_seconds = 0;
    std::int64_t steps_lost = 0;
    int recoveries = 0;
    double recovery_seconds = 0;
    std::int64_t recovery_steps_lost = 0;
  };
  class Pass;  // one run: position, schedule, accounting (training_loop.cc)

  StatusOr<Start> SyncStart();
  // The kept state of the most advanced rank, if any rank kept one: every rank takes it.
  StatusOr<std::optional<Start>> SyncKeptState();
  // Accuracy and mean loss over the test set: this rank's shard, then an all-reduce of the sums.
  // `shard_done` runs between the two (the local work ends before the wait for the peers).
  StatusOr<std::pair<double, double>> Evaluate(const std::function<void()>& shard_done = {});
  // Collective: rank 0 writes a checkpoint (when it has a directory) while the others wait,
  // hearing from it (RankZeroWork).
  Status Checkpoint(std::int64_t global_step, int epoch, std::int64_t step_in_epoch,
                    std::int64_t epoch_samples);
  // Runs rank 0's checkpoint work on a helper thread and waits for it (WhileRootWorks with the
  // gang, WorkAlone without).
  using RunWork = std::function<Status(const std::function<Status()>&)>;
  // The one checkpoint writer: rank 0 (`writes`) copies the engine's state (here, or on the
  // helper thread where the engine allows it) into checkpoint_write_ and writes it at `pos` (its
  // optimizer steps are the copy's), as work that owns everything it touches, run by `run`; the
  // others only take part in `run`. `keep_existing`: a checkpoint of that step already there is
  // kept as it is (checkpoint_write_->existed).
  Status WriteCheckpointWith(bool writes, const CheckpointPosition& pos, bool keep_existing,
                             const RunWork& run);
  // How rank 0's checkpoint I/O is waited for: heartbeats under the collective timeout, for up
  // to the checkpoint timeout; `what` names it in the timeout's message.
  comm::RootWorkOptions RankZeroWork(std::string what) const;

  // Rank 0's copy of the state a checkpoint is written from (Checkpoint).
  struct CheckpointWrite {
    std::vector<float> params;
    std::vector<float> state;
    CheckpointPosition pos;
    CheckpointModel model;
    bool existed = false;  // keep_existing found the step's checkpoint there (nothing written)
  };

  TrainConfig config_;
  LoopDeps deps_;
  std::shared_ptr<CheckpointWrite> checkpoint_write_;
  std::optional<Position> last_;  // where the last Run stood when it ended
  std::optional<Position> kept_;  // the state this rank brings to the next Run (Rejoin)
  bool recovering_ = false;       // from BeginRecovery until a Run trains again
  TrainResult so_far_;            // what this process's earlier rounds counted (Rejoin)
  // When this process's first round began training: the run's throughput counts from it.
  std::optional<SteadyTime> first_train_start_;
  // Where the outage of the last failed Run began: its last progress (a completed step, the
  // start of training), or, for a Run that failed before training, the outage before it.
  std::optional<SteadyTime> failed_at_;
  // The step the last failed Run was on: its last completed one, + 1 when it failed inside a
  // step (that step's work is lost).
  std::int64_t failed_step_ = -1;
};

}  // namespace ringtrain::train
