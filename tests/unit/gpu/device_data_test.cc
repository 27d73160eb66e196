// DeviceDataset and PinnedInput. The sharding rules (ShardPlan) and the shuffle keys are host
// functions too, so those tests run everywhere; the device tests check that the GPU computes
// exactly the host's permutation, that shards follow DistributedSampler's padding, that Gather
// equals data::Gather bit for bit, and that PinnedInput delivers PrefetchLoader's batches, of an
// IDX dataset and of classification and regression tables.
#include "runner/data/cuda/device_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runner/cuda/shard.h"
#include "runner/data/sampler.h"
#include "runner/data/table.h"
#include "tests/unit/gpu/gpu_test_util.h"

namespace ringtrain::gpu {
namespace {

using testing::Download;
using testing::TestStream;

// Sample i's first two pixels spell i (little endian), the rest is random; label i % 10.
data::Dataset MakeDataset(std::size_t count, int rows, int cols, std::uint64_t seed) {
  data::Dataset ds;
  ds.count = count;
  ds.rows = rows;
  ds.cols = cols;
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < count; ++i) {
    for (int p = 0; p < rows * cols; ++p) {
      std::uint8_t v = static_cast<std::uint8_t>(rng());
      if (p == 0) v = static_cast<std::uint8_t>(i & 0xFF);
      if (p == 1) v = static_cast<std::uint8_t>((i >> 8) & 0xFF);
      ds.images.push_back(v);
    }
    ds.labels.push_back(static_cast<std::uint8_t>(i % 10));
  }
  return ds;
}

// A table of `n` samples of `features` floats, sample i's first feature i (so batches of
// different samples differ), the rest random:
// labels i % classes (classes > 0) or `targets` random targets per sample (classes == 0).
data::Table MakeTable(std::size_t n, std::size_t features, int classes, int targets,
                      std::uint64_t seed) {
  data::Table t;
  t.n = n;
  t.features = features;
  t.shape = {features};
  t.path = classes > 0 ? "classes.csv" : "targets.npy";
  t.labels_path = t.path;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  for (std::size_t i = 0; i < n; ++i) {
    t.x.push_back(static_cast<float>(i));
    for (std::size_t j = 1; j < features; ++j) t.x.push_back(value(rng));
  }
  if (classes > 0) {
    t.task.kind = data::Task::Kind::kClassification;
    t.task.classes = classes;
    for (std::size_t i = 0; i < n; ++i) {
      t.labels.push_back(static_cast<std::int32_t>(i % static_cast<std::size_t>(classes)));
    }
  } else {
    t.task.kind = data::Task::Kind::kRegression;
    t.task.targets = targets;
    for (std::size_t i = 0; i < n * static_cast<std::size_t>(targets); ++i) {
      t.targets.push_back(value(rng));
    }
  }
  return t;
}

// ---- host: the sharding rules, the shuffle keys and the argument checks ----

TEST(ShardPlan, MatchesDistributedSampler) {
  for (const std::int64_t count : {1, 7, 50, 100, 101, 1000}) {
    for (const int world : {1, 2, 3, 8}) {
      for (const int batch : {1, 4, 64}) {
        std::vector<std::size_t> want;
        for (int rank = 0; rank < world; ++rank) {
          SCOPED_TRACE(std::to_string(count) + " samples, rank " + std::to_string(rank) + "/" +
                       std::to_string(world) + ", batch " + std::to_string(batch));
          // Unshuffled, the sampler's permutation is the identity, so its indices are positions.
          data::DistributedSampler sampler(static_cast<std::size_t>(count), rank, world, 5,
                                           /*shuffle=*/false);
          sampler.Indices(0, want);
          const ShardPlan plan{count, rank, world, batch};
          ASSERT_EQ(plan.num_samples(), static_cast<std::int64_t>(sampler.num_samples()));
          ASSERT_EQ(plan.steps_per_epoch(), sampler.steps_per_epoch(batch));
          std::size_t pos = 0;
          for (std::int64_t step = 0; step < plan.steps_per_epoch(); ++step) {
            const std::int64_t n = plan.batch_samples(step);
            // The last batch is short exactly as PrefetchLoader cuts it.
            const std::size_t begin = static_cast<std::size_t>(step) * batch;
            ASSERT_EQ(n, static_cast<std::int64_t>(std::min(want.size(), begin + batch) - begin));
            for (std::int64_t i = 0; i < n; ++i, ++pos) {
              ASSERT_EQ(static_cast<std::size_t>(plan.PermPosition(step, i)), want[pos]);
            }
          }
          EXPECT_EQ(pos, want.size());
          EXPECT_EQ(plan.batch_samples(-1), 0);
          EXPECT_EQ(plan.batch_samples(plan.steps_per_epoch()), 0);
        }
      }
    }
  }
}

TEST(ShuffleKeys, HostPermutationIsADeterministicPermutation) {
  const auto a = HostShufflePermutation(1000, 42, 3);
  std::vector<std::uint32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint32_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(a, HostShufflePermutation(1000, 42, 3));
  EXPECT_NE(a, HostShufflePermutation(1000, 42, 4));
  EXPECT_NE(a, HostShufflePermutation(1000, 43, 3));
  std::vector<std::uint32_t> identity(1000);
  for (std::uint32_t i = 0; i < identity.size(); ++i) identity[i] = i;
  EXPECT_NE(a, identity);
}

TEST(DeviceDatasetConfig, RejectsBadArgumentsWithoutTouchingTheDevice) {
  const data::Dataset ds = MakeDataset(10, 2, 2, 1);
  EXPECT_EQ(DeviceDataset::Create(ds, 2, 2, 4, 1, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceDataset::Create(ds, 0, 0, 4, 1, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceDataset::Create(ds, 0, 1, 0, 1, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  data::Dataset broken = ds;
  broken.labels.pop_back();
  EXPECT_EQ(DeviceDataset::Create(broken, 0, 1, 4, 1, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  data::Dataset empty;
  EXPECT_EQ(DeviceDataset::Create(empty, 0, 1, 4, 1, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

// Create checks a table before any CUDA call (a null stream here): a bad one is InvalidArgument
// naming its file, also where no device exists and a CUDA call would fail with another code.
TEST(PinnedInputConfig, RejectsBadTablesWithoutTouchingTheDevice) {
  ASSERT_TRUE(data::ValidateTable(MakeTable(10, 3, 4, 0, 1)).ok());
  ASSERT_TRUE(data::ValidateTable(MakeTable(10, 3, 0, 2, 1)).ok());
  data::LoaderOptions o;
  o.batch_size = 4;
  const auto expect_invalid = [&](const data::Table& t, const data::LoaderOptions& options,
                                  const std::string& what) {
    const auto input = PinnedInput::Create(t, options, nullptr);
    EXPECT_EQ(input.status().code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(input.status().message().find(t.path), std::string::npos)
        << what << ": " << input.status().ToString();
  };
  for (const int classes : {4, 0}) {
    const data::Table good = MakeTable(10, 3, classes, classes > 0 ? 0 : 2, 1);
    SCOPED_TRACE(good.path);
    data::LoaderOptions zero = o;
    zero.batch_size = 0;
    expect_invalid(good, zero, "batch size 0");
    data::LoaderOptions negative = o;
    negative.batch_size = -3;
    expect_invalid(good, negative, "batch size -3");
    data::Table empty = good;
    empty.n = 0;
    empty.x.clear();
    empty.labels.clear();
    empty.targets.clear();
    expect_invalid(empty, o, "no samples");
    data::Table featureless = good;
    featureless.features = 0;
    featureless.shape = {0};
    featureless.x.clear();
    expect_invalid(featureless, o, "no features");
    data::Table short_x = good;
    short_x.x.pop_back();
    expect_invalid(short_x, o, "a value missing");
  }
  data::Table no_targets = MakeTable(10, 3, 0, 2, 1);
  no_targets.task.targets = 0;
  no_targets.targets.clear();
  expect_invalid(no_targets, o, "a regression table without targets");
  data::Table short_targets = MakeTable(10, 3, 0, 2, 1);
  short_targets.targets.pop_back();
  expect_invalid(short_targets, o, "a target missing");
  data::Table short_labels = MakeTable(10, 3, 4, 0, 1);
  short_labels.labels.pop_back();
  expect_invalid(short_labels, o, "a label missing");
}

// ---- device ----

TEST(DeviceDataset, PermutationIsTheHostsOnEveryRankAndInstance) {
  RT_REQUIRE_GPU();
  const data::Dataset ds = MakeDataset(5003, 3, 3, 7);
  TestStream stream;
  RT_ASSERT_OK(stream.status());
  auto rank0 = DeviceDataset::Create(ds, 0, 3, 16, 99, stream.get());
  auto rank2 = DeviceDataset::Create(ds, 2, 3, 16, 99, stream.get());
  RT_ASSERT_OK(rank0.status());
  RT_ASSERT_OK(rank2.status());
  std::vector<std::uint32_t> before;
  RT_ASSERT_OK((*rank0)->ReadPermutation(before));
  for (std::uint32_t i = 0; i < before.size(); ++i) ASSERT_EQ(before[i], i) << "not the identity";
  for (const int epoch : {0, 1, 7}) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    RT_ASSERT_OK((*rank0)->Shuffle(epoch));
    RT_ASSERT_OK((*rank2)->Shuffle(epoch));
    std::vector<std::uint32_t> a;
    std::vector<std::uint32_t> b;
    RT_ASSERT_OK((*rank0)->ReadPermutation(a));
    RT_ASSERT_OK((*rank2)->ReadPermutation(b));
    EXPECT_EQ(a, HostShufflePermutation(5003, 99, epoch));
    EXPECT_EQ(a, b);
    std::vector<std::uint32_t> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (std::uint32_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
  }
}

// Every rank's batches over an epoch: Gather equals data::Gather on the indices the sharding
// rules pick from the device's permutation; together the shards cover the dataset, overlapping
// only in DistributedSampler's wrap-around padding; the last batch is short.
TEST(DeviceDataset, ShardsGatherAndShortLastBatch) {
  RT_REQUIRE_GPU();
  const std::int64_t count = 103;
  const int world = 3;
  const int batch = 8;
  const data::Dataset ds = MakeDataset(count, 4, 5, 11);
  const int sz = ds.sample_size();
  TestStream stream;
  RT_ASSERT_OK(stream.status());
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  RT_ASSERT_OK(x.Allocate(static_cast<std::size_t>(batch) * sz));
  RT_ASSERT_OK(y.Allocate(batch));
  const int epoch = 2;
  std::map<std::size_t, int> seen;
  std::vector<std::size_t> padding_positions;
  for (int rank = 0; rank < world; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto dd = DeviceDataset::Create(ds, rank, world, batch, 5, stream.get());
    RT_ASSERT_OK(dd.status());
    DeviceDataset& d = **dd;
    const ShardPlan plan{count, rank, world, batch};
    data::DistributedSampler sampler(count, rank, world, 5);
    ASSERT_EQ(d.steps_per_epoch(), sampler.steps_per_epoch(batch));  // 35 per rank: 5 steps
    ASSERT_EQ(d.steps_per_epoch(), 5);
    EXPECT_EQ(d.batch_samples(4), 3);  // the short last batch
    EXPECT_EQ(d.batch_samples(0), batch);
    RT_ASSERT_OK(d.Shuffle(epoch));
    std::vector<std::uint32_t> perm;
    RT_ASSERT_OK(d.ReadPermutation(perm));
    for (std::int64_t step = 0; step < d.steps_per_epoch(); ++step) {
      const int n = d.batch_samples(step);
      RT_ASSERT_OK(d.SetStep(step));
      EXPECT_EQ(d.Gather(x.data(), y.data(), n + 1).code(), StatusCode::kInvalidArgument);
      RT_ASSERT_OK(testing::PoisonFloats(x.data(), x.size()));
      RT_ASSERT_OK(d.Gather(x.data(), y.data(), n));
      RT_ASSERT_OK(stream.Sync());
      std::vector<std::size_t> idx;
      for (int i = 0; i < n; ++i) {
        const std::int64_t q = plan.PermPosition(step, i);
        idx.push_back(perm[static_cast<std::size_t>(q)]);
        if (rank + (step * batch + i) * world >= count) padding_positions.push_back(idx.back());
        ++seen[idx.back()];
      }
      std::vector<float> want_x(static_cast<std::size_t>(n) * sz);
      std::vector<std::int32_t> want_y(static_cast<std::size_t>(n));
      data::Gather(ds, idx.data(), n, want_x.data(), want_y.data());
      std::vector<float> got_x;
      std::vector<std::int32_t> got_y;
      RT_ASSERT_OK(Download(x.data(), want_x.size(), got_x));
      RT_ASSERT_OK(Download(y.data(), want_y.size(), got_y));
      EXPECT_TRUE(testing::BitwiseEqual(got_x, want_x)) << "step " << step;
      EXPECT_EQ(got_y, want_y) << "step " << step;
    }
    EXPECT_EQ(d.SetStep(d.steps_per_epoch()).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(d.SetStep(-1).code(), StatusCode::kInvalidArgument);
  }
  // 3 × 35 = 105 slots for 103 samples: every sample once, the first two of the permutation
  // (the wrap-around padding) twice.
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(count));
  std::size_t twice = 0;
  for (const auto& [sample, times] : seen) {
    EXPECT_LE(times, 2);
    if (times == 2) ++twice;
  }
  EXPECT_EQ(twice, 2u);
  EXPECT_EQ(padding_positions.size(), 2u);
}

TEST(DeviceDataset, GatherPlainEqualsDataGather) {
  RT_REQUIRE_GPU();
  const data::Dataset ds = MakeDataset(50, 28, 28, 3);
  TestStream stream;
  RT_ASSERT_OK(stream.status());
  auto dd = DeviceDataset::Create(ds, 1, 2, 10, 0, stream.get());
  RT_ASSERT_OK(dd.status());
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  RT_ASSERT_OK(x.Allocate(25 * 784));
  RT_ASSERT_OK(y.Allocate(25));
  struct Range {
    std::int64_t first;
    int stride;
    int n;
  };
  for (const Range r : {Range{1, 2, 24}, Range{0, 1, 25}, Range{49, 1, 1}, Range{3, 7, 7}}) {
    RT_ASSERT_OK(testing::PoisonFloats(x.data(), x.size()));
    RT_ASSERT_OK((*dd)->GatherPlain(r.first, r.stride, r.n, x.data(), y.data()));
    RT_ASSERT_OK(stream.Sync());
    std::vector<std::size_t> idx;
    for (int i = 0; i < r.n; ++i) idx.push_back(static_cast<std::size_t>(r.first + i * r.stride));
    std::vector<float> want_x(static_cast<std::size_t>(r.n) * 784);
    std::vector<std::int32_t> want_y(static_cast<std::size_t>(r.n));
    data::Gather(ds, idx.data(), r.n, want_x.data(), want_y.data());
    std::vector<float> got_x;
    std::vector<std::int32_t> got_y;
    RT_ASSERT_OK(Download(x.data(), want_x.size(), got_x));
    RT_ASSERT_OK(Download(y.data(), want_y.size(), got_y));
    EXPECT_TRUE(testing::BitwiseEqual(got_x, want_x));
    EXPECT_EQ(got_y, want_y);
  }
  EXPECT_EQ((*dd)->GatherPlain(45, 5, 2, x.data(), y.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*dd)->GatherPlain(-1, 1, 2, x.data(), y.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*dd)->GatherPlain(0, 0, 2, x.data(), y.data()).code(), StatusCode::kInvalidArgument);
  RT_ASSERT_OK((*dd)->GatherPlain(0, 1, 0, x.data(), y.data()));
}

// PinnedInput delivers PrefetchLoader's batches (same options) in order, and a batch's device
// buffers still hold it after the following call.
TEST(PinnedInput, DeliversThePrefetchLoadersBatches) {
  RT_REQUIRE_GPU();
  const data::Dataset ds = MakeDataset(203, 6, 7, 5);
  const std::size_t sz = static_cast<std::size_t>(ds.sample_size());
  data::LoaderOptions o;
  o.batch_size = 16;
  o.workers = 2;
  o.prefetch = 3;
  o.rank = 1;
  o.world_size = 2;
  o.seed = 17;
  o.start_epoch = 0;
  o.start_step = 2;
  o.end_epoch = 3;
  TestStream stream;
  RT_ASSERT_OK(stream.status());
  auto input = PinnedInput::Create(ds, o, stream.get());
  RT_ASSERT_OK(input.status());
  auto loader = data::PrefetchLoader::Create(ds, o);
  RT_ASSERT_OK(loader.status());
  EXPECT_EQ((*input)->steps_per_epoch(), (*loader)->steps_per_epoch());

  struct Expected {
    std::vector<float> x;
    std::vector<std::int32_t> y;
  };
  DeviceBatch previous;
  Expected previous_want;
  int batches = 0;
  // wait_seconds() is the host time Next() spent waiting for the loader: none before the
  // first call, never decreasing, and a part of the time spent inside Next() (an inclusion of
  // intervals on one monotonic clock, not a bound on how long anything takes).
  EXPECT_EQ((*input)->wait_seconds(), 0.0);
  std::chrono::steady_clock::duration inside_next{0};
  double last_wait = 0.0;
  for (;;) {
    auto want = (*loader)->Next();
    const auto next_start = std::chrono::steady_clock::now();
    auto got = (*input)->Next();
    inside_next += std::chrono::steady_clock::now() - next_start;
    const double wait = (*input)->wait_seconds();
    EXPECT_GE(wait, last_wait) << "batch " << batches;
    EXPECT_LE(wait, std::chrono::duration<double>(inside_next).count() + 1e-6)
        << "batch " << batches;
    last_wait = wait;
    if (!want.ok()) {
      EXPECT_EQ(want.status().code(), StatusCode::kNotFound);
      EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
      break;
    }
    RT_ASSERT_OK(got.status());
    ++batches;
    EXPECT_EQ(got->epoch, want->epoch);
    EXPECT_EQ(got->step, want->step);
    ASSERT_EQ(got->n, want->n);
    Expected w;
    w.x.assign(want->x, want->x + static_cast<std::size_t>(want->n) * sz);
    w.y.assign(want->y, want->y + want->n);
    // Work on the compute stream after Next() sees the batch (the stream waits on the copy).
    DeviceBuffer<float> copy_x;
    DeviceBuffer<std::int32_t> copy_y;
    RT_ASSERT_OK(copy_x.Allocate(w.x.size()));
    RT_ASSERT_OK(copy_y.Allocate(w.y.size()));
    RT_ASSERT_CUDA(cudaMemcpyAsync(copy_x.data(), got->x, w.x.size() * sizeof(float),
                                   cudaMemcpyDeviceToDevice, stream.get()));
    RT_ASSERT_CUDA(cudaMemcpyAsync(copy_y.data(), got->y, w.y.size() * sizeof(std::int32_t),
                                   cudaMemcpyDeviceToDevice, stream.get()));
    RT_ASSERT_OK(stream.Sync());
    std::vector<float> gx;
    std::vector<std::int32_t> gy;
    RT_ASSERT_OK(Download(copy_x.data(), w.x.size(), gx));
    RT_ASSERT_OK(Download(copy_y.data(), w.y.size(), gy));
    EXPECT_TRUE(testing::BitwiseEqual(gx, w.x)) << "batch " << batches;
    EXPECT_EQ(gy, w.y) << "batch " << batches;
    // The previous batch is still intact after this call.
    if (previous.x != nullptr) {
      RT_ASSERT_OK(Download(previous.x, previous_want.x.size(), gx));
      RT_ASSERT_OK(Download(previous.y, previous_want.y.size(), gy));
      EXPECT_TRUE(testing::BitwiseEqual(gx, previous_want.x)) << "batch " << batches - 1;
      EXPECT_EQ(gy, previous_want.y);
    }
    previous = *got;
    previous_want = std::move(w);
  }
  EXPECT_EQ(batches, 3 * 7 - 2);  // 102 samples per rank: 7 steps per epoch, from step 2
}

// Copies n elements from the device to the host in order after the work enqueued on `stream`.
template <typename T>
Status DownloadOn(const T* device, std::size_t n, cudaStream_t stream, std::vector<T>& host) {
  host.assign(n, T{});
  if (n == 0) return Status::Ok();
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, stream),
      "download on the compute stream"));
  return CudaStatus(cudaStreamSynchronize(stream), "download: cudaStreamSynchronize");
}

// PinnedInput over `table` delivers a PrefetchLoader's batches over it (same options) in order:
// x, and labels or targets (the other null), read back on the compute stream right after Next().
void ExpectTheLoadersTableBatches(const data::Table& table, const data::LoaderOptions& o,
                                  int want_batches) {
  const bool classification = table.task.classification();
  const auto targets = static_cast<std::size_t>(classification ? 0 : table.task.targets);
  TestStream stream;
  RT_ASSERT_OK(stream.status());
  auto input = PinnedInput::Create(table, o, stream.get());
  RT_ASSERT_OK(input.status());
  auto loader = data::PrefetchLoader::Create(table, o);
  RT_ASSERT_OK(loader.status());
  EXPECT_EQ((*input)->steps_per_epoch(), (*loader)->steps_per_epoch());
  int batches = 0;
  for (;;) {
    auto want = (*loader)->Next();
    auto got = (*input)->Next();
    if (!want.ok()) {
      EXPECT_EQ(want.status().code(), StatusCode::kNotFound);
      EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
      break;
    }
    RT_ASSERT_OK(got.status());
    SCOPED_TRACE("batch " + std::to_string(batches));
    ++batches;
    EXPECT_EQ(got->epoch, want->epoch);
    EXPECT_EQ(got->step, want->step);
    ASSERT_EQ(got->n, want->n);
    ASSERT_GT(got->n, 0);
    const auto n = static_cast<std::size_t>(got->n);
    std::vector<float> gx;
    RT_ASSERT_OK(DownloadOn(got->x, n * table.features, stream.get(), gx));
    EXPECT_EQ(gx, std::vector<float>(want->x, want->x + n * table.features));
    if (classification) {
      ASSERT_NE(got->y, nullptr);
      EXPECT_EQ(got->targets, nullptr);
      std::vector<std::int32_t> gy;
      RT_ASSERT_OK(DownloadOn(got->y, n, stream.get(), gy));
      EXPECT_EQ(gy, std::vector<std::int32_t>(want->y, want->y + n));
    } else {
      EXPECT_EQ(got->y, nullptr);
      ASSERT_NE(got->targets, nullptr);
      std::vector<float> gt;
      RT_ASSERT_OK(DownloadOn(got->targets, n * targets, stream.get(), gt));
      EXPECT_EQ(gt, std::vector<float>(want->targets, want->targets + n * targets));
    }
  }
  EXPECT_EQ(batches, want_batches);
}

TEST(PinnedInput, DeliversAClassificationTablesBatches) {
  RT_REQUIRE_GPU();
  const data::Table table = MakeTable(97, 5, 4, 0, 3);
  RT_ASSERT_OK(data::ValidateTable(table));
  data::LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.prefetch = 3;
  o.rank = 0;
  o.world_size = 2;
  o.seed = 23;
  o.end_epoch = 2;
  // 49 samples per rank: 7 steps per epoch, the last one short.
  ExpectTheLoadersTableBatches(table, o, 2 * 7);
}

TEST(PinnedInput, DeliversARegressionTablesBatches) {
  RT_REQUIRE_GPU();
  const data::Table table = MakeTable(61, 3, 0, 2, 4);
  RT_ASSERT_OK(data::ValidateTable(table));
  data::LoaderOptions o;
  o.batch_size = 5;
  o.workers = 3;
  o.prefetch = 4;
  o.rank = 2;
  o.world_size = 3;
  o.seed = 29;
  o.start_step = 1;
  o.end_epoch = 3;
  // 21 samples per rank: 5 steps per epoch, the last one short; the first epoch from step 1.
  ExpectTheLoadersTableBatches(table, o, 3 * 5 - 1);
}

}  // namespace
}  // namespace ringtrain::gpu
