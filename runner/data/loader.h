// A prefetching batch loader: worker threads decode and normalize batches into a ring of
// preallocated slots ahead of the trainer, across epoch boundaries, so compute never waits on
// decoding. Reads IDX images (uint8, normalised per batch: the whole set never exists as floats)
// or a Table (already float). Owns no model or communicator; the trainer reads batches in order.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "runner/data/idx.h"
#include "runner/data/sampler.h"
#include "runner/data/table.h"

namespace ringtrain::data {

inline constexpr Duration kDefaultBatchTimeout{std::chrono::seconds(120)};

struct LoaderOptions {
  int batch_size = 64;
  int workers = 1;
  int prefetch = 4;  // slots: batches decoded ahead of the trainer, at least 2
  int rank = 0;
  int world_size = 1;
  std::uint64_t seed = 42;
  bool shuffle = true;
  int start_epoch = 0;
  std::int64_t start_step = 0;  // within start_epoch, for resuming from a checkpoint
  // Samples of start_epoch's permutation already consumed by the whole gang (resuming from a
  // checkpoint, possibly written by a gang of another size); -1 = start_step × batch × world.
  std::int64_t start_samples = -1;
  int end_epoch = 1;  // exclusive
};

struct BatchView {
  const float* x = nullptr;
  const std::int32_t* y = nullptr;  // labels (classification); null for a regression Table
  const float* targets = nullptr;   // n × targets floats (a regression Table); else null
  int n = 0;
  int epoch = 0;
  std::int64_t step = 0;       // within the epoch (counted in this world's steps)
  bool last_in_epoch = false;  // the epoch is done after this batch
  // Samples of the epoch's permutation consumed by the whole gang after this batch (the
  // dataset size once the epoch is done): what a checkpoint records.
  std::int64_t epoch_samples_after = 0;
};

class PrefetchLoader {
 public:
  static StatusOr<std::unique_ptr<PrefetchLoader>> Create(const Dataset& dataset,
                                                          const LoaderOptions& options);
  // The same over a Table (ValidateTable'd: Gather trusts its shape and labels).
  static StatusOr<std::unique_ptr<PrefetchLoader>> Create(const Table& table,
                                                          const LoaderOptions& options);
  ~PrefetchLoader();
  PrefetchLoader(const PrefetchLoader&) = delete;

  // The bytes of the batches a loader of `options` assembles ahead (its options.prefetch slots),
  // for samples of `sample_floats` floats and either a label (`target_floats` 0) or that many
  // target floats: what Create allocates, computed without creating one.
  static std::uint64_t SlotBytes(const LoaderOptions& options, std::size_t sample_floats,
                                 std::size_t target_floats);
  // The elements of each of a slot's buffers (a batch of `batch_size` samples: inputs, labels or
  // targets, indices), as the constructor sizes them; what a caller holding a batch of its own
  // (the evaluation's) sizes it by.
  struct SlotSizes {
    std::size_t x = 0;
    std::size_t y = 0;
    std::size_t targets = 0;
    std::size_t idx = 0;  // reserved
  };
  static SlotSizes SizesOf(int batch_size, std::size_t sample_floats, std::size_t target_floats);
  PrefetchLoader& operator=(const PrefetchLoader&) = delete;

  // Loaders of this process alive at once, most since ResetPeakLive(): a caller that replaces
  // its loader holds one set of slots (what the memory check counts), never two.
  static int PeakLive();
  static void ResetPeakLive();

  // Steps of a whole epoch; the first epoch of a resumed run may have fewer.
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // The start position after clamping: (epoch, samples of it consumed).
  int start_epoch() const { return start_epoch_; }
  std::int64_t start_samples() const { return start_samples_; }
  // The next batch in order; valid until the following call. NotFound after the last epoch.
  StatusOr<BatchView> Next(Duration timeout = kDefaultBatchTimeout);
  // Seconds the caller spent blocked in Next() because no batch was ready.
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Slot {
    std::vector<float> x;
    std::vector<std::int32_t> y;
    std::vector<float> targets;
    std::vector<std::size_t> idx;
    std::int64_t seq = -1;  // which batch the slot holds once ready; -1 = free
    BatchView view;
  };

  // Exactly one of `dataset` and `table` is set.
  PrefetchLoader(const Dataset* dataset, const Table* table, const LoaderOptions& options);
  void Work(int worker);
  // The sampler's indices for `epoch`, computed once and shared by the workers.
  const std::vector<std::size_t>& EpochIndices(int epoch);
  // Where batch `seq` (counted from this loader's start) lies.
  struct Position {
    int epoch;
    std::int64_t index;   // batch within this loader's part of the epoch
    std::int64_t steps;   // batches in this loader's part of the epoch
    std::int64_t offset;  // the epoch's global position where that part begins
  };
  Position Locate(std::int64_t seq) const;

  const Dataset* dataset_;
  const Table* table_;
  std::size_t count_;    // samples
  std::size_t sample_;   // floats per sample
  std::size_t targets_;  // floats of targets per sample (a regression Table); else 0
  LoaderOptions options_;
  DistributedSampler sampler_;
  std::int64_t steps_per_epoch_;
  int start_epoch_;
  std::int64_t start_samples_;
  std::int64_t first_steps_;  // batches left in start_epoch
  std::int64_t base_step_;    // this world's step number of the first of them
  std::int64_t end_seq_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::int64_t consumed_;  // the batch the trainer takes next
  bool stop_ = false;
  int cached_epoch_[2] = {-1, -1};
  std::vector<std::size_t> cached_indices_[2];
  double wait_seconds_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace ringtrain::data
