#include "runner/train/cuda/cuda_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <vector>

#include "common/clock.h"
#include "runner/cuda/cuda_util.h"
#include "runner/data/cuda/device_data.h"
#include "runner/model/cuda/gpu_model.h"
#include "runner/model/cuda/gpu_optimizer.h"
#include "runner/train/bucket_plan.h"
#include "runner/train/model_data.h"

namespace ringtrain::gpu {
namespace {

// Steps the host may run ahead of the GPU is 1; the ring only has to outlive that lag.
constexpr int kRing = 4;

// A batch on the device: null x when the resident dataset gathers it inside the step. Labels (y)
// or, for a regression table, targets.
struct DeviceStep {
  int n = 0;
  const float* x = nullptr;
  const std::int32_t* y = nullptr;
  const float* targets = nullptr;
};

// Events that time one step's gradient collectives. Two sets, used by alternate steps (and two
// graphs), so the set of the step being completed is never re-recorded by the step in flight.
struct CommTiming {
  Event begin;    // comm stream, before the first bucket's all-reduce
  Event end;      // comm stream, after the last
  Event bwd_end;  // compute stream, backward done (before it waits for the last bucket)
};

}  // namespace

class CudaEngine final : public train::StepEngine {
 public:
  CudaEngine(const train::TrainConfig& config, const train::EngineDeps& deps)
      : config_(config), deps_(deps), device_comm_(deps.comm->device_collectives()) {
    world_ = deps.comm->size();
    rank_ = deps.comm->rank();
    // A CSV/NPY table comes from the host loader's threads through pinned buffers.
    device_input_ = config.input == contract::Input::kDevice && deps.train != nullptr;
    reduce_on_device_ = device_comm_ != nullptr;
  }
  ~CudaEngine() override {
    for (int p = 0; p < 2; ++p) {
      if (graph_exec_[p] != nullptr) cudaGraphExecDestroy(graph_exec_[p]);
      if (graph_[p] != nullptr) cudaGraphDestroy(graph_[p]);
    }
  }

  Status Setup(bool want_graph, bool graph_required);
  bool replays_graph() const override { return graph_used_; }

  std::size_t num_params() const override { return model_->num_params(); }
  std::size_t optimizer_state_size() const override { return optimizer_->state_size(); }
  Status Restore(const train::CheckpointState& ckpt) override;
  Status BroadcastFrom(int root, bool optimizer_too, std::int64_t optimizer_steps) override;
  Status Snapshot(std::vector<float>& params, std::vector<float>& state,
                  std::int64_t& optimizer_steps) override;
  std::int64_t optimizer_steps() const override { return optimizer_->steps(); }
  StatusOr<train::InputStart> OpenInput(int epoch, std::int64_t epoch_samples) override;
  StatusOr<std::optional<train::EngineBatch>> NextBatch() override;
  double data_wait_seconds() const override { return pinned_ ? pinned_->wait_seconds() : 0; }
  StatusOr<std::optional<train::StepStats>> Step(double lr) override;
  StatusOr<std::optional<train::StepStats>> Flush() override { return Complete(); }
  StatusOr<std::pair<double, std::int64_t>> TakeLoss() override;
  StatusOr<train::EvalSums> EvaluateShard() override;
  bool has_device() const override { return true; }
  train::ExpectedModel checkpoint_model() const override { return checkpoint_model_; }

 private:
  Status WaitFor(cudaEvent_t event, std::string_view what) {
    if (device_comm_ != nullptr) return device_comm_->Wait(event, what);
    return WaitEvent(event, deps_.collective_timeout, what);
  }
  // Everything enqueued on the compute stream so far has finished.
  Status Drain(std::string_view what) {
    RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(sync_event_.get(), compute_.get()));
    return WaitFor(sync_event_.get(), what);
  }
  // A timing record that a captured graph replays (a plain record inside a capture is only a
  // dependency edge).
  Status RecordTiming(Event& event, cudaStream_t stream) {
    return CudaStatus(
        cudaEventRecordWithFlags(event.get(), stream, capturing_ ? cudaEventRecordExternal : 0),
        "cudaEventRecordWithFlags");
  }
  Status OnRangeReady(const model::ParamRange& range, int parity);
  // The model's step on the batch in x_ and y_ (labels) or targets_ (regression).
  Status ForwardBackward(int n, const model::GradReadyFn& on_ready) {
    if (shape_.regression) {
      return model_->ForwardBackward(x_.data(), targets_.data(), n, loss_accum_.data(), on_ready);
    }
    return model_->ForwardBackward(x_.data(), y_.data(), n, loss_accum_.data(), on_ready);
  }
  Status EvaluateTable(std::int64_t mine);
  Status EnqueueStepBody(const DeviceStep& batch, int parity);
  Status EnqueueStepStaged(const DeviceStep& batch);
  Status Capture(const DeviceStep& batch, int parity);
  Status EnqueueStep(const DeviceStep& batch, int slot, int parity);
  Status BroadcastDevice(float* device, std::size_t count, int root, std::string_view what);
  StatusOr<std::optional<train::StepStats>> Complete();

  train::TrainConfig config_;
  train::EngineDeps deps_;
  train::DataShape shape_;  // what the model sees of the data
  std::int64_t train_count_ = 0;
  std::int64_t test_count_ = 0;  // 0 without a test set
  train::ExpectedModel checkpoint_model_;
  // The communicator's stream-ordered collectives (NCCL); null for a host backend.
  comm::DeviceCollectives* device_comm_ = nullptr;
  int world_ = 1;
  int rank_ = 0;
  bool device_input_ = true;
  bool reduce_on_device_ = false;  // NCCL: all-reduce buckets on the comm stream
  bool want_graph_ = false;
  bool graph_required_ = false;
  bool graph_used_ = false;
  bool capturing_ = false;

  Stream compute_;
  Stream comm_stream_;
  std::unique_ptr<GpuModel> model_;
  std::unique_ptr<GpuOptimizer> optimizer_;
  std::unique_ptr<DeviceDataset> train_dev_;
  std::unique_ptr<DeviceDataset> test_dev_;
  std::unique_ptr<PinnedInput> pinned_;
  DeviceBuffer<float> x_;
  DeviceBuffer<std::int32_t> y_;  // labels
  DeviceBuffer<float> targets_;   // regression targets
  PinnedBuffer<float> eval_x_;    // a table's test batch, gathered on the host
  PinnedBuffer<std::int32_t> eval_y_;
  PinnedBuffer<float> eval_targets_;
  std::vector<std::size_t> eval_idx_;
  DeviceBuffer<double> loss_accum_;
  DeviceBuffer<double> eval_sums_;
  PinnedBuffer<double> host_scalars_;  // [loss_accum, eval loss, eval correct]
  PinnedBuffer<float> host_grads_;     // staging for a host communicator

  std::optional<train::BucketPlan> plan_;
  std::vector<std::unique_ptr<Event>> bucket_events_;
  Event comm_done_;
  Event sync_event_;
  std::array<Event, kRing> step_done_;
  std::array<Event, kRing> step_begin_;  // timing
  std::array<Event, kRing> step_end_;    // timing
  std::array<CommTiming, 2> comm_timing_;

  cudaGraph_t graph_[2] = {nullptr, nullptr};
  cudaGraphExec_t graph_exec_[2] = {nullptr, nullptr};
  bool graph_failed_ = false;
  std::int64_t eager_full_steps_ = 0;

  // Input position (device-resident input).
  std::int64_t spe_ = 0;
  int epoch_ = 0;
  std::int64_t step_ = 0;
  int shuffled_epoch_ = -1;
  DeviceStep batch_;     // the batch NextBatch returned last
  int batch_epoch_ = 0;  // and its position, which seeds its dropout masks
  std::int64_t batch_step_ = 0;

  // The step enqueued last and not yet completed.
  struct InFlight {
    int slot = -1;
    int parity = 0;
    int n = 0;
    double staged_allreduce = 0;  // host communicator: measured on the host
  };
  InFlight in_flight_;
  std::int64_t enqueued_ = 0;
  std::int64_t loss_steps_ = 0;  // enqueued since the last TakeLoss
};

Status CudaEngine::Setup(bool want_graph, bool graph_required) {
  want_graph_ = want_graph;
  graph_required_ = graph_required;
  RT_CUDA_RETURN_IF_ERROR(cudaSetDevice(deps_.device));
  RETURN_IF_ERROR(compute_.Create());
  RETURN_IF_ERROR(comm_stream_.Create(-1));  // higher priority: communication first
  if (deps_.train != nullptr) {
    shape_ = train::ShapeOf(*deps_.train, config_.model.classes);
    // The gather kernels trust the data's shape and labels: check them once, here.
    RETURN_IF_ERROR(
        data::ValidateForModel(*deps_.train, deps_.train->rows, deps_.train->cols, shape_.outputs));
    if (deps_.test != nullptr) {
      RETURN_IF_ERROR(data::ValidateForModel(*deps_.test, deps_.train->rows, deps_.train->cols,
                                             shape_.outputs));
    }
    train_count_ = static_cast<std::int64_t>(deps_.train->count);
    test_count_ = deps_.test != nullptr ? static_cast<std::int64_t>(deps_.test->count) : 0;
  } else {
    // The loader's Gather and the model trust the table's shape and labels, as on the CPU.
    RETURN_IF_ERROR(data::ValidateTable(*deps_.train_table));
    if (deps_.test_table != nullptr) {
      RETURN_IF_ERROR(data::ValidateTable(*deps_.test_table, deps_.train_table));
    }
    ASSIGN_OR_RETURN(shape_, train::ShapeOf(*deps_.train_table));
    train_count_ = static_cast<std::int64_t>(deps_.train_table->n);
    test_count_ = deps_.test_table != nullptr ? static_cast<std::int64_t>(deps_.test_table->n) : 0;
    if (config_.input == contract::Input::kDevice) {
      spdlog::info("a CSV/NPY table: batches come from the host loader through pinned buffers");
    }
  }
  // The layer list (or the preset built for the data), checked against the data: the CPU
  // engine's model.
  ASSIGN_OR_RETURN(const model::ModelSpec spec, train::ResolveModelSpec(config_, shape_));
  checkpoint_model_ =
      train::CheckpointModelOf(spec, shape_, train::IsPreset(config_, shape_, spec));
  model::ModelConfig mc = config_.model;
  mc.max_batch = config_.batch_size;
  mc.seed = config_.seed;
  mc.dropout_seed = train::DropoutSeed(config_.seed, rank_, 0, 0);
  const MathMode math =
      config_.precision == contract::Precision::kTf32 ? MathMode::kTf32 : MathMode::kFp32;
  ASSIGN_OR_RETURN(model_, GpuModel::Create(spec, mc, math, compute_.get()));
  ASSIGN_OR_RETURN(optimizer_,
                   GpuOptimizer::Create(config_.optimizer, model_->num_params(), compute_.get()));
  const auto bs = static_cast<std::size_t>(config_.batch_size);
  const std::size_t sample = shape_.input.size();
  const std::size_t target_floats = bs * static_cast<std::size_t>(shape_.outputs);
  RETURN_IF_ERROR(x_.Allocate(bs * sample));
  if (shape_.regression) {
    RETURN_IF_ERROR(targets_.Allocate(target_floats));
  } else {
    RETURN_IF_ERROR(y_.Allocate(bs));
  }
  if (deps_.test_table != nullptr) {
    RETURN_IF_ERROR(eval_x_.Allocate(bs * sample));
    if (shape_.regression) {
      RETURN_IF_ERROR(eval_targets_.Allocate(target_floats));
    } else {
      RETURN_IF_ERROR(eval_y_.Allocate(bs));
    }
    eval_idx_.resize(bs);
  }
  RETURN_IF_ERROR(loss_accum_.Allocate(1));
  RETURN_IF_ERROR(eval_sums_.Allocate(2));
  RETURN_IF_ERROR(host_scalars_.Allocate(3));
  RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(loss_accum_.data(), 0, sizeof(double), compute_.get()));
  if (deps_.test != nullptr) {
    // The test set is small (7.8 MB for Fashion-MNIST): resident in both input modes.
    ASSIGN_OR_RETURN(test_dev_,
                     DeviceDataset::Create(*deps_.test, rank_, world_, config_.batch_size,
                                           config_.seed, compute_.get()));
  }
  if (!reduce_on_device_ && world_ > 1) {
    RETURN_IF_ERROR(host_grads_.Allocate(model_->num_params()));
  }
  RETURN_IF_ERROR(comm_done_.Create());
  RETURN_IF_ERROR(sync_event_.Create());
  for (int i = 0; i < kRing; ++i) {
    RETURN_IF_ERROR(step_done_[i].Create());
    RETURN_IF_ERROR(step_begin_[i].Create(/*timing=*/true));
    RETURN_IF_ERROR(step_end_[i].Create(/*timing=*/true));
  }
  for (CommTiming& t : comm_timing_) {
    RETURN_IF_ERROR(t.begin.Create(/*timing=*/true));
    RETURN_IF_ERROR(t.end.Create(/*timing=*/true));
    RETURN_IF_ERROR(t.bwd_end.Create(/*timing=*/true));
  }
  // The CPU engine's bucket plan; the device model reports whole layers.
  ASSIGN_OR_RETURN(
      plan_, train::BucketPlan::Create(model_->layer_ranges(),
                                       config_.bucket_cap_bytes / sizeof(float), config_.overlap));
  for (std::size_t i = 0; i < plan_->buckets().size(); ++i) {
    bucket_events_.push_back(std::make_unique<Event>());
    RETURN_IF_ERROR(bucket_events_.back()->Create());
  }
  return Drain("uploading the model and data");
}

// Called at enqueue time when a layer's gradient kernels are on the compute stream.
Status CudaEngine::OnRangeReady(const model::ParamRange& range, int parity) {
  ASSIGN_OR_RETURN(const auto launch, plan_->MarkReady(range));
  if (!reduce_on_device_) return Status::Ok();
  // Launched strictly in bucket order (the plan's rule), so every rank issues the same
  // sequence of collectives.
  for (std::size_t i = launch.first; i < launch.second; ++i) {
    const train::GradBucket& b = plan_->buckets()[i];
    cudaEvent_t ev = bucket_events_[i]->get();
    RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev, compute_.get()));
    RT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm_stream_.get(), ev, 0));
    if (i == 0) RETURN_IF_ERROR(RecordTiming(comm_timing_[parity].begin, comm_stream_.get()));
    RETURN_IF_ERROR(device_comm_->AllReduceAsync(model_->grads() + b.offset, b.count,
                                                 comm::ReduceOp::kAverage, comm_stream_.get()));
  }
  return Status::Ok();
}

// The device work of one step (capturable): gather, forward, backward, gradient averaging,
// optimizer update.
Status CudaEngine::EnqueueStepBody(const DeviceStep& batch, int parity) {
  if (batch.x == nullptr) RETURN_IF_ERROR(train_dev_->Gather(x_.data(), y_.data(), batch.n));
  plan_->Reset();
  Status ready_status;
  auto on_ready = [&](const model::ParamRange& r) {
    if (ready_status.ok()) ready_status = OnRangeReady(r, parity);
  };
  RETURN_IF_ERROR(ForwardBackward(batch.n, on_ready));
  RETURN_IF_ERROR(ready_status);
  if (!plan_->complete()) {
    return Internal("backward finished with " +
                    std::to_string(plan_->buckets().size() - plan_->launched()) +
                    " gradient bucket(s) not ready");
  }
  if (reduce_on_device_) {
    CommTiming& t = comm_timing_[parity];
    RETURN_IF_ERROR(RecordTiming(t.end, comm_stream_.get()));
    RETURN_IF_ERROR(RecordTiming(t.bwd_end, compute_.get()));
    RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(comm_done_.get(), comm_stream_.get()));
    RT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_.get(), comm_done_.get(), 0));
  }
  return optimizer_->Step(model_->params(), model_->grads());
}

// Gradients through host memory for a host communicator (no overlap, not capturable).
Status CudaEngine::EnqueueStepStaged(const DeviceStep& batch) {
  if (batch.x == nullptr) RETURN_IF_ERROR(train_dev_->Gather(x_.data(), y_.data(), batch.n));
  plan_->Reset();
  Status ready_status;
  RETURN_IF_ERROR(ForwardBackward(batch.n, [&](const model::ParamRange& r) {
    if (ready_status.ok()) ready_status = plan_->MarkReady(r).status();
  }));
  RETURN_IF_ERROR(ready_status);
  const std::size_t n = model_->num_params();
  RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_grads_.data(), model_->grads(), n * sizeof(float),
                                          cudaMemcpyDeviceToHost, compute_.get()));
  RETURN_IF_ERROR(Drain("backward"));
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(deps_.comm->AllReduce(host_grads_.data(), n, comm::ReduceOp::kAverage)
                      .WithContext("gradient all-reduce"));
  in_flight_.staged_allreduce = SecondsSince(start);
  if (deps_.metrics)
    deps_.metrics->ObserveAllReduce(in_flight_.staged_allreduce, n * sizeof(float));
  RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(model_->grads(), host_grads_.data(), n * sizeof(float),
                                          cudaMemcpyHostToDevice, compute_.get()));
  return optimizer_->Step(model_->params(), model_->grads());
}

// Captures the full-batch step once per parity. A capture failure falls back to eager launches
// unless the graph was required.
Status CudaEngine::Capture(const DeviceStep& batch, int parity) {
  RT_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(compute_.get(), cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  Status body = EnqueueStepBody(batch, parity);
  capturing_ = false;
  cudaGraph_t g = nullptr;
  cudaError_t end = cudaStreamEndCapture(compute_.get(), &g);
  Status s = body.ok() ? CudaStatus(end, "cudaStreamEndCapture") : body;
  if (s.ok()) {
    s = CudaStatus(cudaGraphInstantiate(&graph_exec_[parity], g, 0), "cudaGraphInstantiate");
  }
  if (!s.ok()) {
    if (g != nullptr) cudaGraphDestroy(g);
    (void)cudaGetLastError();
    graph_failed_ = true;
    if (graph_required_) return s.WithContext("capturing the training step in a CUDA graph");
    spdlog::warn("CUDA graph capture failed, launching the step eagerly: {}", s.ToString());
    return Status::Ok();
  }
  graph_[parity] = g;
  graph_used_ = true;
  spdlog::info("training step captured in a CUDA graph ({} bucket(s))", plan_->buckets().size());
  return Status::Ok();
}

Status CudaEngine::EnqueueStep(const DeviceStep& batch, int slot, int parity) {
  RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(step_begin_[slot].get(), compute_.get()));
  DeviceStep body = batch;
  if (batch.x != nullptr) {
    // Pinned input: copy the batch into the fixed buffers the (captured) step reads.
    const auto n = static_cast<std::size_t>(batch.n);
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(x_.data(), batch.x,
                                            n * shape_.input.size() * sizeof(float),
                                            cudaMemcpyDeviceToDevice, compute_.get()));
    if (shape_.regression) {
      RT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(targets_.data(), batch.targets,
                          n * static_cast<std::size_t>(shape_.outputs) * sizeof(float),
                          cudaMemcpyDeviceToDevice, compute_.get()));
    } else {
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(y_.data(), batch.y, n * sizeof(std::int32_t),
                                              cudaMemcpyDeviceToDevice, compute_.get()));
    }
    body.x = x_.data();
    body.y = y_.data();
    body.targets = targets_.data();
  }
  const bool full = batch.n == config_.batch_size;
  if (!reduce_on_device_ && world_ > 1) {
    RETURN_IF_ERROR(EnqueueStepStaged(body));
  } else if (want_graph_ && full && !graph_failed_ && eager_full_steps_ > 0) {
    // Captured after one eager step, so NCCL's lazy connection setup and cuBLAS/cuDNN's
    // first-call initialization happen outside the capture.
    if (graph_exec_[parity] == nullptr) RETURN_IF_ERROR(Capture(body, parity));
    if (graph_exec_[parity] != nullptr) {
      RT_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph_exec_[parity], compute_.get()));
    } else {
      RETURN_IF_ERROR(EnqueueStepBody(body, parity));
    }
  } else {
    RETURN_IF_ERROR(EnqueueStepBody(body, parity));
    if (full) ++eager_full_steps_;
  }
  RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(step_end_[slot].get(), compute_.get()));
  RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(step_done_[slot].get(), compute_.get()));
  return Status::Ok();
}

// Uploads floats to `device` from rank 0 to every rank (NCCL directly; else via the host).
Status CudaEngine::BroadcastDevice(float* device, std::size_t count, int root,
                                   std::string_view what) {
  if (count == 0) return Status::Ok();
  if (device_comm_ != nullptr) {
    return deps_.comm->Broadcast(device, count * sizeof(float), root).WithContext(what);
  }
  std::vector<float> host(count);
  RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), device, count * sizeof(float),
                                          cudaMemcpyDeviceToHost, compute_.get()));
  RETURN_IF_ERROR(Drain(what));
  RETURN_IF_ERROR(
      deps_.comm->Broadcast(host.data(), count * sizeof(float), root).WithContext(what));
  RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, host.data(), count * sizeof(float),
                                          cudaMemcpyHostToDevice, compute_.get()));
  return Drain(what);
}

Status CudaEngine::Restore(const train::CheckpointState& ckpt) {
  RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(model_->params(), ckpt.params.data(),
                                          ckpt.params.size() * sizeof(float),
                                          cudaMemcpyHostToDevice, compute_.get()));
  if (!ckpt.optimizer_state.empty()) {
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(optimizer_->state(), ckpt.optimizer_state.data(),
                                            ckpt.optimizer_state.size() * sizeof(float),
                                            cudaMemcpyHostToDevice, compute_.get()));
  }
  return Drain("restoring the checkpoint");
}

Status CudaEngine::BroadcastFrom(int root, bool optimizer_too, std::int64_t optimizer_steps) {
  RETURN_IF_ERROR(Drain("initializing the model"));
  RETURN_IF_ERROR(
      BroadcastDevice(model_->params(), model_->num_params(), root, "broadcast weights"));
  if (optimizer_too) {
    RETURN_IF_ERROR(BroadcastDevice(optimizer_->state(), optimizer_->state_size(), root,
                                    "broadcast optimizer state"));
    optimizer_->set_steps(optimizer_steps);
  }
  return Status::Ok();
}

Status CudaEngine::Snapshot(std::vector<float>& params, std::vector<float>& state,
                            std::int64_t& optimizer_steps) {
  params.resize(model_->num_params());
  state.resize(optimizer_->state_size());
  RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params.data(), model_->params(),
                                          params.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                          compute_.get()));
  if (!state.empty()) {
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state.data(), optimizer_->state(),
                                            state.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                            compute_.get()));
  }
  RETURN_IF_ERROR(Drain("checkpoint"));
  optimizer_steps = optimizer_->steps();
  return Status::Ok();
}

StatusOr<train::InputStart> CudaEngine::OpenInput(int epoch, std::int64_t epoch_samples) {
  const std::int64_t global_batch = std::int64_t{config_.batch_size} * world_;
  const std::int64_t count = train_count_;
  if (epoch_samples >= count) {
    ++epoch;
    epoch_samples = 0;
  }
  if (device_input_) {
    // Uploaded once: a captured step graph reads this dataset's device cursor, so a second run
    // (benchmarks: warm-up, then measure) must keep it.
    if (train_dev_ == nullptr) {
      ASSIGN_OR_RETURN(train_dev_,
                       DeviceDataset::Create(*deps_.train, rank_, world_, config_.batch_size,
                                             config_.seed, compute_.get()));
    }
    shuffled_epoch_ = -1;
    spe_ = train_dev_->steps_per_epoch();
    // The device input continues at a whole step of this world, so after a resize to a world
    // whose global batch does not divide the position, up to one global batch is seen twice.
    epoch_ = epoch;
    step_ = epoch_samples / global_batch;
    return train::InputStart{spe_, epoch_, step_ * global_batch};
  }
  data::LoaderOptions lo;
  lo.batch_size = config_.batch_size;
  lo.workers = config_.loader_workers;
  lo.prefetch = config_.prefetch;
  lo.rank = rank_;
  lo.world_size = world_;
  lo.seed = config_.seed;
  lo.start_epoch = epoch;
  lo.start_samples = epoch_samples;
  lo.end_epoch = config_.epochs;
  // The old pass's input goes first (its pinned and device slots, its loader's prefetch), as on
  // the CPU engine: never two at once. The step copies a batch into the engine's own buffers,
  // so no captured graph reads the old slots; their frees wait for work still reading them.
  pinned_.reset();
  if (deps_.train != nullptr) {
    ASSIGN_OR_RETURN(pinned_, PinnedInput::Create(*deps_.train, lo, compute_.get()));
  } else {
    ASSIGN_OR_RETURN(pinned_, PinnedInput::Create(*deps_.train_table, lo, compute_.get()));
  }
  spe_ = pinned_->steps_per_epoch();
  return train::InputStart{spe_, epoch, epoch_samples};
}

StatusOr<std::optional<train::EngineBatch>> CudaEngine::NextBatch() {
  const std::int64_t global_batch = std::int64_t{config_.batch_size} * world_;
  const std::int64_t count = train_count_;
  train::EngineBatch b;
  if (device_input_) {
    if (epoch_ >= config_.epochs) return std::optional<train::EngineBatch>();
    if (shuffled_epoch_ != epoch_) {
      RETURN_IF_ERROR(train_dev_->Shuffle(epoch_));
      shuffled_epoch_ = epoch_;
    }
    RETURN_IF_ERROR(train_dev_->SetStep(step_));
    b.epoch = epoch_;
    b.step = step_;
    b.n = train_dev_->batch_samples(step_);
    batch_ = DeviceStep{b.n, nullptr, nullptr};
    if (++step_ == spe_) {
      ++epoch_;
      step_ = 0;
    }
  } else {
    if (pinned_ == nullptr) return FailedPrecondition("CUDA engine: NextBatch without OpenInput");
    auto next = pinned_->Next();
    if (!next.ok()) {
      if (next.status().code() == StatusCode::kNotFound) return std::optional<train::EngineBatch>();
      return next.status();
    }
    b.epoch = next->epoch;
    b.step = next->step;
    b.n = next->n;
    batch_ = DeviceStep{next->n, next->x, next->y, next->targets};
  }
  batch_epoch_ = b.epoch;
  batch_step_ = b.step;
  b.last_in_epoch = b.step + 1 == spe_;
  b.epoch_samples_after = b.last_in_epoch ? count : std::min(count, (b.step + 1) * global_batch);
  return std::optional<train::EngineBatch>(b);
}

StatusOr<std::optional<train::StepStats>> CudaEngine::Step(double lr) {
  RETURN_IF_ERROR(optimizer_->SetStep(lr));
  // The CPU engine's masks for this step (uploaded ahead of a captured step, which reads them).
  RETURN_IF_ERROR(
      model_->SeedDropout(train::DropoutSeed(config_.seed, rank_, batch_epoch_, batch_step_)));
  const int slot = static_cast<int>(enqueued_ % kRing);
  const int parity = static_cast<int>(enqueued_ % 2);
  InFlight next{slot, parity, batch_.n, 0};
  const double staged_before = in_flight_.staged_allreduce;
  RETURN_IF_ERROR(EnqueueStep(batch_, slot, parity));
  // EnqueueStepStaged measured this step's all-reduce into in_flight_; keep the previous one's.
  next.staged_allreduce = in_flight_.staged_allreduce;
  in_flight_.staged_allreduce = staged_before;
  ++enqueued_;
  ++loss_steps_;
  // One step of lag: complete the previous step while this one runs.
  ASSIGN_OR_RETURN(auto done, Complete());
  in_flight_ = next;
  return done;
}

StatusOr<std::optional<train::StepStats>> CudaEngine::Complete() {
  if (in_flight_.slot < 0) return std::optional<train::StepStats>();
  const int slot = in_flight_.slot;
  RETURN_IF_ERROR(WaitFor(step_done_[slot].get(), "training step"));
  train::StepStats stats;
  stats.n = in_flight_.n;
  float ms = 0;
  RT_CUDA_RETURN_IF_ERROR(
      cudaEventElapsedTime(&ms, step_begin_[slot].get(), step_end_[slot].get()));
  stats.device_seconds = ms / 1000.0;
  if (!reduce_on_device_ && world_ > 1) {
    // Staged through the host after backward: nothing hides it.
    stats.allreduce_seconds = in_flight_.staged_allreduce;
    stats.allreduce_wait_seconds = in_flight_.staged_allreduce;
  } else if (reduce_on_device_ && world_ > 1) {
    // The same quantities as the CPU engine, from the step's comm events. A timing the driver
    // cannot give (events not recorded in this mode) is left out rather than failing the step.
    CommTiming& t = comm_timing_[in_flight_.parity];
    float comm_ms = 0;
    float wait_ms = 0;
    if (cudaEventElapsedTime(&comm_ms, t.begin.get(), t.end.get()) == cudaSuccess &&
        cudaEventElapsedTime(&wait_ms, t.bwd_end.get(), t.end.get()) == cudaSuccess) {
      stats.allreduce_seconds = comm_ms / 1000.0;
      stats.allreduce_wait_seconds = std::max(0.0f, wait_ms) / 1000.0;
      if (deps_.metrics) {
        deps_.metrics->ObserveAllReduce(stats.allreduce_seconds,
                                        model_->num_params() * sizeof(float));
      }
    } else {
      (void)cudaGetLastError();
    }
  }
  in_flight_.slot = -1;
  return std::optional<train::StepStats>(stats);
}

StatusOr<std::pair<double, std::int64_t>> CudaEngine::TakeLoss() {
  RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_scalars_.data(), loss_accum_.data(), sizeof(double),
                                          cudaMemcpyDeviceToHost, compute_.get()));
  RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(loss_accum_.data(), 0, sizeof(double), compute_.get()));
  RETURN_IF_ERROR(Drain("reading the loss"));
  // The accumulator holds every step enqueued so far, the one in flight included.
  std::pair<double, std::int64_t> out{host_scalars_.data()[0], loss_steps_};
  loss_steps_ = 0;
  return out;
}

StatusOr<train::EvalSums> CudaEngine::EvaluateShard() {
  train::EvalSums sums;
  if (test_count_ == 0) return sums;
  const std::int64_t count = test_count_;
  const std::int64_t mine = rank_ < count ? (count - rank_ + world_ - 1) / world_ : 0;
  const std::int64_t bs = config_.batch_size;
  RT_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(eval_sums_.data(), 0, 2 * sizeof(double), compute_.get()));
  if (test_dev_ != nullptr) {
    for (std::int64_t done = 0; done < mine; done += bs) {
      const int n = static_cast<int>(std::min(bs, mine - done));
      RETURN_IF_ERROR(
          test_dev_->GatherPlain(rank_ + done * world_, world_, n, x_.data(), y_.data()));
      RETURN_IF_ERROR(model_->Evaluate(x_.data(), y_.data(), n, eval_sums_.data()));
    }
  } else {
    RETURN_IF_ERROR(EvaluateTable(mine));
  }
  RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_scalars_.data() + 1, eval_sums_.data(),
                                          2 * sizeof(double), cudaMemcpyDeviceToHost,
                                          compute_.get()));
  RETURN_IF_ERROR(Drain("evaluation"));
  sums.loss_sum = host_scalars_.data()[1];
  sums.correct = host_scalars_.data()[2];
  sums.count = static_cast<double>(mine);
  return sums;
}

// A table's test shard (samples rank, rank + world, ...): gathered on the host into pinned
// buffers, copied, evaluated; the buffers are reused only after the copy has run.
Status CudaEngine::EvaluateTable(std::int64_t mine) {
  const data::Table& t = *deps_.test_table;
  const std::int64_t bs = config_.batch_size;
  const auto outputs = static_cast<std::size_t>(shape_.outputs);
  for (std::int64_t done = 0; done < mine; done += bs) {
    const int n = static_cast<int>(std::min(bs, mine - done));
    for (int i = 0; i < n; ++i) {
      eval_idx_[static_cast<std::size_t>(i)] =
          static_cast<std::size_t>(rank_ + (done + i) * world_);
    }
    RETURN_IF_ERROR(Drain("evaluation"));  // the previous batch's copies have read the buffers
    const auto un = static_cast<std::size_t>(n);
    data::Gather(t, eval_idx_.data(), n, eval_x_.data(),
                 shape_.regression ? nullptr : eval_y_.data(),
                 shape_.regression ? eval_targets_.data() : nullptr);
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(x_.data(), eval_x_.data(),
                                            un * shape_.input.size() * sizeof(float),
                                            cudaMemcpyHostToDevice, compute_.get()));
    if (shape_.regression) {
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(targets_.data(), eval_targets_.data(),
                                              un * outputs * sizeof(float), cudaMemcpyHostToDevice,
                                              compute_.get()));
      RETURN_IF_ERROR(model_->Evaluate(x_.data(), targets_.data(), n, eval_sums_.data()));
    } else {
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(y_.data(), eval_y_.data(), un * sizeof(std::int32_t),
                                              cudaMemcpyHostToDevice, compute_.get()));
      RETURN_IF_ERROR(model_->Evaluate(x_.data(), y_.data(), n, eval_sums_.data()));
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<train::StepEngine>> MakeCudaEngine(const train::TrainConfig& config,
                                                            const train::EngineDeps& deps) {
  if (deps.comm == nullptr || (deps.train == nullptr) == (deps.train_table == nullptr)) {
    return InvalidArgument("CUDA engine needs a communicator and one training set");
  }
  if (deps.device < 0) {
    return InvalidArgument("CUDA engine: device " + std::to_string(deps.device) +
                           " is not a CUDA device ordinal");
  }
  const bool graphable = deps.comm->device_collectives() != nullptr || deps.comm->size() == 1;
  if (config.cuda_graph == contract::CudaGraph::kOn && !graphable) {
    return InvalidArgument(
        "--cuda-graph: 'on' needs the nccl backend or world size 1 (the tcp backend reduces "
        "gradients on the host between backward and the optimizer)");
  }
  auto engine = std::make_unique<CudaEngine>(config, deps);
  RETURN_IF_ERROR(engine->Setup(config.cuda_graph != contract::CudaGraph::kOff && graphable,
                                config.cuda_graph == contract::CudaGraph::kOn));
  return std::unique_ptr<train::StepEngine>(std::move(engine));
}

}  // namespace ringtrain::gpu
