#include "runner/train/training_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "common/clock.h"
#include "runner/train/checkpoint.h"
#include "runner/train/lr_schedule.h"

namespace ringtrain::train {
namespace {

// Loss, throughput and busy fraction are reported over windows of at least this long (and at
// every epoch end): the CUDA engine's loss read-back is a pipeline bubble.
constexpr double kReportSeconds = 1.0;

}  // namespace

StatusOr<TrainingLoop::Start> TrainingLoop::SyncStart() {
  comm::Communicator& comm = *deps_.comm;
  StepEngine& engine = *deps_.engine;
  // [state (1 resumed, 0 fresh, -1 rank 0 failed), global_step, epoch, epoch_samples,
  //  optimizer_steps, checkpoint world size, status code of rank 0's failure]
  std::int64_t header[7] = {0, 0, 0, 0, 0, 0, 0};
  Start start;
  Status failure;
  if (comm.rank() == 0 && !config_.checkpoint_dir.empty()) {
    // A checkpoint dir that can never work fails the job now, not at the first checkpoint.
    failure = CheckCheckpointDirWritable(config_.checkpoint_dir);
    StatusOr<CheckpointState> ckpt = failure;
    if (failure.ok()) {
      ckpt = LoadNewestCheckpoint(config_.checkpoint_dir, engine.num_params(),
                                  engine.optimizer_state_size());
    }
    if (ckpt.ok()) failure = engine.Restore(*ckpt);
    if (ckpt.ok() && failure.ok()) {
      // The first format knew only the step: it was written by a gang of this size.
      const std::int64_t samples =
          ckpt->epoch_samples >= 0
              ? ckpt->epoch_samples
              : ckpt->step_in_epoch * std::int64_t{config_.batch_size} * comm.size();
      header[0] = 1;
      header[1] = ckpt->global_step;
      header[2] = ckpt->epoch;
      header[3] = samples;
      header[4] = ckpt->optimizer_steps;
      header[5] = ckpt->world_size;
      spdlog::info(
          "resuming from checkpoint at step {} (epoch {}, {} samples of it seen, written at world "
          "size {}, now {})",
          ckpt->global_step, ckpt->epoch, samples,
          ckpt->world_size > 0 ? std::to_string(ckpt->world_size) : std::string("unknown"),
          comm.size());
    } else if (!ckpt.ok() && ckpt.status().code() == StatusCode::kDataLoss) {
      // Checkpoints exist but none is readable: starting over is the only way on, and the user
      // must learn it from the status, not only from a log line.
      start.warning = "starting from step 0: " + ckpt.status().message();
      if (start.warning.size() > 1024) start.warning.resize(1024);
      spdlog::error("{}", start.warning);
      failure = Status::Ok();
    } else if (!ckpt.ok() && ckpt.status().code() == StatusCode::kNotFound) {
      failure = Status::Ok();
    } else {
      if (failure.ok()) failure = ckpt.status();
      header[0] = -1;
      header[6] = static_cast<std::int64_t>(failure.code());
    }
  }
  // The same broadcasts on every rank, in this order.
  RETURN_IF_ERROR(comm.Broadcast(header, sizeof(header), 0).WithContext("broadcast resume point"));
  if (header[0] < 0) {
    // Every rank fails with rank 0's permanent error, so no rank waits for a peer that is gone.
    char message[512] = {};
    if (comm.rank() == 0) {
      std::snprintf(message, sizeof(message), "%s", failure.message().c_str());
    }
    RETURN_IF_ERROR(comm.Broadcast(message, sizeof(message), 0).WithContext("broadcast failure"));
    message[sizeof(message) - 1] = '\0';
    if (comm.rank() == 0) return failure;
    return Status(static_cast<StatusCode>(header[6]), std::string("rank 0: ") + message);
  }
  RETURN_IF_ERROR(engine.BroadcastFromRank0(header[0] != 0, header[4]));
  start.resumed = header[0] != 0;
  start.global_step = header[1];
  start.epoch = static_cast<int>(header[2]);
  start.epoch_samples = header[3];
  start.checkpoint_world = static_cast<int>(header[5]);
  return start;
}

StatusOr<std::pair<double, double>> TrainingLoop::Evaluate() {
  ASSIGN_OR_RETURN(const EvalSums mine, deps_.engine->EvaluateShard());
  float sums[3] = {static_cast<float>(mine.loss_sum), static_cast<float>(mine.correct),
                   static_cast<float>(mine.count)};
  RETURN_IF_ERROR(deps_.comm->AllReduce(sums, 3, comm::ReduceOp::kSum).WithContext("evaluation"));
  if (sums[2] <= 0) return std::pair<double, double>{0.0, 0.0};
  return std::pair<double, double>{sums[1] / sums[2], sums[0] / sums[2]};
}

Status TrainingLoop::Checkpoint(std::int64_t global_step, int epoch, std::int64_t step_in_epoch,
                                std::int64_t epoch_samples) {
  if (deps_.comm->rank() != 0 || config_.checkpoint_dir.empty()) return Status::Ok();
  std::vector<float> params;
  std::vector<float> state;
  CheckpointPosition pos;
  RETURN_IF_ERROR(deps_.engine->Snapshot(params, state, pos.optimizer_steps));
  pos.global_step = global_step;
  pos.epoch = epoch;
  pos.step_in_epoch = step_in_epoch;
  pos.epoch_samples = epoch_samples;
  pos.world_size = deps_.comm->size();
  RETURN_IF_ERROR(
      WriteCheckpoint(config_.checkpoint_dir, pos, params, state).WithContext("checkpoint"));
  if (deps_.metrics) deps_.metrics->IncCheckpoints();
  return Status::Ok();
}

StatusOr<TrainResult> TrainingLoop::Run() {
  comm::Communicator& comm = *deps_.comm;
  StepEngine& engine = *deps_.engine;
  metrics::RunnerMetrics* m = deps_.metrics;
  const int world = comm.size();
  const auto run_start = std::chrono::steady_clock::now();

  ASSIGN_OR_RETURN(const Start start, SyncStart());
  std::int64_t global_step = start.global_step;
  ASSIGN_OR_RETURN(const InputStart input, engine.OpenInput(start.epoch, start.epoch_samples));
  const std::int64_t spe = input.steps_per_epoch;
  const std::int64_t global_batch = std::int64_t{config_.batch_size} * world;
  // The position in the data, in samples: what a checkpoint records.
  int epoch = input.epoch;
  std::int64_t epoch_samples = input.epoch_samples;
  std::int64_t step_in_epoch = epoch_samples / global_batch;
  if (start.checkpoint_world > 0 && start.checkpoint_world != world && comm.rank() == 0) {
    spdlog::info("world size changed from {} to {}: continuing epoch {} at sample {}",
                 start.checkpoint_world, world, epoch, epoch_samples);
  }
  // The LR schedule's position in this world's steps (the global step counts the steps of
  // every world the job ran at, so after a resize it is not the schedule's position).
  const std::int64_t schedule_start =
      std::int64_t{epoch} * spe + (epoch_samples + global_batch - 1) / global_batch;

  LrSchedule lr;
  lr.base = config_.learning_rate;
  lr.peak =
      config_.learning_rate * (config_.lr_scaling == contract::LrScaling::kLinear ? world : 1);
  lr.warmup_steps = static_cast<std::int64_t>(config_.warmup_epochs * static_cast<double>(spe));
  lr.total_steps = spe * config_.epochs;
  lr.cosine = config_.lr_schedule == contract::LrSchedule::kCosine;

  metrics::Progress progress;
  progress.attempt = deps_.attempt;
  progress.world_size = world;
  progress.state = "running";
  progress.steps_total = lr.total_steps;
  progress.epoch = epoch;
  progress.resume_warning = start.warning;
  if (m) m->SetWorldSize(world);

  TrainResult result;
  result.world_size = world;
  result.resumed = start.resumed;
  result.resume_warning = start.warning;
  double last_data_wait = 0;
  std::int64_t samples_done = 0;    // by this rank, completed steps
  std::int64_t window_samples = 0;  // completed in the current report window
  double window_device = 0;
  double total_device = 0;
  double mean_loss = -1;  // over the last report window
  const auto train_start = std::chrono::steady_clock::now();
  auto window_start = train_start;
  auto last_done = train_start;
  bool evaluated_last = false;

  // Host-side accounting of a completed step; identical for every engine.
  auto on_done = [&](const std::optional<StepStats>& done) {
    if (!done) return;
    const auto now = std::chrono::steady_clock::now();
    const double step_seconds = std::chrono::duration<double>(now - last_done).count();
    last_done = now;
    samples_done += done->n;
    window_samples += done->n;
    window_device += done->device_seconds;
    total_device += done->device_seconds;
    result.allreduce_wait_seconds += done->allreduce_wait_seconds;
    result.allreduce_seconds += done->allreduce_seconds;
    if (m) {
      const double data_wait = engine.data_wait_seconds();
      m->ObserveDataWait(data_wait - last_data_wait);
      last_data_wait = data_wait;
      m->ObserveAllReduceWait(done->allreduce_wait_seconds);
      m->ObserveStep(step_seconds, done->n);
    }
  };
  auto report = [&](bool force) -> Status {
    const double window = SecondsSince(window_start);
    if (!force && window < kReportSeconds) return Status::Ok();
    ASSIGN_OR_RETURN(const auto loss, engine.TakeLoss());
    if (loss.second > 0) mean_loss = loss.first / static_cast<double>(loss.second);
    if (window > 0) {
      const double rate = static_cast<double>(window_samples) / window;
      progress.samples_per_second = rate * world;
      if (m) m->SetSamplesPerSecond(rate);
      if (engine.has_device()) {
        result.device_busy = std::min(1.0, window_device / window);
        if (m) m->SetGpuBusy(result.device_busy);
      }
    }
    if (m && mean_loss >= 0) m->SetLoss(mean_loss);
    window_samples = 0;
    window_device = 0;
    window_start = std::chrono::steady_clock::now();
    progress.step = global_step;
    progress.loss = mean_loss;
    if (m) m->UpdateProgress(progress);
    return Status::Ok();
  };

  for (;;) {
    if (config_.max_steps >= 0 && result.steps_this_run >= config_.max_steps) break;
    if (deps_.stop != nullptr && deps_.stop->load()) {
      return Cancelled("stopped by signal at step " + std::to_string(global_step));
    }
    ASSIGN_OR_RETURN(const std::optional<EngineBatch> batch, engine.NextBatch());
    if (!batch) break;
    auto done = engine.Step(lr.At(schedule_start + result.steps_this_run));
    if (!done.ok()) return done.status().WithContext("step " + std::to_string(global_step + 1));
    on_done(*done);
    ++global_step;
    ++result.steps_this_run;
    result.samples_this_run += static_cast<std::int64_t>(batch->n) * world;
    if (config_.step_sleep_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(config_.step_sleep_ms));
    }
    const bool epoch_done = batch->last_in_epoch;
    epoch = epoch_done ? batch->epoch + 1 : batch->epoch;
    step_in_epoch = epoch_done ? 0 : batch->step + 1;
    epoch_samples = epoch_done ? 0 : batch->epoch_samples_after;
    if (m) {
      m->SetStep(global_step);
      m->SetEpoch(batch->epoch);
    }
    progress.epoch = epoch;  // epochs completed
    evaluated_last = false;
    const bool checkpoint_now = global_step % config_.checkpoint_every == 0;
    const bool eval_now = epoch_done && deps_.evaluate && config_.eval_every_epoch;
    if (checkpoint_now || eval_now) {
      ASSIGN_OR_RETURN(const std::optional<StepStats> flushed, engine.Flush());
      on_done(flushed);
    }
    RETURN_IF_ERROR(report(epoch_done));
    if (checkpoint_now)
      RETURN_IF_ERROR(Checkpoint(global_step, epoch, step_in_epoch, epoch_samples));
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
      if (comm.rank() == 0) {
        spdlog::info(
            "epoch {}/{} step {} loss {:.4f} test_accuracy {:.4f} test_loss {:.4f} "
            "samples/s {:.0f}",
            batch->epoch + 1, config_.epochs, global_step, mean_loss, acc_loss.first,
            acc_loss.second, progress.samples_per_second);
      }
    }
    // A step's time runs from the previous step's completion: not through a checkpoint or an
    // evaluation (nothing is in flight after them).
    if (checkpoint_now || eval_now) last_done = std::chrono::steady_clock::now();
  }
  ASSIGN_OR_RETURN(const std::optional<StepStats> last, engine.Flush());
  on_done(last);
  const double train_seconds = SecondsSince(train_start);
  RETURN_IF_ERROR(report(true));

  if (deps_.evaluate && !evaluated_last) {
    ASSIGN_OR_RETURN(auto acc_loss, Evaluate());
    result.test_accuracy = acc_loss.first;
    result.test_loss = acc_loss.second;
    if (m) m->SetTestAccuracy(acc_loss.first);
  }
  if (global_step % config_.checkpoint_every != 0) {
    RETURN_IF_ERROR(Checkpoint(global_step, epoch, step_in_epoch, epoch_samples));
  }
  RETURN_IF_ERROR(comm.Barrier().WithContext("final barrier"));

  result.epochs = epoch;
  result.steps = global_step;
  result.wall_seconds = SecondsSince(run_start);
  result.samples_per_second =
      train_seconds > 0 ? static_cast<double>(samples_done) * world / train_seconds : 0;
  result.data_wait_seconds = engine.data_wait_seconds();
  if (engine.has_device() && train_seconds > 0) {
    result.device_busy = std::min(1.0, total_device / train_seconds);
    if (m) m->SetGpuBusy(result.device_busy);
  }
  progress.state = "succeeded";
  progress.step = global_step;
  progress.epoch = epoch;
  progress.test_accuracy = result.test_accuracy;
  progress.samples_per_second = result.samples_per_second;
  if (m) m->UpdateProgress(progress);
  return result;
}

}  // namespace ringtrain::train
