// The seam between the training loop (train::TrainingLoop: resume, schedule, cadence, metrics,
// epilogue — written once) and where a step runs: the CPU engine (runner/train/cpu_engine.h:
// model and optimizer in host memory, gradient buckets all-reduced on a comm thread) or the CUDA
// engine (runner/train/cuda/cuda_engine.h: the step on a GPU, NCCL on a comm stream, CUDA
// graphs, one step of host lag). An engine owns the model, the optimizer and the training input;
// it never decides when to checkpoint, evaluate or stop.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runner/comm/communicator.h"
#include "runner/data/idx.h"
#include "runner/data/table.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/train/checkpoint.h"

namespace ringtrain::train {

struct MemoryProbe;  // model_data.h

// What one rank's engine and loop are given, whatever the engine: one struct for both (the
// loop uses comm, metrics, stop and attempt; the engine everything but stop and attempt).
struct EngineDeps {
  comm::Communicator* comm = nullptr;  // any backend; device collectives through its seam
  // The data: IDX images (train/test) or Tables (train_table/test_table, CSV and NPY; the CPU
  // engine only). One training set; its test set may be null: no evaluation.
  const data::Dataset* train = nullptr;
  const data::Dataset* test = nullptr;
  const data::Table* train_table = nullptr;
  const data::Table* test_table = nullptr;
  metrics::RunnerMetrics* metrics = nullptr;  // may be null
  const std::atomic<bool>* stop = nullptr;    // set by a signal handler; may be null
  // Set by a SIGTERM while draining (common/stop.h): the gang stops at an agreed step boundary.
  const std::atomic<bool>* drain = nullptr;
  int attempt = 0;
  int device = -1;  // the CUDA device this rank computes on; -1 = the CPU
  Duration collective_timeout = comm::kDefaultCollectiveTimeout;
  // How long rank 0's checkpoint read or write may take while the others wait for it.
  Duration checkpoint_timeout = contract::kCheckpointTimeout;
  // Where the CPU engine reads what memory it may use and what of it is in use
  // (ReadMemoryBudget); null: this process's own. A test's fake cgroup.
  const MemoryProbe* memory_probe = nullptr;
  // The ranks of this job on this machine, this one included, that share its memory (the
  // ranks of `ringtrain run`: RINGTRAIN_HOST_RANKS): the CPU engine refuses a model the gang
  // cannot hold together (CheckHostRanksFit), whatever the order they start in.
  int host_ranks = 1;
};

// Where a batch sits in the data, counted in this world's steps.
struct EngineBatch {
  int epoch = 0;
  std::int64_t step = 0;  // within the epoch
  int n = 0;              // samples on this rank
  bool last_in_epoch = false;
  // Samples of the epoch's permutation consumed by the whole gang after this batch: what a
  // checkpoint records, so that it stays valid for a gang of another size.
  std::int64_t epoch_samples_after = 0;
};

// Where the input really starts (a device-resident input starts at a whole step).
struct InputStart {
  std::int64_t steps_per_epoch = 0;
  int epoch = 0;
  std::int64_t epoch_samples = 0;
};

// A step that has completed (its gradients averaged and its update applied).
struct StepStats {
  int n = 0;
  // Time the step waited for the gradient all-reduce after its backward was done.
  double allreduce_wait_seconds = 0;
  double allreduce_seconds = 0;  // the step's gradient collectives took, hidden or not
  double device_seconds = 0;     // time the accelerator spent on the step (0 without one)
};

// This rank's shard of the test set, not yet summed across ranks.
struct EvalSums {
  double loss_sum = 0;  // cross-entropy, or squared error (each sample's mean) for regression
  double correct = 0;   // 0 for regression
  double count = 0;
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;

  virtual std::size_t num_params() const = 0;
  virtual std::size_t optimizer_state_size() const = 0;
  // Rank 0 at resume: the checkpoint's weights and optimizer state (sizes already checked).
  virtual Status Restore(const CheckpointState& checkpoint) = 0;
  // Collective: every rank takes `root`'s weights, and its optimizer state and step count when
  // `optimizer_too` (a resume, or a recovery from a surviving rank's state).
  virtual Status BroadcastFrom(int root, bool optimizer_too, std::int64_t optimizer_steps) = 0;
  // In-place recovery: the engine keeps its model and optimizer and goes on with `comm`, the
  // communicator of the gang's next round (same rank and world size); the input is opened
  // again by the loop. FailedPrecondition where the engine cannot (then the gang restarts).
  virtual Status Rebind(comm::Communicator* comm) {
    (void)comm;
    return FailedPrecondition("this engine cannot recover in place");
  }
  // Host copies of the state for a checkpoint; waits for any step in flight. Vectors that
  // already have the size are reused.
  virtual Status Snapshot(std::vector<float>& params, std::vector<float>& optimizer_state,
                          std::int64_t& optimizer_steps) = 0;
  // Whether Snapshot and Restore may run on another thread than the one that steps, while no
  // step runs (a host engine: the copies are plain memory; not the CUDA engine, whose device is
  // per thread).
  virtual bool copies_state_on_any_thread() const { return false; }
  // The optimizer's step count (what a recovery hands over with the state).
  virtual std::int64_t optimizer_steps() const = 0;

  // Opens the training input at `epoch`, after `epoch_samples` samples of it consumed by the
  // gang (a resume), up to the configured last epoch.
  virtual StatusOr<InputStart> OpenInput(int epoch, std::int64_t epoch_samples) = 0;
  // The next batch, or nullopt after the last epoch. The engine keeps its data for Step.
  virtual StatusOr<std::optional<EngineBatch>> NextBatch() = 0;
  // Seconds the loop spent blocked waiting for input, since OpenInput.
  virtual double data_wait_seconds() const = 0;

  // Runs (or enqueues) one step on the batch NextBatch returned last, at learning rate `lr`.
  // Returns the step that completed during the call, if any: the CPU engine completes every
  // step before returning, the CUDA engine the one before (the host runs one step ahead).
  virtual StatusOr<std::optional<StepStats>> Step(double lr) = 0;
  // Waits for the step in flight, if any, and returns it.
  virtual StatusOr<std::optional<StepStats>> Flush() = 0;
  // The sum of the training losses (each the mean over its batch) of the steps completed since
  // the last call, and how many steps that is. The CUDA engine reads a device accumulator (a
  // pipeline bubble), so the loop calls it once per report, not once per step.
  virtual StatusOr<std::pair<double, std::int64_t>> TakeLoss() = 0;
  // Evaluates this rank's shard of the test set (samples rank, rank+world, ...).
  virtual StatusOr<EvalSums> EvaluateShard() = 0;
  // What a checkpoint records of the model, and what a resume must find there
  // (checkpoint.h); an empty architecture records nothing and checks sizes only.
  virtual ExpectedModel checkpoint_model() const { return {}; }
  // An accelerator runs the steps: the loop then reports its busy fraction.
  virtual bool has_device() const { return false; }
  // The engine replays each step as one captured graph (CUDA graphs).
  virtual bool replays_graph() const { return false; }
};

}  // namespace ringtrain::train
