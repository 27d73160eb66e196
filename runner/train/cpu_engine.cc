#include "runner/train/cpu_engine.h"

#include <algorithm>
#include <new>

#include "common/byte_format.h"
#include "common/clock.h"
#include "common/runner_env.h"
#include "common/saturating.h"
#include "runner/train/bucket_plan.h"
#include "runner/train/model_data.h"

namespace ringtrain::train {
namespace {

// The target floats of a sample: a regression's outputs, else none (a label).
std::size_t TargetFloats(const DataShape& shape) {
  return shape.regression ? static_cast<std::size_t>(shape.outputs) : 0;
}

// What a rank allocates for its batches besides the model's activations: the loader's slots
// (data::PrefetchLoader::SlotBytes, as OpenInput creates it) and one more of the same sizes,
// the evaluation's batch.
std::uint64_t InputBufferBytes(const TrainConfig& config, const DataShape& shape) {
  data::LoaderOptions lo;
  lo.batch_size = config.batch_size;
  lo.prefetch = config.prefetch + 1;
  return data::PrefetchLoader::SlotBytes(lo, shape.input.size(), TargetFloats(shape));
}

// The reducer's options that shape its buckets (the rest are Rebind's).
ReducerOptions ReducerOptionsOf(const TrainConfig& config) {
  ReducerOptions ro;
  ro.bucket_cap_bytes = config.bucket_cap_bytes;
  ro.overlap = config.overlap;
  return ro;
}

}  // namespace

std::uint64_t CpuRankMemory::Bytes(std::string_view optimizer, bool checkpoint_copy) const {
  return SaturatingAdd(
      SaturatingAdd(TrainingStateBytes(params, optimizer, checkpoint_copy), batch.bytes),
      reducer.bytes);
}

StatusOr<CpuRankMemory> CpuRankMemoryOf(const TrainConfig& config, const model::ModelSpec& spec,
                                        const DataShape& shape) {
  model::ModelConfig mc = config.model;
  mc.max_batch = config.batch_size;
  mc.max_grad_slice =
      GradSliceFloats(config.bucket_cap_bytes, config.overlap && config.slice_gradients);
  CpuRankMemory out;
  ASSIGN_OR_RETURN(const model::ShapeReport report, model::InferShapes(spec));
  out.params = report.params;
  ASSIGN_OR_RETURN(const std::uint64_t activations, model::ActivationBytes(spec, mc));
  out.batch = {config.batch_size, SaturatingAdd(activations, InputBufferBytes(config, shape))};
  ASSIGN_OR_RETURN(const std::uint64_t ranges, model::GradRangeCount(spec, mc));
  out.reducer = {ranges, GradReducer::MemoryBytes(ranges, ReducerOptionsOf(config))};
  return out;
}

Status CheckHostRanksFit(const CpuRankMemory& need, std::string_view optimizer, bool checkpoints,
                         int host_ranks, const MemoryBudget& memory) {
  const std::uint64_t state = TrainingStateBytes(need.params, optimizer);
  const std::uint64_t copy =
      checkpoints ? TrainingStateBytes(need.params, optimizer, true) - state : 0;
  const std::string what = "the model's training state, batches and gradient reducer, and " +
                           FormatMegabytes(memory.process_bytes) +
                           " of datasets and runtime each, as this rank holds";
  const std::string where =
      memory.cgroup.empty() ? "this machine has" : "cgroup " + memory.cgroup + " allows";
  return CheckGangFits(contract::kEnvHostRanks, host_ranks,
                       SaturatingAdd(need.Bytes(optimizer, false), memory.process_bytes), copy,
                       what, memory.limit, where);
}

StatusOr<std::unique_ptr<CpuEngine>> CpuEngine::Create(const TrainConfig& config, EngineDeps deps) {
  if (deps.comm == nullptr || (deps.train == nullptr) == (deps.train_table == nullptr)) {
    return InvalidArgument("trainer needs a communicator and one training set");
  }
  std::unique_ptr<CpuEngine> e(new CpuEngine(config, deps));
  DataShape shape;
  if (deps.train != nullptr) {
    shape = ShapeOf(*deps.train, config.model.classes);
    // Gather and the model trust the data's shape and labels: check them once, here.
    RETURN_IF_ERROR(
        data::ValidateForModel(*deps.train, deps.train->rows, deps.train->cols, shape.outputs));
    if (deps.test != nullptr) {
      RETURN_IF_ERROR(
          data::ValidateForModel(*deps.test, deps.train->rows, deps.train->cols, shape.outputs));
    }
  } else {
    RETURN_IF_ERROR(data::ValidateTable(*deps.train_table));
    if (deps.test_table != nullptr) {
      RETURN_IF_ERROR(data::ValidateTable(*deps.test_table, deps.train_table));
    }
    ASSIGN_OR_RETURN(shape, ShapeOf(*deps.train_table));
  }
  ASSIGN_OR_RETURN(const model::ModelSpec spec, ResolveModelSpec(config, shape));
  e->regression_ = shape.regression;
  e->checkpoint_model_ = CheckpointModelOf(spec, shape, IsPreset(config, shape, spec));
  model::ModelConfig mc = config.model;
  mc.max_batch = config.batch_size;
  mc.seed = config.seed;
  mc.max_grad_slice =
      GradSliceFloats(config.bucket_cap_bytes, config.overlap && config.slice_gradients);
  mc.dropout_seed = DropoutSeed(config.seed, deps.comm->rank(), 0, 0);
  // A model this process cannot hold is a permanent error naming its size, not a std::bad_alloc
  // (or an OOM kill) that a restart repeats: refused before allocating when its training state,
  // what its batches take (activations, prefetched and evaluation batches) and the gradient
  // reducer's bookkeeping exceed what this process's memory leaves once what is in use and
  // cannot be reclaimed (the datasets, loaded before, and other processes under the same limit)
  // is taken away; its allocation failing anyway (overcommit refused, other processes' memory)
  // is the same.
  ASSIGN_OR_RETURN(const CpuRankMemory need, CpuRankMemoryOf(config, spec, shape));
  const BatchMemory batch = need.batch;
  const ReducerMemory reducer = need.reducer;
  const std::string& optimizer = config.optimizer.name;
  // Rank 0 also holds the copy a checkpoint is written from (TrainingLoop::Checkpoint).
  const bool checkpoint_copy = deps.comm->rank() == 0 && !config.checkpoint_dir.empty();
  const MemoryBudget budget =
      ReadMemoryBudget(deps.memory_probe != nullptr ? *deps.memory_probe : MemoryProbe{});
  RETURN_IF_ERROR(
      CheckTrainingStateFits(need.params, optimizer, budget, checkpoint_copy, batch, reducer));
  // Its sibling ranks on this machine need as much each, whether they allocated it yet or not:
  // the check above, alone, passes on every rank of a gang that starts at once.
  RETURN_IF_ERROR(
      CheckHostRanksFit(need, optimizer, !config.checkpoint_dir.empty(), deps.host_ranks, budget));
  const auto eval =
      data::PrefetchLoader::SizesOf(config.batch_size, shape.input.size(), TargetFloats(shape));
  try {
    ASSIGN_OR_RETURN(e->model_, model::Model::Create(spec, mc));
    ASSIGN_OR_RETURN(e->optimizer_,
                     model::Optimizer::Create(config.optimizer, e->model_->params().size()));
    e->eval_x_.resize(eval.x);
    e->eval_targets_.resize(eval.targets);
    e->eval_y_.resize(eval.y);
    e->eval_idx_.resize(eval.idx);
  } catch (const std::bad_alloc&) {
    return TrainingStateDoesNotFit(need.params, optimizer, "the allocation failed", false, batch,
                                   reducer);
  }
  RETURN_IF_ERROR(e->Rebind(deps.comm));
  return e;
}

Status CpuEngine::Rebind(comm::Communicator* comm) {
  if (comm == nullptr) return InvalidArgument("CPU engine: no communicator");
  if (reducer_ != nullptr &&
      (comm->rank() != deps_.comm->rank() || comm->size() != deps_.comm->size())) {
    return InvalidArgument("CPU engine: a recovery keeps the rank and the world size");
  }
  // The old reducer's comm thread goes first: it may still hold the old communicator.
  loader_.reset();
  reducer_.reset();
  deps_.comm = comm;
  ReducerOptions ro = ReducerOptionsOf(config_);
  ro.finish_timeout = 2 * deps_.collective_timeout + std::chrono::seconds(10);
  ro.on_allreduce = [this](double s, std::size_t bytes) {
    step_allreduce_seconds_ += s;
    if (deps_.metrics) deps_.metrics->ObserveAllReduce(s, bytes);
  };
  ASSIGN_OR_RETURN(
      reducer_, GradReducer::Create(comm, model_->grads(), model_->grad_ranges(), std::move(ro)));
  return Status::Ok();
}

Status CpuEngine::Restore(const CheckpointState& checkpoint) {
  std::copy(checkpoint.params.begin(), checkpoint.params.end(), model_->params().begin());
  std::copy(checkpoint.optimizer_state.begin(), checkpoint.optimizer_state.end(),
            optimizer_->state().begin());
  return Status::Ok();
}

Status CpuEngine::BroadcastFrom(int root, bool optimizer_too, std::int64_t optimizer_steps) {
  auto params = model_->params();
  RETURN_IF_ERROR(deps_.comm->Broadcast(params.data(), params.size_bytes(), root)
                      .WithContext("broadcast weights"));
  if (optimizer_too) {
    auto state = optimizer_->state();
    RETURN_IF_ERROR(deps_.comm->Broadcast(state.data(), state.size_bytes(), root)
                        .WithContext("broadcast optimizer state"));
    optimizer_->set_steps(optimizer_steps);
  }
  return Status::Ok();
}

std::int64_t CpuEngine::optimizer_steps() const { return optimizer_->steps(); }

Status CpuEngine::Snapshot(std::vector<float>& params, std::vector<float>& optimizer_state,
                           std::int64_t& optimizer_steps) {
  params.assign(model_->params().begin(), model_->params().end());
  optimizer_state.assign(optimizer_->state().begin(), optimizer_->state().end());
  optimizer_steps = optimizer_->steps();
  return Status::Ok();
}

StatusOr<InputStart> CpuEngine::OpenInput(int epoch, std::int64_t epoch_samples) {
  data::LoaderOptions lo;
  lo.batch_size = config_.batch_size;
  lo.workers = config_.loader_workers;
  lo.prefetch = config_.prefetch;
  lo.rank = deps_.comm->rank();
  lo.world_size = deps_.comm->size();
  lo.seed = config_.seed;
  lo.start_epoch = epoch;
  lo.start_samples = epoch_samples;
  lo.end_epoch = config_.epochs;
  // The old loader goes first: the memory check counted one loader's slots (its workers stop).
  loader_.reset();
  if (deps_.train != nullptr) {
    ASSIGN_OR_RETURN(loader_, data::PrefetchLoader::Create(*deps_.train, lo));
  } else {
    ASSIGN_OR_RETURN(loader_, data::PrefetchLoader::Create(*deps_.train_table, lo));
  }
  return InputStart{loader_->steps_per_epoch(), loader_->start_epoch(), loader_->start_samples()};
}

StatusOr<std::optional<EngineBatch>> CpuEngine::NextBatch() {
  if (loader_ == nullptr) return FailedPrecondition("CPU engine: no input opened");
  auto batch = loader_->Next();
  if (!batch.ok()) {
    if (batch.status().code() == StatusCode::kNotFound) return std::optional<EngineBatch>();
    return batch.status();
  }
  batch_ = *batch;
  return std::optional<EngineBatch>(EngineBatch{batch_.epoch, batch_.step, batch_.n,
                                                batch_.last_in_epoch, batch_.epoch_samples_after});
}

StatusOr<std::optional<StepStats>> CpuEngine::Step(double lr) {
  step_allreduce_seconds_ = 0;
  GradReducer* reducer = reducer_.get();
  const auto ready = [reducer](const model::ParamRange& r) { reducer->OnRangeReady(r); };
  model_->SeedDropout(DropoutSeed(config_.seed, deps_.comm->rank(), batch_.epoch, batch_.step));
  const float loss = regression_
                         ? model_->ForwardBackward(batch_.x, batch_.targets, batch_.n, ready)
                         : model_->ForwardBackward(batch_.x, batch_.y, batch_.n, ready);
  const auto wait_start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(reducer_->Finish().WithContext("gradient all-reduce"));
  StepStats stats;
  stats.n = batch_.n;
  stats.allreduce_wait_seconds = SecondsSince(wait_start);
  stats.allreduce_seconds = step_allreduce_seconds_;
  optimizer_->Step(model_->params(), model_->grads(), lr);
  loss_sum_ += loss;
  ++loss_steps_;
  return std::optional<StepStats>(stats);
}

StatusOr<std::pair<double, std::int64_t>> CpuEngine::TakeLoss() {
  std::pair<double, std::int64_t> out{loss_sum_, loss_steps_};
  loss_sum_ = 0;
  loss_steps_ = 0;
  return out;
}

StatusOr<EvalSums> CpuEngine::EvaluateShard() {
  EvalSums sums;
  const std::size_t count = deps_.test != nullptr         ? deps_.test->count
                            : deps_.test_table != nullptr ? deps_.test_table->n
                                                          : 0;
  // Disjoint shards without padding: rank r takes r, r+world, ...
  std::size_t i = static_cast<std::size_t>(deps_.comm->rank());
  const auto stride = static_cast<std::size_t>(deps_.comm->size());
  while (i < count) {
    int n = 0;
    for (; n < config_.batch_size && i < count; ++n, i += stride) eval_idx_[n] = i;
    model::EvalResult r;
    if (deps_.test != nullptr) {
      data::Gather(*deps_.test, eval_idx_.data(), n, eval_x_.data(), eval_y_.data());
      r = model_->Evaluate(eval_x_.data(), eval_y_.data(), n);
    } else if (regression_) {
      data::Gather(*deps_.test_table, eval_idx_.data(), n, eval_x_.data(), nullptr,
                   eval_targets_.data());
      r = model_->Evaluate(eval_x_.data(), eval_targets_.data(), n);
    } else {
      data::Gather(*deps_.test_table, eval_idx_.data(), n, eval_x_.data(), eval_y_.data(), nullptr);
      r = model_->Evaluate(eval_x_.data(), eval_y_.data(), n);
    }
    sums.loss_sum += r.loss_sum;
    sums.correct += static_cast<double>(r.correct);
    sums.count += n;
  }
  return sums;
}

}  // namespace ringtrain::train
