// A prefetching batch loader: worker threads decode and normalize batches into a ring of
// preallocated slots ahead of the trainer, across epoch boundaries, so compute never waits on
// decoding. Owns no model or communicator; the trainer reads batches in order.
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
  int end_epoch = 1;            // exclusive
};

struct BatchView {
  const float* x = nullptr;
  const std::int32_t* y = nullptr;
  int n = 0;
  int epoch = 0;
  std::int64_t step = 0;  // within the epoch
};

class PrefetchLoader {
 public:
  static StatusOr<std::unique_ptr<PrefetchLoader>> Create(const Dataset& dataset,
                                                          const LoaderOptions& options);
  ~PrefetchLoader();
  PrefetchLoader(const PrefetchLoader&) = delete;
  PrefetchLoader& operator=(const PrefetchLoader&) = delete;

  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // The next batch in order; valid until the following call. NotFound after the last epoch.
  StatusOr<BatchView> Next(Duration timeout = kDefaultBatchTimeout);
  // Seconds the caller spent blocked in Next() because no batch was ready.
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Slot {
    std::vector<float> x;
    std::vector<std::int32_t> y;
    std::vector<std::size_t> idx;
    std::int64_t seq = -1;  // which batch the slot holds once ready; -1 = free
    BatchView view;
  };

  PrefetchLoader(const Dataset& dataset, const LoaderOptions& options);
  void Work(int worker);
  // The sampler's indices for `epoch`, computed once and shared by the workers.
  const std::vector<std::size_t>& EpochIndices(int epoch);

  const Dataset& dataset_;
  LoaderOptions options_;
  DistributedSampler sampler_;
  std::int64_t steps_per_epoch_;
  std::int64_t first_seq_;
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
