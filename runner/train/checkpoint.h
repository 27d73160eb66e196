// Checkpoints: written by rank 0 only, atomically (temp file, fsync, rename, fsync of the
// directory), with a CRC so a torn or corrupt file is detected and skipped on resume. Owns the
// file format; the trainer decides when to write and broadcasts what rank 0 read.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/status.h"

namespace ringtrain::train {

// Where training stands. The data position is recorded in samples, not steps, so a job resized
// by restart (another world size, hence another global batch) continues the epoch at the same
// sample: the sampler takes the rest of the epoch's permutation from `epoch_samples` on.
struct CheckpointPosition {
  std::int64_t global_step = 0;  // optimizer steps taken
  std::int32_t epoch = 0;        // the epoch of the next batch
  std::int64_t step_in_epoch = 0;
  // Samples of `epoch` consumed by the whole gang (all ranks), in the epoch's permutation
  // order; -1 in checkpoints of the first format, which knew only step_in_epoch.
  std::int64_t epoch_samples = -1;
  std::int64_t optimizer_steps = 0;
  std::int32_t world_size = 0;  // that wrote it; 0 = unknown (first format)
};

// What a checkpoint was written for: the model's architecture (model::CanonicalString, one line)
// and the dataset's per-sample shape ("1x28x28", "13"). Checkpoints of the first two formats
// record neither (both empty).
struct CheckpointModel {
  std::string architecture;
  std::string features;
  bool operator==(const CheckpointModel&) const = default;
};

// What a resume expects: the job's model, and whether a checkpoint that records no model (written
// before checkpoints recorded one) may be resumed from. Only the presets (--model mlp|cnn) may:
// they were the only models then, and their parameter counts differ, so the size check still
// tells them apart; a user-defined list of the same size could not be told from them.
struct ExpectedModel {
  CheckpointModel model;
  bool accept_unrecorded = false;
};

struct CheckpointState : CheckpointPosition {
  CheckpointModel model;  // as recorded (empty for the first two formats)
  std::vector<float> params;
  std::vector<float> optimizer_state;
};

// The file of the checkpoint at `global_step` in `dir`: <dir>/ckpt-<global_step>.bin.
std::string CheckpointPath(const std::string& dir, std::int64_t global_step);

// What a NaN or infinite loss or state says of its cause: the training loop's stop and the
// checkpoint writer's refusal name the same setting.
inline constexpr std::string_view kDivergedCauses =
    "the model diverged (a learning rate too high for it, spec.train.learningRate; feature "
    "values too large: spec.train.dataset.standardize, on by default, scales them; or "
    "regression targets too large: scale them yourself, standardize does not)";

// Writes CheckpointPath(dir, position.global_step) and keeps the newest `keep` files. A state
// holding a NaN or infinity is not written (FailedPrecondition naming kDivergedCauses). Errors a
// restart cannot fix (EACCES, EPERM, EROFS, ENOSPC, ENOTDIR, ...) are permanent (PermissionDenied
// or FailedPrecondition) and name the path with strerror; others (EIO) stay retryable. `model` is
// recorded in the file (format 3).
Status WriteCheckpoint(const std::string& dir, const CheckpointPosition& position,
                       const CheckpointModel& model, std::span<const float> params,
                       std::span<const float> optimizer_state, int keep = 2);
// The same recording no model (tests of older-format behaviour; the trainer records its model).
Status WriteCheckpoint(const std::string& dir, const CheckpointPosition& position,
                       std::span<const float> params, std::span<const float> optimizer_state,
                       int keep = 2);

// Creates `dir` and proves it writable (creates, writes, fsyncs and removes a probe file), so a
// checkpoint dir that can never work fails the job at start-up rather than at the first
// checkpoint. Same error classification as WriteCheckpoint.
Status CheckCheckpointDirWritable(const std::string& dir);

// Waits `d` before a checkpoint read is tried again; false, at once, when the process is asked
// to stop: a stop request (SleepOrStop's), or the first SIGTERM of a draining rank (DrainFlag),
// which has nothing to save yet while it loads its checkpoint.
bool WaitToReadCheckpointAgain(Duration d);

// The in-process retries of a checkpoint read that failed in a way the volume may heal: a bad
// block or a flaky network file system often heals within seconds, while giving up restarts the
// whole gang and counts against backoffLimit. The waits (1 s, 2 s, 4 s by default, within the
// checkpoint timeout the other ranks wait for rank 0's read: comm/root_work.h) are one budget
// for the whole load, whichever files fail.
struct CheckpointReadRetry {
  int retries = 3;  // tries after the first
  BackoffOptions backoff{Duration{1000}, Duration{4000}, 2.0};
  // The wait before retry n (BackoffDelay(backoff, n - 1)); false when a stop cut it short.
  // Tests move a fake clock instead of sleeping.
  std::function<bool(Duration)> wait = WaitToReadCheckpointAgain;
};

// The newest readable checkpoint in `dir`:
//  - NotFound when there is no checkpoint file at all (a fresh start);
//  - a corrupt, truncated or implausible file is skipped with a warning for the next older
//    one and renamed to <name>.corrupt (so it no longer counts among the newest to keep);
//    every size read from a file is bounded by the file's size and the model's
//    (`num_params`, `state_size`) before anything is allocated;
//  - DataLoss naming the files when checkpoints exist but none is readable (the caller starts
//    from step 0 and must say so);
//  - FailedPrecondition when an intact checkpoint was written for another model (permanent):
//    another architecture or data shape than `expected` (the message names both), no recorded
//    model where `expected` does not accept that, or other parameter/optimizer sizes;
//  - PermissionDenied when the dir or a file cannot be read (permanent);
//  - Unavailable (retryable) when reading a file fails in a way the volume may heal (EIO,
//    ESTALE, ETIMEDOUT, EMFILE, ENOMEM) and still fails after `retry`'s tries, or a stop
//    interrupted the wait between them (the message then says so): the file is left as it is
//    for the next attempt.
// `expected` null: the recorded model is not checked (sizes only).
StatusOr<CheckpointState> LoadNewestCheckpoint(const std::string& dir, std::size_t num_params,
                                               std::size_t state_size,
                                               const ExpectedModel* expected = nullptr,
                                               const CheckpointReadRetry& retry = {});

// The step and epoch a checkpoint's header says (global_step, epoch; the rest left as it is),
// read without blocking from a regular file, its payload neither read nor checked: how far a job
// got, for a summary (`ringtrain run`), never what to resume from. DataLoss for a file that is
// no checkpoint of ours.
StatusOr<CheckpointPosition> ReadCheckpointHeader(const std::string& path);

}  // namespace ringtrain::train
