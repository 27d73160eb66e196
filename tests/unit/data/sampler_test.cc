#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "runner/data/sampler.h"

namespace ringtrain::data {
namespace {

TEST(DistributedSampler, ShardsAreDisjointEqualAndCoverTheDataset) {
  for (int world : {1, 2, 3, 4, 7}) {
    const std::size_t n = 103;
    std::multiset<std::size_t> all;
    std::size_t per_rank = 0;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(n, r, world, 42);
      std::vector<std::size_t> idx;
      s.Indices(3, idx);
      if (r == 0) per_rank = idx.size();
      EXPECT_EQ(idx.size(), per_rank) << "world " << world;
      EXPECT_EQ(idx.size(), s.num_samples());
      all.insert(idx.begin(), idx.end());
    }
    EXPECT_EQ(per_rank, (n + world - 1) / world);
    // Every sample at least once; only the padding (< world samples) repeats.
    for (std::size_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u);
    EXPECT_EQ(all.size(), per_rank * world);
    EXPECT_LT(all.size() - n, static_cast<std::size_t>(world));
  }
}

TEST(DistributedSampler, ReshufflesPerEpochDeterministically) {
  DistributedSampler a(1000, 1, 4, 7), b(1000, 1, 4, 7), c(1000, 1, 4, 8);
  std::vector<std::size_t> e0, e0b, e1, other;
  a.Indices(0, e0);
  b.Indices(0, e0b);
  a.Indices(1, e1);
  c.Indices(0, other);
  EXPECT_EQ(e0, e0b);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, other);
}

TEST(DistributedSampler, UnionOfRankBatchesIsTheSingleRankBatch) {
  // The data-parallel invariant: N ranks with batch B/N see, step by step, what one rank with
  // batch B sees.
  const std::size_t n = 96;
  const int world = 3, b = 4;
  DistributedSampler single(n, 0, 1, 5);
  std::vector<std::size_t> one;
  single.Indices(2, one);
  std::vector<std::vector<std::size_t>> ranks(world);
  for (int r = 0; r < world; ++r) DistributedSampler(n, r, world, 5).Indices(2, ranks[r]);
  for (int step = 0; step < static_cast<int>(n) / (b * world); ++step) {
    std::multiset<std::size_t> got, want;
    for (int r = 0; r < world; ++r) {
      got.insert(ranks[r].begin() + step * b, ranks[r].begin() + (step + 1) * b);
    }
    want.insert(one.begin() + step * b * world, one.begin() + (step + 1) * b * world);
    EXPECT_EQ(got, want) << "step " << step;
  }
}

TEST(DistributedSampler, StepsPerEpochAreEqualAcrossRanks) {
  DistributedSampler s0(60000, 0, 3, 1), s2(60000, 2, 3, 1);
  EXPECT_EQ(s0.steps_per_epoch(64), s2.steps_per_epoch(64));
  EXPECT_EQ(s0.steps_per_epoch(64), 313);
}

TEST(DistributedSampler, NoShuffleKeepsOrder) {
  DistributedSampler s(10, 1, 2, 0, /*shuffle=*/false);
  std::vector<std::size_t> idx;
  s.Indices(0, idx);
  EXPECT_EQ(idx, (std::vector<std::size_t>{1, 3, 5, 7, 9}));
}

// Issue 9 item 7: a gang of 2 consumed the first part of an epoch; a gang of 3 continues at
// that global position. Together they see every sample of the epoch, and only the padding of
// the second part repeats.
TEST(DistributedSampler, ContinuingAnEpochInAnotherWorldSeesEverySampleOnce) {
  const std::size_t n = 103;
  const int b = 4;
  for (std::size_t steps_done : {0, 1, 3, 12}) {
    const std::size_t offset = steps_done * b * 2;
    std::multiset<std::size_t> seen;
    for (int r = 0; r < 2; ++r) {
      std::vector<std::size_t> idx;
      DistributedSampler(n, r, 2, 9).Indices(5, idx);
      seen.insert(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(steps_done * b));
    }
    std::size_t second = 0;
    for (int r = 0; r < 3; ++r) {
      DistributedSampler s(n, r, 3, 9);
      std::vector<std::size_t> idx;
      s.Indices(5, idx, offset);
      EXPECT_EQ(idx.size(), s.num_samples(offset));
      EXPECT_EQ(idx.size(), (n - offset + 2) / 3);
      second += idx.size();
      seen.insert(idx.begin(), idx.end());
    }
    for (std::size_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << "sample " << i;
    EXPECT_EQ(seen.size(), offset + second);
    EXPECT_LT(seen.size() - n, 3u) << "only the padding repeats";
  }
}

TEST(DistributedSampler, OffsetZeroIsTheWholeEpoch) {
  DistributedSampler s(50, 1, 3, 4);
  std::vector<std::size_t> a, b;
  s.Indices(2, a);
  s.Indices(2, b, 0);
  EXPECT_EQ(a, b);
  EXPECT_EQ(s.steps_per_epoch(4, 0), s.steps_per_epoch(4));
}

}  // namespace
}  // namespace ringtrain::data
