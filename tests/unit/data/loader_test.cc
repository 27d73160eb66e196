#include <gtest/gtest.h>

#include <cmath>

#include "runner/data/loader.h"

namespace ringtrain::data {
namespace {

// Sample i has every pixel equal to i % 256 and label i % 10, so a batch tells which samples
// it holds.
Dataset MakeDataset(std::size_t n) {
  Dataset ds;
  ds.count = n;
  ds.rows = 2;
  ds.cols = 3;
  for (std::size_t i = 0; i < n; ++i) {
    for (int p = 0; p < 6; ++p) ds.images.push_back(static_cast<std::uint8_t>(i % 256));
    ds.labels.push_back(static_cast<std::uint8_t>(i % 10));
  }
  return ds;
}

std::size_t SampleOf(const float* x) {
  return static_cast<std::size_t>(std::lround((x[0] * kFashionStd + kFashionMean) * 255.0f));
}

TEST(PrefetchLoader, DeliversTheSamplerOrderAcrossEpochs) {
  Dataset ds = MakeDataset(50);
  for (int workers : {1, 3}) {
    LoaderOptions o;
    o.batch_size = 8;
    o.workers = workers;
    o.prefetch = 3;
    o.rank = 1;
    o.world_size = 2;
    o.seed = 9;
    o.end_epoch = 3;
    auto loader = PrefetchLoader::Create(ds, o);
    ASSERT_TRUE(loader.ok());
    DistributedSampler sampler(50, 1, 2, 9);
    EXPECT_EQ((*loader)->steps_per_epoch(), 4);  // 25 samples per rank
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::vector<std::size_t> want;
      sampler.Indices(epoch, want);
      std::size_t pos = 0;
      for (int step = 0; step < 4; ++step) {
        auto b = (*loader)->Next();
        ASSERT_TRUE(b.ok()) << b.status().ToString();
        EXPECT_EQ(b->epoch, epoch);
        EXPECT_EQ(b->step, step);
        EXPECT_EQ(b->n, step < 3 ? 8 : 1);
        for (int i = 0; i < b->n; ++i, ++pos) {
          EXPECT_EQ(SampleOf(b->x + i * 6), want[pos]);
          EXPECT_EQ(b->y[i], static_cast<std::int32_t>(want[pos] % 10));
        }
      }
    }
    auto end = (*loader)->Next();
    EXPECT_EQ(end.status().code(), StatusCode::kNotFound);
  }
}

TEST(PrefetchLoader, ResumesMidEpoch) {
  Dataset ds = MakeDataset(40);
  LoaderOptions o;
  o.batch_size = 5;
  o.end_epoch = 2;
  o.start_epoch = 1;
  o.start_step = 3;
  auto loader = PrefetchLoader::Create(ds, o);
  ASSERT_TRUE(loader.ok());
  std::vector<std::size_t> want;
  DistributedSampler(40, 0, 1, o.seed).Indices(1, want);
  auto b = (*loader)->Next();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->epoch, 1);
  EXPECT_EQ(b->step, 3);
  EXPECT_EQ(SampleOf(b->x), want[15]);
  int remaining = 1;
  while ((*loader)->Next().ok()) ++remaining;
  EXPECT_EQ(remaining, 5);  // steps 3..7
}

// A checkpoint of a gang of 2 (batch 5) after 3 steps: 30 samples of epoch 1 seen. Rank 1 of
// a gang of 3 continues at position 30 of the permutation: 31, 34, 37 (then wraps to pad).
TEST(PrefetchLoader, ContinuesAtASampleOffsetInAnotherWorld) {
  Dataset ds = MakeDataset(40);
  LoaderOptions o;
  o.batch_size = 2;
  o.rank = 1;
  o.world_size = 3;
  o.start_epoch = 1;
  o.start_samples = 30;
  o.end_epoch = 2;
  auto loader = PrefetchLoader::Create(ds, o);
  ASSERT_TRUE(loader.ok());
  std::vector<std::size_t> perm;
  DistributedSampler(40, 0, 1, o.seed).Indices(1, perm);
  auto b = (*loader)->Next();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->epoch, 1);
  EXPECT_EQ(b->n, 2);
  EXPECT_EQ(SampleOf(b->x), perm[31]);
  EXPECT_EQ(SampleOf(b->x + 6), perm[34]) << "second sample of the batch";
  EXPECT_FALSE(b->last_in_epoch);
  EXPECT_EQ(b->epoch_samples_after, 36);  // 30 + 2 × 3
  b = (*loader)->Next();                  // ceil(10 / 3) = 4 samples per rank: 2 batches
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->last_in_epoch);
  EXPECT_EQ(b->epoch_samples_after, 40);
  EXPECT_EQ(SampleOf(b->x), perm[37]);
  EXPECT_EQ(SampleOf(b->x + 6), perm[0]) << "padding wraps to the epoch's start";
  EXPECT_EQ((*loader)->Next().status().code(), StatusCode::kNotFound);
}

TEST(PrefetchLoader, RejectsBadOptions) {
  Dataset ds = MakeDataset(4);
  LoaderOptions o;
  o.prefetch = 1;
  EXPECT_FALSE(PrefetchLoader::Create(ds, o).ok());
  o.prefetch = 2;
  o.batch_size = 0;
  EXPECT_FALSE(PrefetchLoader::Create(ds, o).ok());
}

}  // namespace
}  // namespace ringtrain::data
