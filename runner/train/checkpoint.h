// Checkpoints: written by rank 0 only, atomically (temp file, fsync, rename, fsync of the
// directory), with a CRC so a torn or corrupt file is detected and skipped on resume. Owns the
// file format; the trainer decides when to write and broadcasts what rank 0 read.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringtrain::train {

struct CheckpointState {
  std::int64_t global_step = 0;  // optimizer steps taken
  std::int32_t epoch = 0;        // position of the next batch
  std::int64_t step_in_epoch = 0;
  std::int64_t optimizer_steps = 0;
  std::vector<float> params;
  std::vector<float> optimizer_state;
};

// Writes <dir>/ckpt-<global_step>.bin and keeps the newest `keep` files.
Status WriteCheckpoint(const std::string& dir, std::int64_t global_step, std::int32_t epoch,
                       std::int64_t step_in_epoch, std::int64_t optimizer_steps,
                       std::span<const float> params, std::span<const float> optimizer_state,
                       int keep = 2);

// The newest readable checkpoint in `dir`, or NotFound. A corrupt newest file is skipped with a
// warning in favour of an older one; a checkpoint whose sizes differ from the model's
// (`num_params`, `state_size`) is a permanent error naming the file.
StatusOr<CheckpointState> LoadNewestCheckpoint(const std::string& dir, std::size_t num_params,
                                               std::size_t state_size);

}  // namespace ringtrain::train
