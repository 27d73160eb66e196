// DeviceDataset and PinnedInput (see device_data.h).
//
// DeviceDataset keeps the images as uint8 and the labels as int32 on the device. Shuffle(epoch)
// hashes (seed, epoch, index) into 64-bit keys (shard.h's ShuffleKey) and radix-sorts the
// indices by them with cub (stable, temp storage allocated at Create): the same permutation on
// every rank and build. Gather reads its step from a device cursor (written by SetStep) and
// shards like data::DistributedSampler (ShardPlan), so it can be captured once and replayed.
//
// PinnedInput stages data::PrefetchLoader's batches (an IDX dataset's images and labels, a
// table's features and labels or regression targets) in a ring of three pinned host buffers and
// copies them to three device buffers on its own stream. Batch k uses slot k % 3. Its pinned
// buffer is refilled only after the copy out of it for batch k − 3 finished (host waits on that
// copy's event), and its device buffer is overwritten only after the compute stream passed the
// point recorded at the start of call k − 1: by the header's contract batch k − 3 may be used
// until call k − 1 is made, so everything reading it was enqueued before that point. The copy of
// batch k thus overlaps the compute of step k − 1.
#include "runner/data/cuda/device_data.h"

#include <climits>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "runner/cuda/cuda_util.h"
#include "runner/cuda/kernels.h"
#include "runner/cuda/pinned_upload.h"
#include "runner/cuda/shard.h"

namespace ringtrain::gpu {
namespace {

// data::Gather's constants, computed the same way (in float).
constexpr float kScale = 1.0f / (255.0f * data::kFashionStd);
constexpr float kShift = data::kFashionMean / data::kFashionStd;

class CudaDataset final : public DeviceDataset {
 public:
  CudaDataset(ShardPlan plan, int sample_size, std::uint64_t seed, cudaStream_t stream)
      : plan_(plan), sample_size_(sample_size), seed_(seed), stream_(stream) {}

  Status Init(const data::Dataset& ds) {
    const auto count = static_cast<std::size_t>(plan_.count);
    RETURN_IF_ERROR(images_.Allocate(ds.images.size()));
    RETURN_IF_ERROR(labels_.Allocate(count));
    RETURN_IF_ERROR(keys_in_.Allocate(count));
    RETURN_IF_ERROR(keys_out_.Allocate(count));
    RETURN_IF_ERROR(values_in_.Allocate(count));
    RETURN_IF_ERROR(perm_.Allocate(count));
    RETURN_IF_ERROR(cursor_.Allocate(1));
    RETURN_IF_ERROR(cursor_upload_.Init());
    const std::vector<std::int32_t> labels(ds.labels.begin(), ds.labels.end());
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(images_.data(), ds.images.data(), ds.images.size(),
                                            cudaMemcpyHostToDevice, stream_));
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(labels_.data(), labels.data(),
                                            labels.size() * sizeof(std::int32_t),
                                            cudaMemcpyHostToDevice, stream_));
    RT_CUDA_RETURN_IF_ERROR(kernels::Iota(values_in_.data(), plan_.count, stream_));
    // Until the first Shuffle the permutation is the identity (never uninitialized memory).
    RT_CUDA_RETURN_IF_ERROR(kernels::Iota(perm_.data(), plan_.count, stream_));
    RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(cursor_.data(), 0, sizeof(std::int64_t), stream_));
    std::size_t temp_bytes = 0;
    RT_CUDA_RETURN_IF_ERROR(kernels::SortPairs(nullptr, &temp_bytes, keys_in_.data(),
                                               keys_out_.data(), values_in_.data(), perm_.data(),
                                               static_cast<int>(plan_.count), stream_));
    RETURN_IF_ERROR(sort_temp_.Allocate(temp_bytes > 0 ? temp_bytes : 1));
    // Create is synchronous: `ds` and `labels` may go away once it returns.
    RT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  std::int64_t steps_per_epoch() const override { return plan_.steps_per_epoch(); }
  int batch_samples(std::int64_t step) const override {
    return static_cast<int>(plan_.batch_samples(step));
  }

  Status Shuffle(int epoch) override {
    RT_CUDA_RETURN_IF_ERROR(
        kernels::ShuffleKeys(keys_in_.data(), plan_.count, seed_, epoch, stream_));
    std::size_t temp_bytes = sort_temp_.bytes();
    RT_CUDA_RETURN_IF_ERROR(kernels::SortPairs(sort_temp_.data(), &temp_bytes, keys_in_.data(),
                                               keys_out_.data(), values_in_.data(), perm_.data(),
                                               static_cast<int>(plan_.count), stream_));
    return Status::Ok();
  }

  Status SetStep(std::int64_t step) override {
    if (step < 0 || step >= plan_.steps_per_epoch()) {
      return InvalidArgument("DeviceDataset::SetStep: step " + std::to_string(step) +
                             " outside [0, " + std::to_string(plan_.steps_per_epoch()) + ")");
    }
    RETURN_IF_ERROR(cursor_upload_.Enqueue(step, cursor_.data(), stream_));
    host_step_ = step;
    return Status::Ok();
  }

  Status Gather(float* x, std::int32_t* y, int n) override {
    const std::int64_t available = plan_.batch_samples(host_step_);
    if (n < 0 || n > available) {
      return InvalidArgument("DeviceDataset::Gather: " + std::to_string(n) +
                             " samples, but batch " + std::to_string(host_step_) + " has " +
                             std::to_string(available));
    }
    if (n == 0) return Status::Ok();
    if (x == nullptr || y == nullptr) return InvalidArgument("DeviceDataset::Gather: null output");
    RT_CUDA_RETURN_IF_ERROR(kernels::GatherShuffled(images_.data(), labels_.data(), perm_.data(),
                                                    cursor_.data(), plan_, n, sample_size_, kScale,
                                                    kShift, x, y, stream_));
    return Status::Ok();
  }

  Status GatherPlain(std::int64_t first, int stride, int n, float* x, std::int32_t* y) override {
    if (n < 0 || stride < 1 || first < 0 ||
        (n > 0 && first + static_cast<std::int64_t>(n - 1) * stride >= plan_.count)) {
      return InvalidArgument("DeviceDataset::GatherPlain: samples " + std::to_string(first) +
                             " + " + std::to_string(stride) + "·[0, " + std::to_string(n) +
                             ") outside a dataset of " + std::to_string(plan_.count));
    }
    if (n == 0) return Status::Ok();
    if (x == nullptr || y == nullptr) {
      return InvalidArgument("DeviceDataset::GatherPlain: null output");
    }
    RT_CUDA_RETURN_IF_ERROR(kernels::GatherStrided(images_.data(), labels_.data(), first, stride, n,
                                                   sample_size_, kScale, kShift, x, y, stream_));
    return Status::Ok();
  }

  Status ReadPermutation(std::vector<std::uint32_t>& out) override {
    out.resize(perm_.size());
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.data(), perm_.data(),
                                            perm_.size() * sizeof(std::uint32_t),
                                            cudaMemcpyDeviceToHost, stream_));
    RT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

 private:
  ShardPlan plan_;
  int sample_size_;
  std::uint64_t seed_;
  cudaStream_t stream_;
  DeviceBuffer<std::uint8_t> images_;
  DeviceBuffer<std::int32_t> labels_;
  DeviceBuffer<std::uint64_t> keys_in_;
  DeviceBuffer<std::uint64_t> keys_out_;
  DeviceBuffer<std::uint32_t> values_in_;  // 0, 1, ..., count − 1
  DeviceBuffer<std::uint32_t> perm_;       // the epoch's permutation (sorted values)
  DeviceBuffer<unsigned char> sort_temp_;
  DeviceBuffer<std::int64_t> cursor_;  // the step Gather reads
  PinnedUpload<std::int64_t> cursor_upload_;
  std::int64_t host_step_ = 0;  // mirror of *cursor_ (for validation)
};

// What one sample of PinnedInput's batches is made of; sizes the slots and the copies.
struct SampleLayout {
  std::size_t floats = 0;   // x per sample
  bool labels = false;      // one int32 label per sample
  std::size_t targets = 0;  // regression target floats per sample (0: none)
};

class CudaPinnedInput final : public PinnedInput {
 public:
  static constexpr int kSlots = 3;

  CudaPinnedInput(const data::LoaderOptions& options, SampleLayout layout, cudaStream_t compute)
      : options_(options), layout_(layout), compute_(compute) {}

  ~CudaPinnedInput() override {
    // Copies still in flight read the pinned buffers and write the device buffers.
    if (copy_.get() != nullptr) (void)cudaStreamSynchronize(copy_.get());
  }

  // `source` is a data::Dataset or a data::Table of `layout_`.
  template <typename Source>
  Status Init(const Source& source) {
    RETURN_IF_ERROR(copy_.Create());
    const std::size_t batch = static_cast<std::size_t>(options_.batch_size);
    const std::size_t floats = batch * layout_.floats;
    const std::size_t labels = layout_.labels ? batch : 0;
    const std::size_t targets = batch * layout_.targets;
    // A buffer of 0 elements stays unallocated (null).
    for (Slot& slot : slots_) {
      RETURN_IF_ERROR(slot.host_x.Allocate(floats));
      RETURN_IF_ERROR(slot.host_y.Allocate(labels));
      RETURN_IF_ERROR(slot.host_targets.Allocate(targets));
      RETURN_IF_ERROR(slot.dev_x.Allocate(floats));
      RETURN_IF_ERROR(slot.dev_y.Allocate(labels));
      RETURN_IF_ERROR(slot.dev_targets.Allocate(targets));
      RETURN_IF_ERROR(slot.copied.Create());
    }
    for (Event& e : consumed_) RETURN_IF_ERROR(e.Create());
    // Last: the loader's workers start decoding at once.
    ASSIGN_OR_RETURN(loader_, data::PrefetchLoader::Create(source, options_));
    return Status::Ok();
  }

  std::int64_t steps_per_epoch() const override { return loader_->steps_per_epoch(); }
  double wait_seconds() const override { return loader_->wait_seconds(); }

  StatusOr<DeviceBatch> Next() override {
    ASSIGN_OR_RETURN(data::BatchView view, loader_->Next());
    if (view.n < 0 || view.n > options_.batch_size) {
      return Internal("pinned input: the loader returned a batch of " + std::to_string(view.n));
    }
    const auto n = static_cast<std::size_t>(view.n);
    const std::size_t floats = n * layout_.floats;
    const std::size_t labels = layout_.labels ? n : 0;
    const std::size_t targets = n * layout_.targets;
    if (n > 0 &&
        ((labels > 0) != (view.y != nullptr) || (targets > 0) != (view.targets != nullptr))) {
      return Internal("pinned input: the loader's batch does not have this input's labels/targets");
    }
    const std::int64_t k = calls_;
    Slot& slot = slots_[static_cast<std::size_t>(k % kSlots)];
    // Everything the consumer enqueued before this call (batch k − 1's work included).
    RT_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(consumed_[static_cast<std::size_t>(k % kSlots)].get(), compute_));
    if (k >= kSlots) {
      RETURN_IF_ERROR(WaitEvent(slot.copied.get(), data::kDefaultBatchTimeout,
                                "pinned input: copy of batch " + std::to_string(k - kSlots)));
    }
    if (floats > 0) std::memcpy(slot.host_x.data(), view.x, floats * sizeof(float));
    if (labels > 0) std::memcpy(slot.host_y.data(), view.y, labels * sizeof(std::int32_t));
    if (targets > 0) {
      std::memcpy(slot.host_targets.data(), view.targets, targets * sizeof(float));
    }
    if (k >= kSlots) {
      // Batch k − 3's readers were all enqueued before call k − 1 began.
      RT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(
          copy_.get(), consumed_[static_cast<std::size_t>((k - 1) % kSlots)].get(), 0));
    }
    if (floats > 0) {
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.dev_x.data(), slot.host_x.data(),
                                              floats * sizeof(float), cudaMemcpyHostToDevice,
                                              copy_.get()));
    }
    if (labels > 0) {
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.dev_y.data(), slot.host_y.data(),
                                              labels * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                              copy_.get()));
    }
    if (targets > 0) {
      RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.dev_targets.data(), slot.host_targets.data(),
                                              targets * sizeof(float), cudaMemcpyHostToDevice,
                                              copy_.get()));
    }
    RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(slot.copied.get(), copy_.get()));
    RT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, slot.copied.get(), 0));
    ++calls_;
    DeviceBatch batch;
    batch.x = slot.dev_x.data();
    batch.y = slot.dev_y.data();              // null without labels (never allocated)
    batch.targets = slot.dev_targets.data();  // null without targets
    batch.n = view.n;
    batch.epoch = view.epoch;
    batch.step = view.step;
    return batch;
  }

 private:
  struct Slot {
    PinnedBuffer<float> host_x;
    PinnedBuffer<std::int32_t> host_y;
    PinnedBuffer<float> host_targets;
    DeviceBuffer<float> dev_x;
    DeviceBuffer<std::int32_t> dev_y;
    DeviceBuffer<float> dev_targets;
    Event copied;  // recorded on the copy stream after this slot's last copy
  };

  data::LoaderOptions options_;
  SampleLayout layout_;
  cudaStream_t compute_;
  Stream copy_;
  Slot slots_[kSlots];
  Event consumed_[kSlots];  // [k % 3]: recorded on the compute stream at the start of call k
  std::int64_t calls_ = 0;
  // Declared last, destroyed first: its workers stop before anything else goes away.
  std::unique_ptr<data::PrefetchLoader> loader_;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceDataset>> DeviceDataset::Create(const data::Dataset& ds, int rank,
                                                               int world_size, int batch_size,
                                                               std::uint64_t seed,
                                                               cudaStream_t stream) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgument("DeviceDataset: rank " + std::to_string(rank) + " of world size " +
                           std::to_string(world_size));
  }
  if (batch_size < 1) {
    return InvalidArgument("DeviceDataset: batch size must be positive, got " +
                           std::to_string(batch_size));
  }
  const std::size_t sample_size =
      ds.rows > 0 && ds.cols > 0 ? static_cast<std::size_t>(ds.sample_size()) : 0;
  // cub's sort counts items in an int; the permutation holds uint32 indices.
  if (ds.count == 0 || ds.count > static_cast<std::size_t>(INT_MAX) || sample_size == 0 ||
      ds.images.size() != ds.count * sample_size || ds.labels.size() != ds.count) {
    return InvalidArgument("DeviceDataset: malformed dataset (" + std::to_string(ds.count) +
                           " samples of " + std::to_string(ds.rows) + "x" +
                           std::to_string(ds.cols) + ", " + std::to_string(ds.images.size()) +
                           " pixels, " + std::to_string(ds.labels.size()) + " labels)");
  }
  ShardPlan plan;
  plan.count = static_cast<std::int64_t>(ds.count);
  plan.rank = rank;
  plan.world = world_size;
  plan.batch = batch_size;
  auto dataset = std::make_unique<CudaDataset>(plan, static_cast<int>(sample_size), seed, stream);
  RETURN_IF_ERROR(dataset->Init(ds).WithContext("uploading the dataset to the GPU"));
  return std::unique_ptr<DeviceDataset>(std::move(dataset));
}

StatusOr<std::unique_ptr<PinnedInput>> PinnedInput::Create(const data::Dataset& ds,
                                                           const data::LoaderOptions& options,
                                                           cudaStream_t compute) {
  if (options.batch_size < 1) return InvalidArgument("batch size must be positive");
  if (ds.rows < 1 || ds.cols < 1) return InvalidArgument("PinnedInput: empty sample shape");
  SampleLayout layout;
  layout.floats = static_cast<std::size_t>(ds.sample_size());
  layout.labels = true;
  auto input = std::make_unique<CudaPinnedInput>(options, layout, compute);
  RETURN_IF_ERROR(input->Init(ds).WithContext("creating the pinned input"));
  return std::unique_ptr<PinnedInput>(std::move(input));
}

StatusOr<std::unique_ptr<PinnedInput>> PinnedInput::Create(const data::Table& table,
                                                           const data::LoaderOptions& options,
                                                           cudaStream_t compute) {
  // All host checks, before any CUDA call: the loader's Gather trusts these sizes.
  const std::string name = "PinnedInput: " + (table.path.empty() ? "in-memory table" : table.path);
  if (options.batch_size < 1) {
    return InvalidArgument(name + ": batch size must be positive, got " +
                           std::to_string(options.batch_size));
  }
  if (table.n < 1) return InvalidArgument(name + ": no samples");
  if (table.features < 1) return InvalidArgument(name + ": no features");
  if (table.x.size() / table.features != table.n || table.x.size() % table.features != 0) {
    return InvalidArgument(name + ": " + std::to_string(table.x.size()) + " values for " +
                           std::to_string(table.n) + " samples of " +
                           std::to_string(table.features) + " features");
  }
  SampleLayout layout;
  layout.floats = table.features;
  if (table.task.classification()) {
    if (table.labels.size() != table.n) {
      return InvalidArgument(name + ": " + std::to_string(table.labels.size()) + " labels for " +
                             std::to_string(table.n) + " samples");
    }
    layout.labels = true;
  } else {
    if (table.task.targets < 1) {
      return InvalidArgument(name + ": a regression table needs at least one target, got " +
                             std::to_string(table.task.targets));
    }
    layout.targets = static_cast<std::size_t>(table.task.targets);
    if (table.targets.size() / layout.targets != table.n ||
        table.targets.size() % layout.targets != 0) {
      return InvalidArgument(name + ": " + std::to_string(table.targets.size()) + " targets for " +
                             std::to_string(table.n) + " samples of " +
                             std::to_string(layout.targets));
    }
  }
  auto input = std::make_unique<CudaPinnedInput>(options, layout, compute);
  RETURN_IF_ERROR(input->Init(table).WithContext("creating the pinned input"));
  return std::unique_ptr<PinnedInput>(std::move(input));
}

}  // namespace ringtrain::gpu
