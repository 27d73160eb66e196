#include "runner/train/training_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/runner_contract.h"
#include "runner/train/checkpoint.h"
#include "runner/train/lr_schedule.h"

namespace ringtrain::train {
namespace {

// Loss, throughput and busy fraction are reported over windows of at least this long (and at
// every epoch end): the CUDA engine's loss read-back is a pipeline bubble.
constexpr double kReportSeconds = 1.0;

// A step loss that is not finite: the weights are NaN or infinite from here on (synchronous data
// parallelism: every rank's), and training them on, or restarting from the last checkpoint with
// the same settings, repeats it. FailedPrecondition, permanent: the job fails with this cause,
// its checkpoints (none written after the divergence was read) kept for a run with new settings.
Status DivergedLoss(double sum, std::int64_t after_step, std::int64_t step) {
  return FailedPrecondition(
      "the training loss is " + std::string(std::isnan(sum) ? "NaN" : "infinite") + " in steps " +
      std::to_string(after_step + 1) + ".." + std::to_string(step) + ": " +
      std::string(kDivergedCauses) +
      "; stopped, since every step from here on trains NaN weights, and a restart from the "
      "last checkpoint with the same settings does the same");
}

// The engine lent to a helper thread of comm::WhileRootWorks (a copy of the state into or out of
// it): the helper touches the engine only while it holds `mu` and `returned` is false, and the
// loop sets `returned` once WhileRootWorks is back, so a helper left behind (a timeout, a stop)
// never touches an engine that is gone.
struct EngineLease {
  std::mutex mu;
  bool returned = false;
  // Runs `copy` on the engine unless the loop is already back.
  Status Use(const std::function<Status()>& copy) {
    std::lock_guard<std::mutex> lock(mu);
    if (returned) return Aborted("the training loop stopped waiting for this copy");
    return copy();
  }
  // The loop is back: waits for a copy in progress, and no later one starts.
  void Return() {
    std::lock_guard<std::mutex> lock(mu);
    returned = true;
  }
};

}  // namespace

StatusOr<std::optional<TrainingLoop::Start>> TrainingLoop::SyncKeptState() {
  comm::Communicator& comm = *deps_.comm;
  const int world = comm.size();
  // From every rank: [kept (0/1), its global step, the step it failed on, µs since it failed,
  // and its totals of recoveries, steps lost and µs without training]. A replacement knows none
  // of these (-1, 0): the survivors' values are the gang's.
  constexpr std::size_t kFields = 7;
  const auto us_since_failure =
      failed_at_ ? static_cast<std::int64_t>(SecondsSince(*failed_at_) * 1e6) : -1;
  std::int64_t mine[kFields] = {kept_ ? 1 : 0,
                                kept_ ? kept_->global_step : -1,
                                failed_at_ ? failed_step_ : -1,
                                us_since_failure,
                                so_far_.recoveries,
                                so_far_.recovery_steps_lost,
                                static_cast<std::int64_t>(so_far_.recovery_seconds * 1e6)};
  std::vector<std::int64_t> all(kFields * static_cast<std::size_t>(world));
  RETURN_IF_ERROR(comm.AllGather(mine, sizeof(mine), all.data()).WithContext("gather kept states"));
  int source = -1;
  std::int64_t best = -1;
  std::int64_t reached = -1;
  std::int64_t idle_us = 0;
  std::int64_t totals[3] = {0, 0, 0};
  for (int r = 0; r < world; ++r) {
    const std::int64_t* f = &all[kFields * static_cast<std::size_t>(r)];
    if (f[0] != 0 && f[1] > best) {
      best = f[1];
      source = r;
    }
    reached = std::max(reached, f[2]);
    idle_us = std::max(idle_us, f[3]);
    for (int t = 0; t < 3; ++t) totals[t] = std::max(totals[t], f[4 + t]);
  }
  if (source < 0) return std::optional<Start>();
  // [global_step, epoch, epoch_samples, optimizer_steps] of the source.
  std::int64_t pos[4] = {0, 0, 0, 0};
  if (comm.rank() == source) {
    pos[3] = deps_.engine->optimizer_steps();  // the state itself goes in BroadcastFrom
    pos[0] = kept_->global_step;
    pos[1] = kept_->epoch;
    pos[2] = kept_->epoch_samples;
  }
  RETURN_IF_ERROR(comm.Broadcast(pos, sizeof(pos), source).WithContext("broadcast kept position"));
  // A rank that kept another step than the source's would hold a mix of the two if the transfer
  // broke off: it keeps nothing until the transfer is complete.
  if (comm.rank() != source && kept_ && kept_->global_step != pos[0]) {
    kept_.reset();
    last_.reset();
  }
  RETURN_IF_ERROR(deps_.engine->BroadcastFrom(source, /*optimizer_too=*/true, pos[3]));
  Start start;
  start.recovered = true;
  start.source = source;
  start.resumed = true;
  start.global_step = pos[0];
  start.epoch = static_cast<int>(pos[1]);
  start.epoch_samples = pos[2];
  start.idle_seconds = static_cast<double>(idle_us) / 1e6;
  start.steps_lost = std::max<std::int64_t>(0, reached - start.global_step);
  start.recoveries = static_cast<int>(totals[0]) + 1;
  start.recovery_steps_lost = totals[1] + start.steps_lost;
  start.recovery_seconds = static_cast<double>(totals[2]) / 1e6 + start.idle_seconds;
  if (comm.rank() == 0) {
    spdlog::info(
        "recovered in place: every rank continues from rank {}'s state at step {} ({} step(s) "
        "lost, {:.1f}s without training; {} in-place recoveries, {} steps lost, {:.1f}s in all)",
        source, start.global_step, start.steps_lost, start.idle_seconds, start.recoveries,
        start.recovery_steps_lost, start.recovery_seconds);
  }
  return std::optional<Start>(start);
}

Status TrainingLoop::Rejoin(comm::Communicator* comm) {
  if (comm == nullptr) return InvalidArgument("training loop: no communicator to rejoin with");
  RETURN_IF_ERROR(deps_.engine->Rebind(comm));
  deps_.comm = comm;
  kept_ = last_;
  return Status::Ok();
}

void TrainingLoop::BeginRecovery(std::string_view cause) {
  recovering_ = true;
  // Only a first Run that failed before the gang agreed on its start has no failure time.
  if (deps_.metrics) {
    deps_.metrics->BeginRecovery(failed_at_.value_or(std::chrono::steady_clock::now()), cause);
  }
}

StatusOr<TrainingLoop::Start> TrainingLoop::SyncStart() {
  ASSIGN_OR_RETURN(const std::optional<Start> kept, SyncKeptState());
  if (kept) return *kept;
  comm::Communicator& comm = *deps_.comm;
  StepEngine& engine = *deps_.engine;
  // [state (1 resumed, 0 fresh, -1 rank 0 failed), global_step, epoch, epoch_samples,
  //  optimizer_steps, checkpoint world size, status code of rank 0's failure]
  std::int64_t header[7] = {0, 0, 0, 0, 0, 0, 0};
  Start start;
  Status failure;
  // Rank 0 reads its newest checkpoint while the others hear from it: a large one on a slow
  // volume may take longer than the collective timeout they would otherwise wait in. The helper
  // thread touches only what it owns, and a host engine under a lease (it restores the state
  // there); the CUDA engine restores it here.
  const bool reads = comm.rank() == 0 && !config_.checkpoint_dir.empty();
  auto read = std::make_shared<StatusOr<CheckpointState>>(NotFound("no checkpoint dir"));
  // The start-up probe of the dir, apart from the read: its NotFound (a dir that cannot be
  // created, e.g. under /proc) is a dir that can never work, not "no checkpoint yet".
  auto probe = std::make_shared<Status>();
  // A host engine takes the checkpoint's state on the helper thread too (Restore copies it all).
  const bool restore_there = engine.copies_state_on_any_thread();
  auto restored = std::make_shared<Status>();
  auto lease = std::make_shared<EngineLease>();
  const std::string dir = config_.checkpoint_dir;
  const ExpectedModel expected = engine.checkpoint_model();
  const std::size_t params = engine.num_params();
  const std::size_t state = engine.optimizer_state_size();
  StepEngine* lent = &engine;
  const Status worked = comm::WhileRootWorks(
      comm,
      [read, probe, reads, dir, expected, params, state, restore_there, restored, lease, lent] {
        if (!reads) return Status::Ok();
        // A checkpoint dir that can never work fails the job now, not at the first checkpoint.
        *probe = CheckCheckpointDirWritable(dir);
        if (!probe->ok()) return Status::Ok();
        *read = LoadNewestCheckpoint(dir, params, state,
                                     expected.model.architecture.empty() ? nullptr : &expected);
        if (restore_there && read->ok()) {
          *restored = lease->Use([&] { return lent->Restore(**read); });
        }
        return Status::Ok();
      },
      RankZeroWork("checkpoint read"));
  lease->Return();
  RETURN_IF_ERROR(worked);
  if (reads) {
    StatusOr<CheckpointState>& ckpt = *read;
    if (ckpt.ok()) failure = restore_there ? *restored : engine.Restore(*ckpt);
    if (!probe->ok()) {
      // The job's field, whatever the code: the operator and `ringtrain run` pass
      // spec.checkpoint.path (or their default) as --checkpoint-dir.
      failure = probe->WithContext("spec.checkpoint.path (--checkpoint-dir) cannot be used");
      header[0] = -1;
      header[6] = static_cast<std::int64_t>(failure.code());
    } else if (ckpt.ok() && failure.ok()) {
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
      // What the volume may heal, after the read's own retries: marked, so that the ranks exit
      // for a gang restart instead of taking it for a lost peer (runner_contract.h).
      if (failure.retryable() && failure.code() != StatusCode::kCancelled) {
        failure =
            Status(failure.code(), std::string(contract::kCheckpointIoFailed) + failure.message());
      }
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
    // Rank 0's failure, said as the contract says another rank's (runner_contract.h): the
    // operator and `ringtrain run` then name rank 0, whichever rank exits first.
    const Status root(static_cast<StatusCode>(header[6]), message);
    return Status(root.code(), std::string(contract::kCausedByPrefix) + "0: " + root.ToString());
  }
  RETURN_IF_ERROR(engine.BroadcastFrom(0, header[0] != 0, header[4]));
  start.resumed = header[0] != 0;
  start.global_step = header[1];
  start.epoch = static_cast<int>(header[2]);
  start.epoch_samples = header[3];
  start.checkpoint_world = static_cast<int>(header[5]);
  return start;
}

StatusOr<std::pair<double, double>> TrainingLoop::Evaluate(
    const std::function<void()>& shard_done) {
  ASSIGN_OR_RETURN(const EvalSums mine, deps_.engine->EvaluateShard());
  if (shard_done) shard_done();
  float sums[3] = {static_cast<float>(mine.loss_sum), static_cast<float>(mine.correct),
                   static_cast<float>(mine.count)};
  RETURN_IF_ERROR(deps_.comm->AllReduce(sums, 3, comm::ReduceOp::kSum).WithContext("evaluation"));
  if (sums[2] <= 0) return std::pair<double, double>{0.0, 0.0};
  return std::pair<double, double>{sums[1] / sums[2], sums[0] / sums[2]};
}

comm::RootWorkOptions TrainingLoop::RankZeroWork(std::string what) const {
  comm::RootWorkOptions o;
  o.heartbeat = comm::HeartbeatFor(deps_.collective_timeout);
  o.timeout = deps_.checkpoint_timeout;
  o.what = std::move(what);
  o.timeout_name = contract::kEnvCheckpointTimeout;
  return o;
}

Status TrainingLoop::Checkpoint(std::int64_t global_step, int epoch, std::int64_t step_in_epoch,
                                std::int64_t epoch_samples) {
  // Every rank takes part, with or without a directory: the others wait for rank 0's write
  // hearing from it (comm/root_work.h), so a write longer than the collective timeout fails no
  // one.
  const bool writes = deps_.comm->rank() == 0 && !config_.checkpoint_dir.empty();
  CheckpointPosition pos;
  pos.global_step = global_step;
  pos.epoch = epoch;
  pos.step_in_epoch = step_in_epoch;
  pos.epoch_samples = epoch_samples;
  pos.world_size = deps_.comm->size();
  const std::string what = "checkpoint write at step " + std::to_string(global_step);
  return WriteCheckpointWith(writes, pos, /*keep_existing=*/false,
                             [this, &what](const std::function<Status()>& work) {
                               return comm::WhileRootWorks(*deps_.comm, work, RankZeroWork(what));
                             });
}

Status TrainingLoop::WriteCheckpointWith(bool writes, const CheckpointPosition& pos,
                                         bool keep_existing, const RunWork& run) {
  // The helper thread copies the state too where the engine allows it (a host engine): a copy
  // of a large model takes longer than a short collective timeout on a loaded machine. The
  // copy's buffers stay for the next checkpoint (no fresh pages to fault in each time), unless a
  // helper left behind by a timeout still holds them.
  if (!checkpoint_write_ || checkpoint_write_.use_count() > 1) {
    checkpoint_write_ = std::make_shared<CheckpointWrite>();
  }
  std::shared_ptr<CheckpointWrite> write = checkpoint_write_;
  StepEngine* engine = deps_.engine;
  const bool copy_here = writes && !engine->copies_state_on_any_thread();
  write->existed = false;
  if (writes) {
    write->pos = pos;  // its optimizer steps are the copy's (Snapshot)
    write->model = engine->checkpoint_model().model;
  }
  if (copy_here) {
    RETURN_IF_ERROR(engine->Snapshot(write->params, write->state, write->pos.optimizer_steps));
  }
  const std::string dir = config_.checkpoint_dir;
  auto lease = std::make_shared<EngineLease>();
  const Status worked =
      run([write, dir, writes, keep_existing, copy_there = writes && !copy_here, engine, lease] {
        if (!writes) return Status::Ok();
        if (keep_existing) {
          std::error_code ec;
          if (std::filesystem::exists(CheckpointPath(dir, write->pos.global_step), ec)) {
            write->existed = true;
            return Status::Ok();
          }
        }
        if (copy_there) {
          RETURN_IF_ERROR(lease->Use([&] {
            return engine->Snapshot(write->params, write->state, write->pos.optimizer_steps);
          }));
        }
        Status wrote = WriteCheckpoint(dir, write->pos, write->model, write->params, write->state);
        // A write the volume refused for now (EIO, a rename refused): no lost peer either.
        if (wrote.retryable() && wrote.code() != StatusCode::kCancelled) {
          return Status(wrote.code(), std::string(contract::kCheckpointIoFailed) +
                                          "checkpoint: " + wrote.message());
        }
        return wrote.WithContext("checkpoint");
      });
  lease->Return();
  RETURN_IF_ERROR(worked);
  if (writes && !write->existed && deps_.metrics) deps_.metrics->IncCheckpoints();
  return Status::Ok();
}

Status TrainingLoop::CheckpointKeptState(std::string_view why) {
  if (!recovering_) return Status::Ok();
  return CheckpointLastStep(why);
}

Status TrainingLoop::CheckpointLastStep(std::string_view why) {
  // Only rank 0 writes checkpoints; the others' state is the same (synchronous data
  // parallelism). A run that failed before the gang agreed on its start, or a transfer of
  // another rank's state that broke off, leaves nothing kept. Not recovering, the last Run
  // trained (its pass began: a first Run that failed before has no position) and `last_` is
  // where it ended.
  if (!last_ || config_.checkpoint_dir.empty() || deps_.comm->rank() != 0) return Status::Ok();
  const Position& at = *last_;
  CheckpointPosition pos;
  pos.global_step = at.global_step;
  pos.epoch = at.epoch;
  pos.step_in_epoch = at.step_in_epoch;
  pos.epoch_samples = at.epoch_samples;
  pos.world_size = at.world_size;
  const comm::RootWorkOptions options =
      RankZeroWork("checkpoint of the kept state at step " + std::to_string(at.global_step));
  RETURN_IF_ERROR(WriteCheckpointWith(
      /*writes=*/true, pos, /*keep_existing=*/true,
      [&options](const std::function<Status()>& work) { return comm::WorkAlone(work, options); }));
  if (checkpoint_write_->existed) {
    spdlog::info("{}: the state this rank kept is step {}'s, already checkpointed", why,
                 at.global_step);
    return Status::Ok();
  }
  spdlog::info(
      "{}: checkpoint written of the state this rank kept, at step {} (epoch {}, {} samples of "
      "it seen)",
      why, at.global_step, at.epoch, at.epoch_samples);
  return Status::Ok();
}

// One run of the loop: the position in the data, the learning-rate schedule, and the
// accounting of completed steps (throughput, waits, device time) with one meaning whatever the
// engine. TrainingLoop::Run drives it: Begin, then Advance per batch, then Finish.
class TrainingLoop::Pass {
 public:
  Pass(TrainingLoop& loop, const TrainResult& so_far)
      : loop_(loop),
        config_(loop.config_),
        comm_(*loop.deps_.comm),
        engine_(*loop.deps_.engine),
        m_(loop.deps_.metrics),
        world_(comm_.size()),
        result_(so_far) {}

  // The agreed start (a kept state, rank 0's checkpoint or weights), the input opened there,
  // the schedule.
  Status Begin(const Start& start);
  // Where this rank stands after its last completed step.
  Position position() const {
    return Position{global_step_, epoch_, epoch_samples_, step_in_epoch_, world_};
  }
  // What the run counted so far.
  const TrainResult& counted() const { return result_; }
  // When this rank last made progress (began training, completed a step, a checkpoint or an
  // evaluation); none before training began.
  std::optional<SteadyTime> last_progress() const {
    return began_ ? std::optional<SteadyTime>(last_done_) : std::nullopt;
  }
  // Whether the loop goes on: the step limit and a stop request are checked here.
  StatusOr<bool> ShouldContinue();
  // One batch: the step, its accounting, and the checkpoint and evaluation it is due.
  Status Advance(const EngineBatch& batch);
  // The step in flight, the last report, evaluation and checkpoint, the final barrier.
  StatusOr<TrainResult> Finish(SteadyTime run_start);

 private:
  // Host-side accounting of a completed step; identical for every engine.
  void OnDone(const std::optional<StepStats>& done);
  // Loss, throughput and busy fraction over the window since the last report.
  Status Report(bool force);
  // Adds the engine's losses since the last take to the report window's; a loss that is not
  // finite (the model diverged) ends the run for good (DivergedLoss).
  Status TakeLoss();
  // The work between steps ends once this rank's shard is evaluated: the all-reduce after it
  // waits for the peers, and a peer that hangs there is a stall
  // (RunnerMetrics::EndWorkBetweenSteps).
  Status Evaluate();
  // The drain handshake (LoopDeps::drain): Ok when no rank was asked to leave.
  Status DrainVote(bool checkpointed);

  TrainingLoop& loop_;
  const TrainConfig& config_;
  comm::Communicator& comm_;
  StepEngine& engine_;
  metrics::RunnerMetrics* m_;
  const int world_;
  // What the run counted, this process's earlier rounds included.
  TrainResult result_;

  // The position in the data, in samples: what a checkpoint records.
  std::int64_t global_step_ = 0;
  int epoch_ = 0;
  std::int64_t epoch_samples_ = 0;
  std::int64_t step_in_epoch_ = 0;
  std::int64_t schedule_start_ = 0;  // the schedule's position at Begin, in this world's steps
  LrSchedule lr_;
  std::int64_t steps_ = 0;  // taken in this pass: the schedule's offset from schedule_start_
  metrics::Progress progress_;
  bool evaluated_last_ = false;

  double last_data_wait_ = 0;
  std::int64_t samples_done_ = 0;    // by this rank, completed steps
  std::int64_t window_samples_ = 0;  // completed in the current report window
  double window_device_ = 0;
  double total_device_ = 0;
  double mean_loss_ = -1;   // over the last report window
  double window_loss_ = 0;  // the sum of the window's step losses taken so far, and their count
  std::int64_t window_loss_steps_ = 0;
  std::int64_t loss_taken_at_ = 0;  // the global step of the last take
  SteadyTime train_start_;
  SteadyTime window_start_;
  SteadyTime last_done_;
  bool began_ = false;  // Begin completed: last_done_ is set
};

Status TrainingLoop::Pass::Begin(const Start& start) {
  global_step_ = start.global_step;
  epoch_ = start.epoch;
  epoch_samples_ = start.epoch_samples;
  ASSIGN_OR_RETURN(const InputStart input, engine_.OpenInput(start.epoch, start.epoch_samples));
  const std::int64_t spe = input.steps_per_epoch;
  const std::int64_t global_batch = std::int64_t{config_.batch_size} * world_;
  epoch_ = input.epoch;
  epoch_samples_ = input.epoch_samples;
  step_in_epoch_ = epoch_samples_ / global_batch;
  if (start.checkpoint_world > 0 && start.checkpoint_world != world_ && comm_.rank() == 0) {
    spdlog::info("world size changed from {} to {}: continuing epoch {} at sample {}",
                 start.checkpoint_world, world_, epoch_, epoch_samples_);
  }
  // The LR schedule's position in this world's steps (the global step counts the steps of
  // every world the job ran at, so after a resize it is not the schedule's position).
  schedule_start_ = std::int64_t{epoch_} * spe + (epoch_samples_ + global_batch - 1) / global_batch;
  lr_.base = config_.learning_rate;
  lr_.peak =
      config_.learning_rate * (config_.lr_scaling == contract::LrScaling::kLinear ? world_ : 1);
  lr_.warmup_steps = static_cast<std::int64_t>(config_.warmup_epochs * static_cast<double>(spe));
  lr_.total_steps = spe * config_.epochs;
  lr_.cosine = config_.lr_schedule == contract::LrSchedule::kCosine;

  progress_.attempt = loop_.deps_.attempt;
  progress_.world_size = world_;
  progress_.state = "running";
  progress_.steps_total = lr_.total_steps;
  progress_.epoch = epoch_;
  progress_.resume_warning = start.warning;
  if (m_) m_->SetWorldSize(world_);

  result_.world_size = world_;
  result_.regression = config_.model_spec && config_.model_spec->loss == model::Loss::kMse;
  result_.resumed = result_.resumed || start.resumed;
  if (start.recovered) {
    result_.recoveries = start.recoveries;
    result_.recovery_seconds = start.recovery_seconds;
    result_.recovery_steps_lost = start.recovery_steps_lost;
    result_.last_recovery_step = start.global_step;
    if (m_) m_->ObserveRecovery(start.idle_seconds, start.steps_lost);
  } else if (m_) {
    m_->EndRecovery();  // no rank kept a state: the gang starts over, the outage is over
  }
  progress_.recoveries = result_.recoveries;
  progress_.recovery_seconds = result_.recovery_seconds;
  progress_.recovery_steps_lost = result_.recovery_steps_lost;
  progress_.last_recovery_step = result_.last_recovery_step;
  progress_.start_step = start.global_step;
  loss_taken_at_ = start.global_step;
  result_.resume_warning = start.warning;
  train_start_ = std::chrono::steady_clock::now();
  if (!loop_.first_train_start_) loop_.first_train_start_ = train_start_;
  window_start_ = train_start_;
  last_done_ = train_start_;
  began_ = true;
  return Status::Ok();
}

StatusOr<bool> TrainingLoop::Pass::ShouldContinue() {
  if (config_.max_steps >= 0 && result_.steps_this_run >= config_.max_steps) return false;
  if (loop_.deps_.stop != nullptr && loop_.deps_.stop->load()) {
    return Cancelled("stopped by signal at step " + std::to_string(global_step_));
  }
  return true;
}

void TrainingLoop::Pass::OnDone(const std::optional<StepStats>& done) {
  if (!done) return;
  const auto now = std::chrono::steady_clock::now();
  const double step_seconds = std::chrono::duration<double>(now - last_done_).count();
  last_done_ = now;
  samples_done_ += done->n;
  window_samples_ += done->n;
  window_device_ += done->device_seconds;
  total_device_ += done->device_seconds;
  result_.allreduce_wait_seconds += done->allreduce_wait_seconds;
  result_.allreduce_seconds += done->allreduce_seconds;
  if (m_) {
    const double data_wait = engine_.data_wait_seconds();
    m_->ObserveDataWait(data_wait - last_data_wait_);
    last_data_wait_ = data_wait;
    m_->ObserveAllReduceWait(done->allreduce_wait_seconds);
    m_->ObserveStep(step_seconds, done->n);
  }
}

Status TrainingLoop::Pass::Report(bool force) {
  const double window = SecondsSince(window_start_);
  if (!force && window < kReportSeconds) return Status::Ok();
  RETURN_IF_ERROR(TakeLoss());
  if (window_loss_steps_ > 0) mean_loss_ = window_loss_ / static_cast<double>(window_loss_steps_);
  window_loss_ = 0;
  window_loss_steps_ = 0;
  if (window > 0) {
    const double rate = static_cast<double>(window_samples_) / window;
    progress_.samples_per_second = rate * world_;
    if (m_) m_->SetSamplesPerSecond(rate);
    if (engine_.has_device()) {
      result_.device_busy = std::min(1.0, window_device_ / window);
      if (m_) m_->SetGpuBusy(result_.device_busy);
    }
  }
  if (m_ && mean_loss_ >= 0) m_->SetLoss(mean_loss_);
  window_samples_ = 0;
  window_device_ = 0;
  window_start_ = std::chrono::steady_clock::now();
  progress_.step = global_step_;
  progress_.loss = mean_loss_;
  if (m_) m_->UpdateProgress(progress_);
  return Status::Ok();
}

Status TrainingLoop::Pass::TakeLoss() {
  ASSIGN_OR_RETURN(const auto loss, engine_.TakeLoss());
  if (loss.second > 0 && !std::isfinite(loss.first)) {
    return DivergedLoss(loss.first, loss_taken_at_, global_step_);
  }
  loss_taken_at_ = global_step_;
  window_loss_ += loss.first;
  window_loss_steps_ += loss.second;
  return Status::Ok();
}

Status TrainingLoop::Pass::Evaluate() {
  std::function<void()> shard_done;
  if (m_) shard_done = [this] { m_->EndWorkBetweenSteps(); };
  ASSIGN_OR_RETURN(const auto acc_loss, loop_.Evaluate(shard_done));
  result_.test_accuracy = acc_loss.first;
  result_.test_loss = acc_loss.second;
  evaluated_last_ = true;
  if (result_.regression) {
    progress_.test_mse = acc_loss.second;
    if (m_) m_->SetTestMse(acc_loss.second);
  } else {
    progress_.test_accuracy = acc_loss.first;
    if (m_) m_->SetTestAccuracy(acc_loss.first);
  }
  return Status::Ok();
}

Status TrainingLoop::Pass::Advance(const EngineBatch& batch) {
  auto done = engine_.Step(lr_.At(schedule_start_ + steps_));
  if (!done.ok()) return done.status().WithContext("step " + std::to_string(global_step_ + 1));
  OnDone(*done);
  ++global_step_;
  ++steps_;
  ++result_.steps_this_run;
  result_.samples_this_run += static_cast<std::int64_t>(batch.n) * world_;
  if (config_.step_sleep_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(config_.step_sleep_ms));
  }
  const bool epoch_done = batch.last_in_epoch;
  epoch_ = epoch_done ? batch.epoch + 1 : batch.epoch;
  step_in_epoch_ = epoch_done ? 0 : batch.step + 1;
  epoch_samples_ = epoch_done ? 0 : batch.epoch_samples_after;
  if (m_) {
    m_->SetStep(global_step_);
    m_->SetEpoch(epoch_);  // completed, as /status and the console count them
  }
  progress_.epoch = epoch_;  // epochs completed
  evaluated_last_ = false;
  const bool checkpoint_now = global_step_ % config_.checkpoint_every == 0;
  const bool eval_now = epoch_done && loop_.deps_.evaluate && config_.eval_every_epoch;
  if (checkpoint_now || eval_now) {
    ASSIGN_OR_RETURN(const std::optional<StepStats> flushed, engine_.Flush());
    OnDone(flushed);
  }
  // A checkpoint holds no diverged state: the losses up to it are read first. (Within the
  // report window, which it leaves as it is.)
  if (checkpoint_now) RETURN_IF_ERROR(TakeLoss());
  RETURN_IF_ERROR(Report(epoch_done));
  // An evaluation or a checkpoint write takes as long as it takes, and is no stall (see
  // RunnerMetrics::BeginWorkBetweenSteps). The other ranks wait for rank 0's write inside
  // Checkpoint, hearing from it; the evaluation's work ends with the local shard: a peer that
  // hangs in the evaluation's all-reduce, or in the next step, is a stall.
  const bool long_work = eval_now || checkpoint_now;
  if (m_ && long_work) m_->BeginWorkBetweenSteps();
  if (checkpoint_now) {
    RETURN_IF_ERROR(loop_.Checkpoint(global_step_, epoch_, step_in_epoch_, epoch_samples_));
  }
  if (eval_now) {
    RETURN_IF_ERROR(Evaluate());
    if (m_) m_->UpdateProgress(progress_);
    if (comm_.rank() == 0 && result_.regression) {
      spdlog::info("epoch {}/{} step {} loss {:.4f} test_mse {:.4f} samples/s {:.0f}",
                   batch.epoch + 1, config_.epochs, global_step_, mean_loss_, result_.test_loss,
                   progress_.samples_per_second);
    } else if (comm_.rank() == 0) {
      spdlog::info(
          "epoch {}/{} step {} loss {:.4f} test_accuracy {:.4f} test_loss {:.4f} samples/s {:.0f}",
          batch.epoch + 1, config_.epochs, global_step_, mean_loss_, result_.test_accuracy,
          result_.test_loss, progress_.samples_per_second);
    }
  }
  if (m_ && long_work) m_->EndWorkBetweenSteps();
  if (loop_.deps_.drain != nullptr && global_step_ % kDrainVoteSteps == 0) {
    RETURN_IF_ERROR(DrainVote(checkpoint_now));
  }
  // A step's time runs from the previous step's completion: not through a checkpoint or an
  // evaluation (nothing is in flight after them).
  if (checkpoint_now || eval_now) last_done_ = std::chrono::steady_clock::now();
  return Status::Ok();
}

Status TrainingLoop::Pass::DrainVote(bool checkpointed) {
  const std::int32_t mine = loop_.deps_.drain->load() ? 1 : 0;
  std::vector<std::int32_t> all(static_cast<std::size_t>(world_));
  RETURN_IF_ERROR(comm_.AllGather(&mine, sizeof(mine), all.data()).WithContext("drain vote"));
  std::string leaving;
  for (int r = 0; r < world_; ++r) {
    if (all[static_cast<std::size_t>(r)] == 0) continue;
    leaving += (leaving.empty() ? "" : ", ") + std::to_string(r);
  }
  if (leaving.empty()) return Status::Ok();
  // The whole gang stops after this very step (the one in flight completes): no step is lost.
  ASSIGN_OR_RETURN(const std::optional<StepStats> flushed, engine_.Flush());
  OnDone(flushed);
  if (!checkpointed) {
    RETURN_IF_ERROR(loop_.Checkpoint(global_step_, epoch_, step_in_epoch_, epoch_samples_));
  }
  const bool ckpt = comm_.rank() == 0 && !config_.checkpoint_dir.empty();
  if (mine != 0) {
    spdlog::warn("leaving the gang at step {} as asked{}", global_step_,
                 ckpt ? " (checkpoint written)" : "");
    return Cancelled("asked to stop: the gang stopped with this rank after step " +
                     std::to_string(global_step_));
  }
  return Aborted("rank(s) " + leaving + " left the gang after step " +
                 std::to_string(global_step_) + " (asked to stop); this rank keeps its state");
}

StatusOr<TrainResult> TrainingLoop::Pass::Finish(SteadyTime run_start) {
  ASSIGN_OR_RETURN(const std::optional<StepStats> last, engine_.Flush());
  OnDone(last);
  const double train_seconds = SecondsSince(train_start_);
  // The run's, from this process's first step to its last (before the final evaluation,
  // checkpoint and barrier): an in-place recovery's outage included (the pass after it alone
  // read higher than the run ever trained).
  const double run_train_seconds = SecondsSince(*loop_.first_train_start_);
  RETURN_IF_ERROR(Report(true));
  // The last evaluation and checkpoint (every rank waits for rank 0's write inside Checkpoint)
  // are no stall; a peer that hangs in the evaluation's all-reduce or at the final barrier is.
  // The state says "succeeded" after them.
  const bool eval_now = loop_.deps_.evaluate && !evaluated_last_;
  const bool checkpoint_now = global_step_ % config_.checkpoint_every != 0;
  if (eval_now) {
    if (m_) m_->BeginWorkBetweenSteps();
    RETURN_IF_ERROR(Evaluate());
  }
  if (checkpoint_now) {
    if (m_) m_->BeginWorkBetweenSteps();
    RETURN_IF_ERROR(loop_.Checkpoint(global_step_, epoch_, step_in_epoch_, epoch_samples_));
    if (m_) m_->EndWorkBetweenSteps();
  }
  RETURN_IF_ERROR(comm_.Barrier().WithContext("final barrier"));

  result_.epochs = epoch_;
  result_.steps = global_step_;
  result_.wall_seconds = SecondsSince(run_start);
  result_.samples_per_second =
      run_train_seconds > 0 ? static_cast<double>(result_.samples_this_run) / run_train_seconds : 0;
  result_.data_wait_seconds = engine_.data_wait_seconds();
  result_.step_graph = engine_.replays_graph();
  if (engine_.has_device() && train_seconds > 0) {
    result_.device_busy = std::min(1.0, total_device_ / train_seconds);
    if (m_) m_->SetGpuBusy(result_.device_busy);
  }
  progress_.state = "succeeded";
  progress_.step = global_step_;
  progress_.epoch = epoch_;
  if (!result_.regression) progress_.test_accuracy = result_.test_accuracy;
  progress_.samples_per_second = result_.samples_per_second;
  if (m_) m_->UpdateProgress(progress_);
  return result_;
}

StatusOr<TrainResult> TrainingLoop::Run() {
  const SteadyTime run_start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const Start start, SyncStart());
  kept_.reset();
  Pass pass(*this, so_far_);
  // However the pass ends, what it reached is what this rank would bring to a next round.
  // `in_step`: it failed inside a step that did not complete (that step's work is lost).
  auto ended = [&](Status s, bool in_step = false) {
    last_ = pass.position();
    so_far_ = pass.counted();
    // The outage runs from the last progress, not from noticing the loss (a peer that hangs is
    // noticed a collective timeout later); a pass that never trained continues the outage
    // that led to it.
    if (!s.ok()) {
      failed_at_ = pass.last_progress() ? *pass.last_progress()
                                        : failed_at_.value_or(std::chrono::steady_clock::now());
    }
    failed_step_ = last_->global_step + (in_step ? 1 : 0);
    return s;
  };
  if (Status s = pass.Begin(start); !s.ok()) return ended(s);
  recovering_ = false;  // the gang trains again
  for (;;) {
    auto go_on = pass.ShouldContinue();
    if (!go_on.ok()) return ended(go_on.status());
    if (!*go_on) break;
    auto batch = deps_.engine->NextBatch();
    if (!batch.ok()) return ended(batch.status());
    if (!*batch) break;
    const std::int64_t before = pass.position().global_step;
    if (Status s = pass.Advance(**batch); !s.ok()) {
      return ended(s, pass.position().global_step == before);
    }
  }
  auto result = pass.Finish(run_start);
  (void)ended(result.status());
  return result;
}

}  // namespace ringtrain::train
