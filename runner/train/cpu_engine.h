// The CPU step engine: model and optimizer in host memory (runner/model), input from the
// prefetching loader (IDX images or a CSV/NPY Table), the model built from its layer list
// (model::Model::Create(spec)), gradient buckets all-reduced by GradReducer's comm thread while
// backward still runs. Every step completes before Step returns.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/status.h"
#include "runner/comm/communicator.h"
#include "runner/data/idx.h"
#include "runner/data/loader.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/model/model.h"
#include "runner/model/optimizer.h"
#include "runner/train/config.h"
#include "runner/train/grad_reducer.h"
#include "runner/train/model_data.h"
#include "runner/train/step_engine.h"

namespace ringtrain::train {

// What a CPU rank of `config` allocates to train `spec` on data of `shape`, besides the datasets
// it loaded before (TrainingDataBytes): the figures CpuEngine::Create checks against the memory
// it may use before it allocates them, and `ringtrain run` against the machine's for the whole
// gang (one computation).
struct CpuRankMemory {
  std::uint64_t params = 0;
  BatchMemory batch;      // activations, the loader's prefetched batches, the evaluation's batch
  ReducerMemory reducer;  // the gradient reducer's bookkeeping
  // The training state (weights, gradients, optimizer state; rank 0 with a checkpoint dir also
  // the copy a checkpoint is written from), the batch and the reducer, saturating.
  std::uint64_t Bytes(std::string_view optimizer, bool checkpoint_copy) const;
};
// What a CPU rank holds besides its model, batches, reducer and datasets: its libraries' data,
// threads' stacks and heap (RssAnon). Measured: 8.6 and 9.0 MB at the peak of the two ranks of
// the wine example (547 parameters, 178 samples), and 8 and 10 MB above the rest of the
// estimate in Fashion-MNIST's MLP. What a gang's pre-check adds for each rank that has not
// started yet (a rank that runs counts its own: MemoryBudget::process_bytes).
inline constexpr std::uint64_t kCpuRankRuntimeBytes = std::uint64_t{10} << 20;
StatusOr<CpuRankMemory> CpuRankMemoryOf(const TrainConfig& config, const model::ModelSpec& spec,
                                        const DataShape& shape);

// Refuses, before anything is allocated, a model that `host_ranks` ranks of this job sharing
// `memory`'s limit cannot hold together (RINGTRAIN_HOST_RANKS: the ranks of `ringtrain run`):
// each needs `need` and as much of its own as this process holds now (its datasets and runtime,
// MemoryBudget::process_bytes), rank 0 its checkpoint copy besides (`checkpoints`), against the
// whole limit: what is in use is left out, as it holds the siblings that started before, and
// the check does not depend on the order the ranks start in. InvalidArgument (permanent) naming
// RINGTRAIN_HOST_RANKS (CheckGangFits). One rank, or no limit known, refuses nothing.
Status CheckHostRanksFit(const CpuRankMemory& need, std::string_view optimizer, bool checkpoints,
                         int host_ranks, const MemoryBudget& memory);

class CpuEngine final : public StepEngine {
 public:
  static StatusOr<std::unique_ptr<CpuEngine>> Create(const TrainConfig& config, EngineDeps deps);

  std::size_t num_params() const override { return model_->params().size(); }
  std::size_t optimizer_state_size() const override { return optimizer_->state().size(); }
  Status Restore(const CheckpointState& checkpoint) override;
  Status BroadcastFrom(int root, bool optimizer_too, std::int64_t optimizer_steps) override;
  Status Rebind(comm::Communicator* comm) override;
  Status Snapshot(std::vector<float>& params, std::vector<float>& optimizer_state,
                  std::int64_t& optimizer_steps) override;
  bool copies_state_on_any_thread() const override { return true; }
  std::int64_t optimizer_steps() const override;
  StatusOr<InputStart> OpenInput(int epoch, std::int64_t epoch_samples) override;
  StatusOr<std::optional<EngineBatch>> NextBatch() override;
  double data_wait_seconds() const override { return loader_ ? loader_->wait_seconds() : 0; }
  StatusOr<std::optional<StepStats>> Step(double lr) override;
  StatusOr<std::optional<StepStats>> Flush() override { return std::optional<StepStats>(); }
  StatusOr<std::pair<double, std::int64_t>> TakeLoss() override;
  StatusOr<EvalSums> EvaluateShard() override;
  ExpectedModel checkpoint_model() const override { return checkpoint_model_; }

  model::Model& model() { return *model_; }

 private:
  CpuEngine(const TrainConfig& config, EngineDeps deps) : config_(config), deps_(deps) {}

  TrainConfig config_;
  EngineDeps deps_;
  bool regression_ = false;  // the model's loss is mse: float targets, no accuracy
  ExpectedModel checkpoint_model_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::Optimizer> optimizer_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<data::PrefetchLoader> loader_;
  data::BatchView batch_;
  // Written on the reducer's comm thread, read after Finish (which orders the two).
  double step_allreduce_seconds_ = 0;
  double loss_sum_ = 0;
  std::int64_t loss_steps_ = 0;
  std::vector<float> eval_x_;
  std::vector<std::int32_t> eval_y_;
  std::vector<float> eval_targets_;
  std::vector<std::size_t> eval_idx_;
};

}  // namespace ringtrain::train
