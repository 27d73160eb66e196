#include "runner/train/trainer.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "common/clock.h"
#include "runner/data/loader.h"
#include "runner/train/bucket_plan.h"
#include "runner/train/checkpoint.h"
#include "runner/train/grad_reducer.h"
#include "runner/train/lr_schedule.h"

namespace ringtrain::train {

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, TrainerDeps deps) {
  if (deps.comm == nullptr || deps.train == nullptr) {
    return InvalidArgument("trainer needs a communicator and a training set");
  }
  std::unique_ptr<Trainer> t(new Trainer(config, deps));
  model::ModelConfig mc = config.model;
  mc.height = deps.train->rows;
  mc.width = deps.train->cols;
  mc.max_batch = config.batch_size;
  mc.seed = config.seed;
  mc.max_grad_slice = GradSliceFloats(config.bucket_cap_bytes, config.overlap);
  // Gather and the model trust the data's shape and labels: check them once, here.
  RETURN_IF_ERROR(data::ValidateForModel(*deps.train, mc.height, mc.width, mc.classes));
  if (deps.test != nullptr) {
    RETURN_IF_ERROR(data::ValidateForModel(*deps.test, mc.height, mc.width, mc.classes));
  }
  ASSIGN_OR_RETURN(t->model_, model::Model::Create(mc));
  ASSIGN_OR_RETURN(t->optimizer_,
                   model::Optimizer::Create(config.optimizer, t->model_->params().size()));
  const auto bs = static_cast<std::size_t>(config.batch_size);
  t->eval_x_.resize(bs * static_cast<std::size_t>(deps.train->sample_size()));
  t->eval_y_.resize(bs);
  t->eval_idx_.resize(bs);
  return t;
}

StatusOr<Trainer::Start> Trainer::SyncStart() {
  comm::Communicator& comm = *deps_.comm;
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
      ckpt = LoadNewestCheckpoint(config_.checkpoint_dir, model_->params().size(),
                                  optimizer_->state().size());
    }
    if (ckpt.ok()) {
      std::copy(ckpt->params.begin(), ckpt->params.end(), model_->params().begin());
      std::copy(ckpt->optimizer_state.begin(), ckpt->optimizer_state.end(),
                optimizer_->state().begin());
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
    } else if (ckpt.status().code() == StatusCode::kDataLoss) {
      // Checkpoints exist but none is readable: starting over is the only way on, and the user
      // must learn it from the status, not only from a log line.
      start.warning = "starting from step 0: " + ckpt.status().message();
      if (start.warning.size() > 1024) start.warning.resize(1024);
      spdlog::error("{}", start.warning);
      failure = Status::Ok();
    } else if (ckpt.status().code() != StatusCode::kNotFound) {
      failure = ckpt.status();
      header[0] = -1;
      header[6] = static_cast<std::int64_t>(failure.code());
    } else {
      failure = Status::Ok();
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
  auto params = model_->params();
  RETURN_IF_ERROR(
      comm.Broadcast(params.data(), params.size_bytes(), 0).WithContext("broadcast weights"));
  if (header[0] != 0) {
    auto state = optimizer_->state();
    RETURN_IF_ERROR(comm.Broadcast(state.data(), state.size_bytes(), 0)
                        .WithContext("broadcast optimizer state"));
    optimizer_->set_steps(header[4]);
  }
  start.resumed = header[0] != 0;
  start.global_step = header[1];
  start.epoch = static_cast<int>(header[2]);
  start.epoch_samples = header[3];
  start.checkpoint_world = static_cast<int>(header[5]);
  return start;
}

StatusOr<std::pair<double, double>> Trainer::Evaluate() {
  const data::Dataset& ds = *deps_.test;
  comm::Communicator& comm = *deps_.comm;
  double loss_sum = 0;
  double correct = 0;
  double count = 0;
  // Disjoint shards without padding: rank r takes r, r+world, ...
  std::size_t i = static_cast<std::size_t>(comm.rank());
  const auto stride = static_cast<std::size_t>(comm.size());
  while (i < ds.count) {
    int n = 0;
    for (; n < config_.batch_size && i < ds.count; ++n, i += stride) eval_idx_[n] = i;
    data::Gather(ds, eval_idx_.data(), n, eval_x_.data(), eval_y_.data());
    auto r = model_->Evaluate(eval_x_.data(), eval_y_.data(), n);
    loss_sum += r.loss_sum;
    correct += static_cast<double>(r.correct);
    count += n;
  }
  float sums[3] = {static_cast<float>(loss_sum), static_cast<float>(correct),
                   static_cast<float>(count)};
  RETURN_IF_ERROR(comm.AllReduce(sums, 3, comm::ReduceOp::kSum).WithContext("evaluation"));
  if (sums[2] <= 0) return std::pair<double, double>{0.0, 0.0};
  return std::pair<double, double>{sums[1] / sums[2], sums[0] / sums[2]};
}

Status Trainer::MaybeCheckpoint(std::int64_t global_step, int epoch, std::int64_t step_in_epoch,
                                std::int64_t epoch_samples) {
  if (deps_.comm->rank() != 0 || config_.checkpoint_dir.empty()) return Status::Ok();
  CheckpointPosition pos;
  pos.global_step = global_step;
  pos.epoch = epoch;
  pos.step_in_epoch = step_in_epoch;
  pos.epoch_samples = epoch_samples;
  pos.optimizer_steps = optimizer_->steps();
  pos.world_size = deps_.comm->size();
  RETURN_IF_ERROR(
      WriteCheckpoint(config_.checkpoint_dir, pos, model_->params(), optimizer_->state())
          .WithContext("checkpoint"));
  if (deps_.metrics) deps_.metrics->IncCheckpoints();
  return Status::Ok();
}

StatusOr<TrainResult> Trainer::Run() {
  comm::Communicator& comm = *deps_.comm;
  metrics::RunnerMetrics* m = deps_.metrics;
  const int world = comm.size();
  auto run_start = std::chrono::steady_clock::now();

  ASSIGN_OR_RETURN(const Start start, SyncStart());
  std::int64_t global_step = start.global_step;

  data::LoaderOptions lo;
  lo.batch_size = config_.batch_size;
  lo.workers = config_.loader_workers;
  lo.prefetch = config_.prefetch;
  lo.rank = comm.rank();
  lo.world_size = world;
  lo.seed = config_.seed;
  lo.start_epoch = start.epoch;
  lo.start_samples = start.epoch_samples;
  lo.end_epoch = config_.epochs;
  ASSIGN_OR_RETURN(auto loader, data::PrefetchLoader::Create(*deps_.train, lo));
  const std::int64_t spe = loader->steps_per_epoch();
  const std::int64_t global_batch = std::int64_t{config_.batch_size} * world;
  // The position in the data, in samples: what a checkpoint records, so that it stays valid
  // for a gang of another size.
  int epoch = loader->start_epoch();
  std::int64_t epoch_samples = loader->start_samples();
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
  lr.peak = config_.learning_rate * (config_.lr_scaling == "linear" ? world : 1);
  lr.warmup_steps = static_cast<std::int64_t>(config_.warmup_epochs * static_cast<double>(spe));
  lr.total_steps = spe * config_.epochs;
  lr.cosine = config_.lr_schedule == "cosine";

  ReducerOptions ro;
  ro.bucket_cap_bytes = config_.bucket_cap_bytes;
  ro.overlap = config_.overlap;
  ro.finish_timeout = 2 * deps_.collective_timeout + std::chrono::seconds(10);
  // Summed on the comm thread, read after the final Finish (which orders it).
  double allreduce_seconds = 0;
  ro.on_allreduce = [m, &allreduce_seconds](double s, std::size_t bytes) {
    allreduce_seconds += s;
    if (m) m->ObserveAllReduce(s, bytes);
  };
  ASSIGN_OR_RETURN(auto reducer, GradReducer::Create(&comm, model_->grads(), model_->grad_ranges(),
                                                     std::move(ro)));

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
  double allreduce_wait = 0;
  double last_data_wait = 0;
  std::int64_t samples_run = 0;
  std::int64_t window_samples = 0;
  auto window_start = std::chrono::steady_clock::now();
  auto train_start = window_start;
  double ema_loss = -1;
  bool evaluated_last = false;
  auto on_ready = [&](const model::ParamRange& r) { reducer->OnRangeReady(r); };

  for (;;) {
    if (config_.max_steps >= 0 && result.steps_this_run >= config_.max_steps) break;
    if (deps_.stop != nullptr && deps_.stop->load()) {
      return Cancelled("stopped by signal at step " + std::to_string(global_step));
    }
    auto step_start = std::chrono::steady_clock::now();
    auto batch = loader->Next();
    if (!batch.ok()) {
      if (batch.status().code() == StatusCode::kNotFound) break;
      return batch.status();
    }
    float loss = model_->ForwardBackward(batch->x, batch->y, batch->n, on_ready);
    auto wait_start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(reducer->Finish().WithContext("gradient all-reduce at step " +
                                                  std::to_string(global_step)));
    double waited = SecondsSince(wait_start);
    allreduce_wait += waited;
    optimizer_->Step(model_->params(), model_->grads(),
                     lr.At(schedule_start + result.steps_this_run));
    ++global_step;
    ++result.steps_this_run;
    samples_run += batch->n;
    result.samples_this_run += static_cast<std::int64_t>(batch->n) * world;
    window_samples += batch->n;
    ema_loss = ema_loss < 0 ? loss : 0.9 * ema_loss + 0.1 * loss;
    if (config_.step_sleep_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(config_.step_sleep_ms));
    }

    const bool epoch_done = batch->last_in_epoch;
    const int next_epoch = epoch_done ? batch->epoch + 1 : batch->epoch;
    const std::int64_t next_step = epoch_done ? 0 : batch->step + 1;
    const std::int64_t next_samples = epoch_done ? 0 : batch->epoch_samples_after;
    if (m) {
      double data_wait = loader->wait_seconds();
      m->ObserveDataWait(data_wait - last_data_wait);
      last_data_wait = data_wait;
      m->ObserveAllReduceWait(waited);
      m->ObserveStep(SecondsSince(step_start), batch->n);
      m->SetLoss(loss);
      m->SetStep(global_step);
      m->SetEpoch(batch->epoch);
    }
    double window = SecondsSince(window_start);
    if (window >= 1.0 || epoch_done) {
      double rate = static_cast<double>(window_samples) / window;
      progress.samples_per_second = rate * world;
      window_samples = 0;
      window_start = std::chrono::steady_clock::now();
      if (m) m->SetSamplesPerSecond(rate);
    }
    progress.step = global_step;
    progress.epoch = next_epoch;  // epochs completed
    progress.loss = ema_loss;
    if (m) m->UpdateProgress(progress);

    if (global_step % config_.checkpoint_every == 0) {
      RETURN_IF_ERROR(MaybeCheckpoint(global_step, next_epoch, next_step, next_samples));
    }
    evaluated_last = false;
    if (epoch_done && deps_.test != nullptr && config_.eval_every_epoch) {
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
            batch->epoch + 1, config_.epochs, global_step, ema_loss, acc_loss.first,
            acc_loss.second, progress.samples_per_second);
      }
    }
    epoch = next_epoch;
    step_in_epoch = next_step;
    epoch_samples = next_samples;
  }
  double train_seconds = SecondsSince(train_start);

  if (deps_.test != nullptr && !evaluated_last) {
    ASSIGN_OR_RETURN(auto acc_loss, Evaluate());
    result.test_accuracy = acc_loss.first;
    result.test_loss = acc_loss.second;
    if (m) m->SetTestAccuracy(acc_loss.first);
  }
  if (global_step % config_.checkpoint_every != 0) {
    RETURN_IF_ERROR(MaybeCheckpoint(global_step, epoch, step_in_epoch, epoch_samples));
  }
  RETURN_IF_ERROR(comm.Barrier().WithContext("final barrier"));

  result.epochs = epoch;
  result.steps = global_step;
  result.wall_seconds = SecondsSince(run_start);
  result.samples_per_second =
      train_seconds > 0 ? static_cast<double>(samples_run) * world / train_seconds : 0;
  result.data_wait_seconds = loader->wait_seconds();
  result.allreduce_wait_seconds = allreduce_wait;
  result.allreduce_seconds = allreduce_seconds;
  progress.state = "succeeded";
  progress.step = global_step;
  progress.epoch = epoch;
  progress.test_accuracy = result.test_accuracy;
  progress.samples_per_second = result.samples_per_second;
  if (m) m->UpdateProgress(progress);
  return result;
}

}  // namespace ringtrain::train
