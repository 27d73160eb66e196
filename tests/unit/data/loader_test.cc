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

// Sample i of a Table: features (i, -i, 0.5), label i % 3 or targets (2i, i + 0.25).
Table MakeTable(std::size_t n, bool regression) {
  Table t;
  t.n = n;
  t.features = 3;
  t.shape = {3};
  t.path = "/data/t.csv";
  t.task.kind = regression ? Task::Kind::kRegression : Task::Kind::kClassification;
  t.task.classes = regression ? 0 : 3;
  t.task.targets = regression ? 2 : 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto f = static_cast<float>(i);
    t.x.insert(t.x.end(), {f, -f, 0.5f});
    if (regression) {
      t.targets.insert(t.targets.end(), {2 * f, f + 0.25f});
    } else {
      t.labels.push_back(static_cast<std::int32_t>(i % 3));
    }
  }
  return t;
}

TEST(PrefetchLoader, ReadsATableInTheSamplerOrderWithLabelsOrTargets) {
  for (const bool regression : {false, true}) {
    const Table t = MakeTable(30, regression);
    LoaderOptions o;
    o.batch_size = 4;
    o.workers = 2;
    o.prefetch = 3;
    o.rank = 0;
    o.world_size = 2;
    o.seed = 5;
    o.end_epoch = 2;
    // Resumed after 8 samples of epoch 0 (as a checkpoint or a recovered rank says).
    o.start_samples = 8;
    auto loader = PrefetchLoader::Create(t, o);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    DistributedSampler sampler(30, 0, 2, 5);
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<std::size_t> want;
      sampler.Indices(epoch, want, epoch == 0 ? 8 : 0);
      std::size_t pos = 0;
      while (pos < want.size()) {
        auto b = (*loader)->Next();
        ASSERT_TRUE(b.ok()) << b.status().ToString();
        EXPECT_EQ(b->epoch, epoch);
        for (int i = 0; i < b->n; ++i, ++pos) {
          const auto s = static_cast<float>(want[pos]);
          EXPECT_EQ(b->x[i * 3], s);
          EXPECT_EQ(b->x[i * 3 + 1], -s);
          if (regression) {
            EXPECT_EQ(b->y, nullptr);
            ASSERT_NE(b->targets, nullptr);
            EXPECT_EQ(b->targets[i * 2], 2 * s);
            EXPECT_EQ(b->targets[i * 2 + 1], s + 0.25f);
          } else {
            EXPECT_EQ(b->targets, nullptr);
            EXPECT_EQ(b->y[i], static_cast<std::int32_t>(want[pos] % 3));
          }
        }
      }
    }
    EXPECT_EQ((*loader)->Next().status().code(), StatusCode::kNotFound);
  }
  Table empty;
  empty.path = "/data/empty.csv";
  auto refused = PrefetchLoader::Create(empty, LoaderOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("/data/empty.csv"), std::string::npos);
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
