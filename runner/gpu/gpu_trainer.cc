#include "runner/gpu/gpu_trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "runner/comm/nccl/nccl_communicator.h"
#include "runner/gpu/cuda_util.h"
#include "runner/gpu/device_data.h"
#include "runner/gpu/gpu_model.h"
#include "runner/gpu/gpu_optimizer.h"
#include "runner/train/checkpoint.h"
#include "runner/train/lr_schedule.h"

namespace ringtrain::gpu {
namespace {

// Steps the host may run ahead of the GPU is 1; the ring only has to outlive that lag.
constexpr int kRing = 4;
// How often the loss accumulator is read back (a pipeline bubble each time).
constexpr double kReportSeconds = 1.0;

struct Batch {
  int epoch = 0;
  std::int64_t step = 0;
  int n = 0;
  const float* x = nullptr;  // device; null when the resident dataset gathers it in the step
  const std::int32_t* y = nullptr;
};

struct Bucket {
  std::size_t offset = 0;
  std::size_t count = 0;
  int layers = 0;
  int pending = 0;
};

}  // namespace

struct GpuTrainer::Impl {
  train::TrainConfig config;
  GpuTrainerDeps deps;
  int world = 1;
  int rank = 0;
  bool device_input = true;
  std::string resume_warning;     // rank 0: checkpoints existed but none was readable
  bool reduce_on_device = false;  // NCCL: all-reduce buckets on the comm stream
  bool want_graph = false;
  bool graph_required = false;
  bool graph_used = false;

  Stream compute;
  Stream comm_stream;
  std::unique_ptr<GpuModel> model;
  std::unique_ptr<GpuOptimizer> optimizer;
  std::unique_ptr<DeviceDataset> train_dev;
  std::unique_ptr<DeviceDataset> test_dev;
  std::unique_ptr<PinnedInput> pinned;
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  DeviceBuffer<double> loss_accum;
  DeviceBuffer<double> eval_sums;
  PinnedBuffer<double> host_scalars;  // [loss_accum, eval loss, eval correct]
  PinnedBuffer<float> host_grads;     // staging for a host communicator

  std::vector<Bucket> buckets;
  std::vector<std::size_t> layer_offsets;
  std::vector<std::size_t> bucket_of_layer;
  std::vector<std::unique_ptr<Event>> bucket_events;
  std::size_t next_launch = 0;
  Event comm_done;
  Event sync_event;
  std::array<Event, kRing> step_done;
  std::array<Event, kRing> step_begin;  // timing
  std::array<Event, kRing> step_end;    // timing

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;
  bool graph_failed = false;
  std::int64_t eager_full_steps = 0;

  double busy_ratio = 0;

  ~Impl() {
    if (graph_exec != nullptr) cudaGraphExecDestroy(graph_exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }

  Status WaitFor(cudaEvent_t event, std::string_view what) {
    if (deps.nccl != nullptr) return deps.nccl->Wait(event, what);
    return WaitEvent(event, deps.collective_timeout, what);
  }

  // Everything enqueued on the compute stream so far has finished.
  Status Drain(std::string_view what) {
    RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(sync_event.get(), compute.get()));
    return WaitFor(sync_event.get(), what);
  }

  Status Setup() {
    RT_CUDA_RETURN_IF_ERROR(cudaSetDevice(deps.device));
    RETURN_IF_ERROR(compute.Create());
    RETURN_IF_ERROR(comm_stream.Create(-1));  // higher priority: communication first
    model::ModelConfig mc = config.model;
    mc.channels = 1;
    mc.height = deps.train->rows;
    mc.width = deps.train->cols;
    mc.max_batch = config.batch_size;
    mc.seed = config.seed;
    // The gather kernels trust the data's shape and labels: check them once, here.
    RETURN_IF_ERROR(data::ValidateForModel(*deps.train, mc.height, mc.width, mc.classes));
    if (deps.test != nullptr) {
      RETURN_IF_ERROR(data::ValidateForModel(*deps.test, mc.height, mc.width, mc.classes));
    }
    const MathMode math = config.precision == "tf32" ? MathMode::kTf32 : MathMode::kFp32;
    ASSIGN_OR_RETURN(model, GpuModel::Create(mc, math, compute.get()));
    ASSIGN_OR_RETURN(optimizer,
                     GpuOptimizer::Create(config.optimizer, model->num_params(), compute.get()));
    const auto bs = static_cast<std::size_t>(config.batch_size);
    RETURN_IF_ERROR(x.Allocate(bs * static_cast<std::size_t>(deps.train->sample_size())));
    RETURN_IF_ERROR(y.Allocate(bs));
    RETURN_IF_ERROR(loss_accum.Allocate(1));
    RETURN_IF_ERROR(eval_sums.Allocate(2));
    RETURN_IF_ERROR(host_scalars.Allocate(3));
    RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(loss_accum.data(), 0, sizeof(double), compute.get()));
    if (device_input) {
      ASSIGN_OR_RETURN(train_dev, DeviceDataset::Create(*deps.train, rank, world, config.batch_size,
                                                        config.seed, compute.get()));
    }
    if (deps.test != nullptr) {
      // The test set is small (7.8 MB for Fashion-MNIST): resident in both input modes.
      ASSIGN_OR_RETURN(test_dev, DeviceDataset::Create(*deps.test, rank, world, config.batch_size,
                                                       config.seed, compute.get()));
    }
    if (!reduce_on_device && world > 1) {
      RETURN_IF_ERROR(host_grads.Allocate(model->num_params()));
    }
    RETURN_IF_ERROR(comm_done.Create());
    RETURN_IF_ERROR(sync_event.Create());
    for (int i = 0; i < kRing; ++i) {
      RETURN_IF_ERROR(step_done[i].Create());
      RETURN_IF_ERROR(step_begin[i].Create(/*timing=*/true));
      RETURN_IF_ERROR(step_end[i].Create(/*timing=*/true));
    }
    // Buckets exactly like train::GradReducer: from the last layer back, bucket_cap_bytes each.
    const auto& layers = model->layer_ranges();
    if (layers.empty()) return InvalidArgument("model has no parameters to reduce");
    for (const auto& l : layers) layer_offsets.push_back(l.offset);
    bucket_of_layer.resize(layers.size());
    const std::size_t cap = std::max<std::size_t>(config.bucket_cap_bytes / sizeof(float), 1);
    if (!config.overlap) {
      buckets.push_back({0, model->num_params(), static_cast<int>(layers.size()), 0});
      std::fill(bucket_of_layer.begin(), bucket_of_layer.end(), 0);
    } else {
      for (std::size_t i = layers.size(); i-- > 0;) {
        if (buckets.empty() || buckets.back().count >= cap) buckets.push_back({});
        Bucket& b = buckets.back();
        b.offset = layers[i].offset;
        b.count += layers[i].count;
        ++b.layers;
        bucket_of_layer[i] = buckets.size() - 1;
      }
    }
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      bucket_events.push_back(std::make_unique<Event>());
      RETURN_IF_ERROR(bucket_events.back()->Create());
    }
    return Drain("uploading the model and data");
  }

  // Called at enqueue time when a layer's gradient kernels are on the compute stream.
  Status OnLayerReady(const model::ParamRange& range) {
    if (!reduce_on_device) return Status::Ok();
    auto it = std::lower_bound(layer_offsets.begin(), layer_offsets.end(), range.offset);
    if (it == layer_offsets.end() || *it != range.offset) {
      return Internal("gradient ready for an unknown layer at offset " +
                      std::to_string(range.offset));
    }
    Bucket& b = buckets[bucket_of_layer[static_cast<std::size_t>(it - layer_offsets.begin())]];
    if (--b.pending < 0) return Internal("a layer reported its gradient twice in one step");
    // Launch strictly in bucket order so every rank issues the same sequence of collectives.
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket& l = buckets[next_launch];
      cudaEvent_t ev = bucket_events[next_launch]->get();
      RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev, compute.get()));
      RT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm_stream.get(), ev, 0));
      RETURN_IF_ERROR(deps.nccl->AllReduceAsync(model->grads() + l.offset, l.count,
                                                comm::ReduceOp::kAverage, comm_stream.get()));
      ++next_launch;
    }
    return Status::Ok();
  }

  // The device work of one step (capturable when `capturable`): gather, forward, backward,
  // gradient averaging, optimizer update.
  Status EnqueueStepBody(const Batch& batch) {
    if (batch.x == nullptr) {
      RETURN_IF_ERROR(train_dev->Gather(x.data(), y.data(), batch.n));
    }
    for (auto& b : buckets) b.pending = b.layers;
    next_launch = 0;
    Status ready_status;
    auto on_ready = [&](const model::ParamRange& r) {
      if (ready_status.ok()) ready_status = OnLayerReady(r);
    };
    RETURN_IF_ERROR(
        model->ForwardBackward(x.data(), y.data(), batch.n, loss_accum.data(), on_ready));
    RETURN_IF_ERROR(ready_status);
    if (reduce_on_device) {
      if (next_launch != buckets.size()) {
        return Internal("backward finished with " + std::to_string(buckets.size() - next_launch) +
                        " bucket(s) not ready");
      }
      RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(comm_done.get(), comm_stream.get()));
      RT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute.get(), comm_done.get(), 0));
    }
    return optimizer->Step(model->params(), model->grads());
  }

  // Gradients through host memory for a host communicator (no overlap, not capturable).
  Status EnqueueStepStaged(const Batch& batch, std::int64_t global_step) {
    if (batch.x == nullptr) RETURN_IF_ERROR(train_dev->Gather(x.data(), y.data(), batch.n));
    RETURN_IF_ERROR(model->ForwardBackward(x.data(), y.data(), batch.n, loss_accum.data(),
                                           [](const model::ParamRange&) {}));
    const std::size_t n = model->num_params();
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_grads.data(), model->grads(), n * sizeof(float),
                                            cudaMemcpyDeviceToHost, compute.get()));
    RETURN_IF_ERROR(Drain("backward at step " + std::to_string(global_step)));
    RETURN_IF_ERROR(deps.comm->AllReduce(host_grads.data(), n, comm::ReduceOp::kAverage)
                        .WithContext("gradient all-reduce at step " + std::to_string(global_step)));
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(model->grads(), host_grads.data(), n * sizeof(float),
                                            cudaMemcpyHostToDevice, compute.get()));
    return optimizer->Step(model->params(), model->grads());
  }

  // Captures the full-batch step once. A capture failure falls back to eager launches unless
  // the graph was required.
  Status Capture(const Batch& batch) {
    RT_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(compute.get(), cudaStreamCaptureModeThreadLocal));
    Status body = EnqueueStepBody(batch);
    cudaGraph_t g = nullptr;
    cudaError_t end = cudaStreamEndCapture(compute.get(), &g);
    Status s = body.ok() ? CudaStatus(end, "cudaStreamEndCapture") : body;
    if (s.ok()) {
      s = CudaStatus(cudaGraphInstantiate(&graph_exec, g, 0), "cudaGraphInstantiate");
    }
    if (!s.ok()) {
      if (g != nullptr) cudaGraphDestroy(g);
      (void)cudaGetLastError();
      graph_failed = true;
      if (graph_required) return s.WithContext("capturing the training step in a CUDA graph");
      spdlog::warn("CUDA graph capture failed, launching the step eagerly: {}", s.ToString());
      return Status::Ok();
    }
    graph = g;
    graph_used = true;
    spdlog::info("training step captured in a CUDA graph ({} bucket(s))", buckets.size());
    return Status::Ok();
  }

  Status EnqueueStep(const Batch& batch, std::int64_t global_step, int slot) {
    RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(step_begin[slot].get(), compute.get()));
    if (batch.x != nullptr) {
      // Pinned input: copy the batch into the fixed buffers the (captured) step reads.
      const std::size_t sz = static_cast<std::size_t>(deps.train->sample_size());
      RT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(x.data(), batch.x, static_cast<std::size_t>(batch.n) * sz * sizeof(float),
                          cudaMemcpyDeviceToDevice, compute.get()));
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          y.data(), batch.y, static_cast<std::size_t>(batch.n) * sizeof(std::int32_t),
          cudaMemcpyDeviceToDevice, compute.get()));
    }
    Batch body = batch;
    if (body.x != nullptr) {
      body.x = x.data();
      body.y = y.data();
    }
    const bool full = batch.n == config.batch_size;
    if (!reduce_on_device && world > 1) {
      RETURN_IF_ERROR(EnqueueStepStaged(body, global_step));
    } else if (want_graph && full && !graph_failed && eager_full_steps > 0) {
      // Captured after one eager step, so NCCL's lazy connection setup and cuBLAS/cuDNN's
      // first-call initialization happen outside the capture.
      if (graph_exec == nullptr) RETURN_IF_ERROR(Capture(body));
      if (graph_exec != nullptr) {
        RT_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph_exec, compute.get()));
      } else {
        RETURN_IF_ERROR(EnqueueStepBody(body));
      }
    } else {
      RETURN_IF_ERROR(EnqueueStepBody(body));
      if (full) ++eager_full_steps;
    }
    RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(step_end[slot].get(), compute.get()));
    RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(step_done[slot].get(), compute.get()));
    return Status::Ok();
  }

  // Uploads floats to `device` from rank 0 to every rank (NCCL directly; else via the host).
  Status BroadcastDevice(float* device, std::size_t count, std::string_view what) {
    if (count == 0) return Status::Ok();
    if (deps.nccl != nullptr) {
      return deps.comm->Broadcast(device, count * sizeof(float), 0).WithContext(what);
    }
    std::vector<float> host(count);
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), device, count * sizeof(float),
                                            cudaMemcpyDeviceToHost, compute.get()));
    RETURN_IF_ERROR(Drain(what));
    RETURN_IF_ERROR(deps.comm->Broadcast(host.data(), count * sizeof(float), 0).WithContext(what));
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, host.data(), count * sizeof(float),
                                            cudaMemcpyHostToDevice, compute.get()));
    return Drain(what);
  }

  Status SyncStart(std::int64_t& global_step, int& epoch, std::int64_t& step_in_epoch,
                   bool& resumed) {
    std::int64_t header[5] = {0, 0, 0, 0, 0};
    if (rank == 0 && !config.checkpoint_dir.empty()) {
      auto ckpt = train::LoadNewestCheckpoint(config.checkpoint_dir, model->num_params(),
                                              optimizer->state_size());
      if (ckpt.ok()) {
        RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(model->params(), ckpt->params.data(),
                                                ckpt->params.size() * sizeof(float),
                                                cudaMemcpyHostToDevice, compute.get()));
        if (!ckpt->optimizer_state.empty()) {
          RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(optimizer->state(), ckpt->optimizer_state.data(),
                                                  ckpt->optimizer_state.size() * sizeof(float),
                                                  cudaMemcpyHostToDevice, compute.get()));
        }
        RETURN_IF_ERROR(Drain("restoring the checkpoint"));
        // The position is kept in samples (train::CheckpointPosition); the device input
        // continues at a whole step of this world, so after a resize to a world whose global
        // batch does not divide it, up to one global batch of the epoch is seen twice.
        const std::int64_t global_batch = std::int64_t{config.batch_size} * world;
        const std::int64_t samples =
            ckpt->epoch_samples >= 0 ? ckpt->epoch_samples : ckpt->step_in_epoch * global_batch;
        std::int64_t ckpt_epoch = ckpt->epoch;
        std::int64_t step = samples / global_batch;
        if (samples >= static_cast<std::int64_t>(deps.train->count)) {
          ++ckpt_epoch;
          step = 0;
        }
        header[0] = 1;
        header[1] = ckpt->global_step;
        header[2] = ckpt_epoch;
        header[3] = step;
        header[4] = ckpt->optimizer_steps;
        spdlog::info(
            "resuming from checkpoint at step {} (epoch {}, {} samples of it seen, batch {} at "
            "world size {})",
            ckpt->global_step, ckpt->epoch, samples, step, world);
      } else if (ckpt.status().code() == StatusCode::kDataLoss) {
        // Checkpoints exist but none is readable: start over, and say so in the status.
        resume_warning = "starting from step 0: " + ckpt.status().message();
        if (resume_warning.size() > 1024) resume_warning.resize(1024);
        spdlog::error("{}", resume_warning);
      } else if (ckpt.status().code() != StatusCode::kNotFound) {
        return ckpt.status();
      }
    }
    RETURN_IF_ERROR(Drain("initializing the model"));
    RETURN_IF_ERROR(
        deps.comm->Broadcast(header, sizeof(header), 0).WithContext("broadcast resume point"));
    RETURN_IF_ERROR(BroadcastDevice(model->params(), model->num_params(), "broadcast weights"));
    if (header[0] != 0) {
      RETURN_IF_ERROR(BroadcastDevice(optimizer->state(), optimizer->state_size(),
                                      "broadcast optimizer state"));
      optimizer->set_steps(header[4]);
    }
    resumed = header[0] != 0;
    global_step = header[1];
    epoch = static_cast<int>(header[2]);
    step_in_epoch = header[3];
    return Status::Ok();
  }

  StatusOr<std::pair<double, double>> Evaluate() {
    const std::int64_t count = static_cast<std::int64_t>(deps.test->count);
    const std::int64_t mine = rank < count ? (count - rank + world - 1) / world : 0;
    const std::int64_t bs = config.batch_size;
    RT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(eval_sums.data(), 0, 2 * sizeof(double), compute.get()));
    for (std::int64_t done = 0; done < mine; done += bs) {
      const int n = static_cast<int>(std::min(bs, mine - done));
      RETURN_IF_ERROR(test_dev->GatherPlain(rank + done * world, world, n, x.data(), y.data()));
      RETURN_IF_ERROR(model->Evaluate(x.data(), y.data(), n, eval_sums.data()));
    }
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_scalars.data() + 1, eval_sums.data(),
                                            2 * sizeof(double), cudaMemcpyDeviceToHost,
                                            compute.get()));
    RETURN_IF_ERROR(Drain("evaluation"));
    float sums[3] = {static_cast<float>(host_scalars.data()[1]),
                     static_cast<float>(host_scalars.data()[2]), static_cast<float>(mine)};
    RETURN_IF_ERROR(deps.comm->AllReduce(sums, 3, comm::ReduceOp::kSum).WithContext("evaluation"));
    if (sums[2] <= 0) return std::pair<double, double>{0.0, 0.0};
    return std::pair<double, double>{sums[1] / sums[2], sums[0] / sums[2]};
  }

  Status MaybeCheckpoint(std::int64_t global_step, int epoch, std::int64_t step_in_epoch) {
    if (rank != 0 || config.checkpoint_dir.empty()) return Status::Ok();
    std::vector<float> params(model->num_params());
    std::vector<float> state(optimizer->state_size());
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params.data(), model->params(),
                                            params.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                            compute.get()));
    if (!state.empty()) {
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state.data(), optimizer->state(),
                                              state.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                              compute.get()));
    }
    RETURN_IF_ERROR(Drain("checkpoint"));
    train::CheckpointPosition pos;
    pos.global_step = global_step;
    pos.epoch = epoch;
    pos.step_in_epoch = step_in_epoch;
    pos.epoch_samples = std::min<std::int64_t>(static_cast<std::int64_t>(deps.train->count),
                                               step_in_epoch * config.batch_size * world);
    pos.optimizer_steps = optimizer->steps();
    pos.world_size = world;
    RETURN_IF_ERROR(train::WriteCheckpoint(config.checkpoint_dir, pos, params, state)
                        .WithContext("checkpoint"));
    if (deps.metrics) deps.metrics->IncCheckpoints();
    return Status::Ok();
  }

  // Mean of the per-step losses accumulated since the last read (drains the GPU).
  StatusOr<double> ReadLoss(std::int64_t steps) {
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_scalars.data(), loss_accum.data(), sizeof(double),
                                            cudaMemcpyDeviceToHost, compute.get()));
    RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(loss_accum.data(), 0, sizeof(double), compute.get()));
    RETURN_IF_ERROR(Drain("reading the loss"));
    return steps > 0 ? host_scalars.data()[0] / static_cast<double>(steps) : 0.0;
  }

  StatusOr<train::TrainResult> Run();
};

StatusOr<train::TrainResult> GpuTrainer::Impl::Run() {
  metrics::RunnerMetrics* m = deps.metrics;
  auto run_start = std::chrono::steady_clock::now();
  std::int64_t global_step = 0;
  int epoch = 0;
  std::int64_t step_in_epoch = 0;
  bool resumed = false;
  RETURN_IF_ERROR(SyncStart(global_step, epoch, step_in_epoch, resumed));

  if (!device_input) {
    data::LoaderOptions lo;
    lo.batch_size = config.batch_size;
    lo.workers = config.loader_workers;
    lo.prefetch = config.prefetch;
    lo.rank = rank;
    lo.world_size = world;
    lo.seed = config.seed;
    lo.start_epoch = epoch;
    lo.start_step = step_in_epoch;
    lo.end_epoch = config.epochs;
    ASSIGN_OR_RETURN(pinned, PinnedInput::Create(*deps.train, lo, compute.get()));
  }
  const std::int64_t spe = device_input ? train_dev->steps_per_epoch() : pinned->steps_per_epoch();

  train::LrSchedule lr;
  lr.base = config.learning_rate;
  lr.peak = config.learning_rate * (config.lr_scaling == "linear" ? world : 1);
  lr.warmup_steps = static_cast<std::int64_t>(config.warmup_epochs * static_cast<double>(spe));
  lr.total_steps = spe * config.epochs;
  lr.cosine = config.lr_schedule == "cosine";

  metrics::Progress progress;
  progress.attempt = deps.attempt;
  progress.world_size = world;
  progress.state = "running";
  progress.steps_total = lr.total_steps;
  progress.epoch = epoch;
  progress.resume_warning = resume_warning;
  if (m) m->SetWorldSize(world);

  train::TrainResult result;
  result.world_size = world;
  result.resumed = resumed;
  result.resume_warning = resume_warning;
  std::int64_t samples_run = 0;
  std::int64_t window_samples = 0;
  std::int64_t loss_steps = 0;
  double window_gpu_ms = 0;
  double total_gpu_ms = 0;
  double last_data_wait = 0;
  auto window_start = std::chrono::steady_clock::now();
  auto train_start = window_start;
  auto last_done = window_start;
  double ema_loss = -1;
  bool evaluated_last = false;
  int shuffled_epoch = -1;

  // The step enqueued last and not yet waited for: its ring slot and batch.
  struct InFlight {
    int slot = -1;
    Batch batch;
    std::int64_t global_step = 0;  // after the step
  };
  InFlight in_flight;
  std::int64_t enqueued = 0;

  // Waits for the in-flight step and does its host-side bookkeeping.
  auto complete = [&]() -> Status {
    if (in_flight.slot < 0) return Status::Ok();
    const int slot = in_flight.slot;
    RETURN_IF_ERROR(
        WaitFor(step_done[slot].get(), "training step " + std::to_string(in_flight.global_step)));
    float ms = 0;
    RT_CUDA_RETURN_IF_ERROR(
        cudaEventElapsedTime(&ms, step_begin[slot].get(), step_end[slot].get()));
    window_gpu_ms += ms;
    total_gpu_ms += ms;
    auto now = std::chrono::steady_clock::now();
    const double step_seconds = std::chrono::duration<double>(now - last_done).count();
    last_done = now;
    const Batch& b = in_flight.batch;
    samples_run += b.n;
    window_samples += b.n;
    ++loss_steps;
    if (m) {
      if (pinned) {
        double wait = pinned->wait_seconds();
        m->ObserveDataWait(wait - last_data_wait);
        last_data_wait = wait;
      }
      m->ObserveStep(step_seconds, b.n);
      m->SetStep(in_flight.global_step);
      m->SetEpoch(b.epoch);
    }
    in_flight.slot = -1;
    return Status::Ok();
  };

  auto report = [&](bool force) -> Status {
    double window = SecondsSince(window_start);
    if (!force && window < kReportSeconds) return Status::Ok();
    ASSIGN_OR_RETURN(double loss, ReadLoss(loss_steps));
    if (loss_steps > 0) ema_loss = ema_loss < 0 ? loss : 0.5 * ema_loss + 0.5 * loss;
    loss_steps = 0;
    if (window > 0) {
      double rate = static_cast<double>(window_samples) / window;
      progress.samples_per_second = rate * world;
      busy_ratio = std::min(1.0, window_gpu_ms / (1000.0 * window));
      if (m) {
        m->SetSamplesPerSecond(rate);
        m->SetGpuBusy(busy_ratio);
        m->SetLoss(ema_loss);
      }
    }
    window_samples = 0;
    window_gpu_ms = 0;
    window_start = std::chrono::steady_clock::now();
    progress.step = global_step;
    progress.loss = ema_loss;
    if (m) m->UpdateProgress(progress);
    return Status::Ok();
  };

  for (;;) {
    if (config.max_steps >= 0 && result.steps_this_run >= config.max_steps) break;
    if (deps.stop != nullptr && deps.stop->load()) {
      return Cancelled("stopped by signal at step " + std::to_string(global_step));
    }
    Batch batch;
    if (device_input) {
      if (epoch >= config.epochs) break;
      if (shuffled_epoch != epoch) {
        RETURN_IF_ERROR(train_dev->Shuffle(epoch));
        shuffled_epoch = epoch;
      }
      batch.epoch = epoch;
      batch.step = step_in_epoch;
      batch.n = train_dev->batch_samples(step_in_epoch);
      RETURN_IF_ERROR(train_dev->SetStep(step_in_epoch));
    } else {
      auto next = pinned->Next();
      if (!next.ok()) {
        if (next.status().code() == StatusCode::kNotFound) break;
        return next.status();
      }
      batch.epoch = next->epoch;
      batch.step = next->step;
      batch.n = next->n;
      batch.x = next->x;
      batch.y = next->y;
    }
    RETURN_IF_ERROR(optimizer->SetStep(lr.At(global_step)));
    const int slot = static_cast<int>(enqueued % kRing);
    RETURN_IF_ERROR(EnqueueStep(batch, global_step, slot));
    ++enqueued;
    ++global_step;
    ++result.steps_this_run;
    // One step of lag: wait for the previous step while this one runs.
    RETURN_IF_ERROR(complete());
    in_flight = {slot, batch, global_step};
    if (config.step_sleep_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(config.step_sleep_ms));
    }

    const bool epoch_done = batch.step + 1 == spe;
    const int next_epoch = epoch_done ? batch.epoch + 1 : batch.epoch;
    const std::int64_t next_step = epoch_done ? 0 : batch.step + 1;
    epoch = next_epoch;
    step_in_epoch = next_step;
    progress.epoch = next_epoch;  // epochs completed
    evaluated_last = false;
    const bool checkpoint_now = global_step % config.checkpoint_every == 0;
    const bool eval_now = epoch_done && deps.test != nullptr && config.eval_every_epoch;
    if (checkpoint_now || eval_now) RETURN_IF_ERROR(complete());
    RETURN_IF_ERROR(report(epoch_done));
    if (checkpoint_now) RETURN_IF_ERROR(MaybeCheckpoint(global_step, epoch, step_in_epoch));
    if (eval_now) {
      ASSIGN_OR_RETURN(auto acc_loss, Evaluate());
      result.test_accuracy = acc_loss.first;
      result.test_loss = acc_loss.second;
      evaluated_last = true;
      progress.test_accuracy = acc_loss.first;
      if (m) {
        m->SetTestAccuracy(acc_loss.first);
        m->UpdateProgress(progress);
      }
      if (rank == 0) {
        spdlog::info(
            "epoch {}/{} step {} loss {:.4f} test_accuracy {:.4f} test_loss {:.4f} "
            "samples/s {:.0f} gpu_busy {:.2f}",
            batch.epoch + 1, config.epochs, global_step, ema_loss, acc_loss.first, acc_loss.second,
            progress.samples_per_second, busy_ratio);
      }
    }
  }
  RETURN_IF_ERROR(complete());
  double train_seconds = SecondsSince(train_start);
  RETURN_IF_ERROR(report(true));

  if (deps.test != nullptr && !evaluated_last) {
    ASSIGN_OR_RETURN(auto acc_loss, Evaluate());
    result.test_accuracy = acc_loss.first;
    result.test_loss = acc_loss.second;
    if (m) m->SetTestAccuracy(acc_loss.first);
  }
  if (global_step % config.checkpoint_every != 0) {
    RETURN_IF_ERROR(MaybeCheckpoint(global_step, epoch, step_in_epoch));
  }
  RETURN_IF_ERROR(deps.comm->Barrier().WithContext("final barrier"));

  result.epochs = epoch;
  result.steps = global_step;
  result.wall_seconds = SecondsSince(run_start);
  result.samples_per_second =
      train_seconds > 0 ? static_cast<double>(samples_run) * world / train_seconds : 0;
  result.data_wait_seconds = pinned ? pinned->wait_seconds() : 0;
  busy_ratio = train_seconds > 0 ? std::min(1.0, total_gpu_ms / (1000.0 * train_seconds)) : 0;
  if (m) m->SetGpuBusy(busy_ratio);
  progress.state = "succeeded";
  progress.step = global_step;
  progress.epoch = epoch;
  progress.test_accuracy = result.test_accuracy;
  progress.samples_per_second = result.samples_per_second;
  if (m) m->UpdateProgress(progress);
  return result;
}

GpuTrainer::GpuTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuTrainer::~GpuTrainer() = default;

StatusOr<std::unique_ptr<GpuTrainer>> GpuTrainer::Create(const train::TrainConfig& config,
                                                         GpuTrainerDeps deps) {
  if (deps.comm == nullptr || deps.train == nullptr) {
    return InvalidArgument("GPU trainer needs a communicator and a training set");
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->deps = deps;
  impl->world = deps.comm->size();
  impl->rank = deps.comm->rank();
  impl->device_input = config.input == "device";
  impl->reduce_on_device = deps.nccl != nullptr;
  const bool graphable = impl->reduce_on_device || impl->world == 1;
  if (config.cuda_graph == "on" && !graphable) {
    return InvalidArgument(
        "--cuda-graph: 'on' needs the nccl backend or world size 1 (the tcp backend reduces "
        "gradients on the host between backward and the optimizer)");
  }
  impl->want_graph = config.cuda_graph != "off" && graphable;
  impl->graph_required = config.cuda_graph == "on";
  RETURN_IF_ERROR(impl->Setup());
  return std::unique_ptr<GpuTrainer>(new GpuTrainer(std::move(impl)));
}

StatusOr<train::TrainResult> GpuTrainer::Run() { return impl_->Run(); }
StatusOr<train::TrainResult> GpuTrainer::Run(std::int64_t max_steps) {
  impl_->config.max_steps = max_steps;
  return impl_->Run();
}
double GpuTrainer::busy_ratio() const { return impl_->busy_ratio; }
bool GpuTrainer::graph_used() const { return impl_->graph_used; }

}  // namespace ringtrain::gpu
