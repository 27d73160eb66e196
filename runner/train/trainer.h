// The synchronous data-parallel training loop: identical start (rank 0's weights or checkpoint
// broadcast), sharded prefetching input, overlapped bucketed gradient all-reduce, optimizer,
// sharded evaluation, rank-0 checkpoints. Owns no sockets or processes: the communicator,
// datasets and metrics are injected.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/status.h"
#include "runner/comm/communicator.h"
#include "runner/data/idx.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/model/model.h"
#include "runner/model/optimizer.h"
#include "runner/train/config.h"

namespace ringtrain::train {

struct TrainResult {
  double test_accuracy = 0;
  double test_loss = 0;
  int epochs = 0;                     // epochs completed
  std::int64_t steps = 0;             // global optimizer steps at the end
  std::int64_t samples_this_run = 0;  // by the whole gang in this process (after any resume)
  std::int64_t steps_this_run = 0;    // taken by this process (after any resume)
  double wall_seconds = 0;
  double samples_per_second = 0;  // whole job, this run
  int world_size = 1;
  double data_wait_seconds = 0;
  double allreduce_wait_seconds = 0;  // the step waited for gradients after backward
  double allreduce_seconds = 0;       // the collectives took, hidden or not
  bool resumed = false;
  // Rank 0 only: checkpoints existed but none could be read, so training started from step 0.
  std::string resume_warning;
};

struct TrainerDeps {
  comm::Communicator* comm = nullptr;
  const data::Dataset* train = nullptr;
  const data::Dataset* test = nullptr;        // may be null: no evaluation
  metrics::RunnerMetrics* metrics = nullptr;  // may be null
  const std::atomic<bool>* stop = nullptr;    // set by a signal handler; may be null
  int attempt = 0;
  Duration collective_timeout = comm::kDefaultCollectiveTimeout;
};

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Create(const TrainConfig& config, TrainerDeps deps);
  StatusOr<TrainResult> Run();
  model::Model& model() { return *model_; }

 private:
  Trainer(const TrainConfig& config, TrainerDeps deps) : config_(config), deps_(deps) {}
  // Where a run starts: rank 0's checkpoint (if any), the same on every rank.
  struct Start {
    bool resumed = false;
    std::int64_t global_step = 0;
    int epoch = 0;
    std::int64_t epoch_samples = 0;  // of `epoch`, by the whole gang
    int checkpoint_world = 0;        // 0 = unknown or no checkpoint
    std::string warning;             // rank 0: why no checkpoint could be used
  };
  // Restores rank 0's checkpoint (if any) and makes every rank start from rank 0's state.
  StatusOr<Start> SyncStart();
  StatusOr<std::pair<double, double>> Evaluate();  // accuracy, mean loss over the test set
  Status MaybeCheckpoint(std::int64_t global_step, int epoch, std::int64_t step_in_epoch,
                         std::int64_t epoch_samples);

  TrainConfig config_;
  TrainerDeps deps_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::Optimizer> optimizer_;
  std::vector<float> eval_x_;
  std::vector<std::int32_t> eval_y_;
  std::vector<std::size_t> eval_idx_;
};

}  // namespace ringtrain::train
