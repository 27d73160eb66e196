// Input on the GPU, two ways (selectable with --input):
//  - DeviceDataset ("device"): the whole dataset resident as uint8 images + int32 labels
//    (Fashion-MNIST is 47 MB); each epoch's permutation is computed on the device (keys hashed
//    from seed and epoch, radix-sorted), identical on every rank; batches are gathered and
//    normalized by a kernel that reads its position from device memory, so it can sit inside a
//    captured CUDA graph.
//  - PinnedInput ("host"): for data that does not fit, and for tables (CSV/NPY); takes an IDX
//    dataset or a data::Table. The CPU PrefetchLoader's worker threads decode batches, which are
//    staged in pinned buffers and copied asynchronously on a copy stream, overlapping the
//    previous step.
// Both shard like DistributedSampler: the permutation padded by wrapping to a multiple of the
// world size, rank r taking positions r, r+world, ...; the last batch of an epoch may be short.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "runner/data/idx.h"
#include "runner/data/loader.h"
#include "runner/data/table.h"

namespace ringtrain::gpu {

class DeviceDataset {
 public:
  virtual ~DeviceDataset() = default;
  // Uploads `ds` (synchronously, on `stream`); rank/world/batch define the shard.
  static StatusOr<std::unique_ptr<DeviceDataset>> Create(const data::Dataset& ds, int rank,
                                                         int world_size, int batch_size,
                                                         std::uint64_t seed, cudaStream_t stream);
  virtual std::int64_t steps_per_epoch() const = 0;
  // Samples in batch `step` of an epoch: batch_size except possibly the last.
  virtual int batch_samples(std::int64_t step) const = 0;
  // Enqueues the permutation for `epoch` (shuffle on) into the dataset's device buffer.
  virtual Status Shuffle(int epoch) = 0;
  // Enqueues the copy of `step` into the device cursor read by Gather (not capturable).
  virtual Status SetStep(std::int64_t step) = 0;
  // Enqueues the gather + normalization of the batch at the device cursor into x (n×C×H×W
  // floats, normalized exactly like data::Gather) and y. Capturable.
  virtual Status Gather(float* x, std::int32_t* y, int n) = 0;
  // The same for the test set without shuffling: samples first, first+stride, ... (n of them).
  virtual Status GatherPlain(std::int64_t first, int stride, int n, float* x, std::int32_t* y) = 0;
  // Test and debugging aid: copies the current permutation (after the enqueued Shuffle) to the
  // host. Synchronizes the stream, so never call it while capturing or on the hot path.
  virtual Status ReadPermutation(std::vector<std::uint32_t>& out) = 0;
};

// Device pointers: x is n × (floats per sample); labels in y (an IDX dataset, a classification
// table), else n × task.targets floats in `targets` (a regression table); the other is null.
struct DeviceBatch {
  const float* x = nullptr;
  const std::int32_t* y = nullptr;
  const float* targets = nullptr;
  int n = 0;
  int epoch = 0;
  std::int64_t step = 0;  // within the epoch
};

class PinnedInput {
 public:
  virtual ~PinnedInput() = default;
  // `options` as for data::PrefetchLoader (rank, world, seed, start position, prefetch);
  // copies run on their own stream; `compute` is the stream that consumes the batches. The
  // dataset or table must outlive the input (the loader's workers read it).
  static StatusOr<std::unique_ptr<PinnedInput>> Create(const data::Dataset& ds,
                                                       const data::LoaderOptions& options,
                                                       cudaStream_t compute);
  // The same over a table, ValidateTable'd as data::PrefetchLoader requires. Its shape (what
  // sizes the buffers) and the batch size are checked before anything touches the device.
  static StatusOr<std::unique_ptr<PinnedInput>> Create(const data::Table& table,
                                                       const data::LoaderOptions& options,
                                                       cudaStream_t compute);
  virtual std::int64_t steps_per_epoch() const = 0;
  // The next batch, already ordered before any later work on `compute` (the compute stream
  // waits on its copy event). Its buffers stay valid until the call after next. NotFound at
  // the end; errors from the loader (timeouts) as they are.
  virtual StatusOr<DeviceBatch> Next() = 0;
  virtual double wait_seconds() const = 0;  // host time spent waiting for the loader
};

}  // namespace ringtrain::gpu
