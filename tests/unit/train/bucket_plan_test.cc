#include "runner/train/bucket_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace ringtrain::train {
namespace {

using model::ParamRange;
using Launch = std::pair<std::size_t, std::size_t>;

// Ranges of the given sizes tiling [0, sum).
std::vector<ParamRange> Tile(const std::vector<std::size_t>& counts) {
  std::vector<ParamRange> out;
  std::size_t offset = 0;
  for (std::size_t c : counts) {
    out.push_back({offset, c});
    offset += c;
  }
  return out;
}

BucketPlan MustCreate(const std::vector<ParamRange>& ranges, std::size_t cap, bool overlap = true) {
  auto plan = BucketPlan::Create(ranges, cap, overlap);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return std::move(plan).value();
}

TEST(BucketPlan, GroupsRangesFromTheEndUpToTheCap) {
  // Sizes 10 20 5 5 40 100, cap 30, from the end: [100] and [40] are bigger than the cap and
  // alone; then 5 + 5 + 20 = 30 fits one bucket; adding the 10 would exceed it.
  const auto ranges = Tile({10, 20, 5, 5, 40, 100});
  BucketPlan plan = MustCreate(ranges, 30);
  const auto& b = plan.buckets();
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].offset, 80u);
  EXPECT_EQ(b[0].count, 100u);
  EXPECT_EQ(b[1].offset, 40u);
  EXPECT_EQ(b[1].count, 40u);
  EXPECT_EQ(b[2].offset, 10u);
  EXPECT_EQ(b[2].count, 30u);
  EXPECT_EQ(b[2].ranges, 3);
  EXPECT_EQ(b[3].offset, 0u);
  EXPECT_EQ(b[3].count, 10u);
  EXPECT_EQ(plan.total(), 180u);
}

TEST(BucketPlan, WithoutOverlapOneBucketOfEverything) {
  BucketPlan plan = MustCreate(Tile({3, 4, 5}), 1, /*overlap=*/false);
  ASSERT_EQ(plan.buckets().size(), 1u);
  EXPECT_EQ(plan.buckets()[0].count, 12u);
  EXPECT_EQ(*plan.MarkReady({7, 5}), (Launch{0, 0}));
  EXPECT_EQ(*plan.MarkReady({0, 3}), (Launch{0, 0}));
  EXPECT_EQ(*plan.MarkReady({3, 4}), (Launch{0, 1}));
  EXPECT_TRUE(plan.complete());
}

TEST(BucketPlan, LaunchesStrictlyInBucketOrder) {
  // cap 4: buckets [8,12) [4,8) [0,4), one range each.
  BucketPlan plan = MustCreate(Tile({4, 4, 4}), 4);
  ASSERT_EQ(plan.buckets().size(), 3u);
  // The first layer's range finishing first must not launch bucket 2 before buckets 0 and 1.
  EXPECT_EQ(*plan.MarkReady({0, 4}), (Launch{0, 0}));
  EXPECT_EQ(*plan.MarkReady({4, 4}), (Launch{0, 0}));
  EXPECT_EQ(*plan.MarkReady({8, 4}), (Launch{0, 3}));
  EXPECT_TRUE(plan.complete());
  plan.Reset();
  EXPECT_EQ(plan.launched(), 0u);
  EXPECT_EQ(*plan.MarkReady({8, 4}), (Launch{0, 1}));
  EXPECT_EQ(*plan.MarkReady({4, 4}), (Launch{1, 2}));
  EXPECT_FALSE(plan.complete());
}

TEST(BucketPlan, UnknownAndRepeatedRangesAreErrorsThatChangeNothing) {
  BucketPlan plan = MustCreate(Tile({4, 4}), 4);
  for (const ParamRange& bad : {ParamRange{1, 3}, ParamRange{4, 3}, ParamRange{8, 1}}) {
    auto r = plan.MarkReady(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);
    EXPECT_NE(r.status().message().find("unknown range"), std::string::npos);
  }
  EXPECT_EQ(*plan.MarkReady({4, 4}), (Launch{0, 1}));
  auto twice = plan.MarkReady({4, 4});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("twice"), std::string::npos);
  EXPECT_EQ(plan.launched(), 1u);
  EXPECT_EQ(*plan.MarkReady({0, 4}), (Launch{1, 2}));
}

TEST(BucketPlan, RangesThatDoNotTileAreRejected) {
  EXPECT_EQ(BucketPlan::Create({}, 4, true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BucketPlan::Create({{0, 4}, {5, 4}}, 4, true).status().code(),
            StatusCode::kInvalidArgument);  // a gap
  EXPECT_EQ(BucketPlan::Create({{0, 4}, {3, 4}}, 4, true).status().code(),
            StatusCode::kInvalidArgument);  // an overlap
  EXPECT_EQ(BucketPlan::Create({{0, 0}}, 4, true).status().code(), StatusCode::kInvalidArgument);
}

TEST(BucketPlan, SliceSizeFollowsTheBucketCap) {
  EXPECT_EQ(GradSliceFloats(256 * 1024, true), 256u * 1024 / 4 / kSlicesPerBucket);
  EXPECT_EQ(GradSliceFloats(256 * 1024, false), 0u);
  EXPECT_EQ(GradSliceFloats(1, true), 1u);
}

}  // namespace
}  // namespace ringtrain::train
