#include "controller/kube/token_bucket.h"

#include <gtest/gtest.h>

#include "tests/fakes/fake_clock.h"

namespace ringtrain::kube {
namespace {

using ringtrain::testing::FakeClock;
using std::chrono::milliseconds;

TEST(TokenBucket, BurstThenOneTokenPerIntervalInFifoOrder) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/10, /*burst=*/2, &clock);
  const Duration max = std::chrono::seconds(10);
  EXPECT_EQ(*bucket.Reserve(max), milliseconds(0));
  EXPECT_EQ(*bucket.Reserve(max), milliseconds(0));
  // Out of tokens: each reservation waits one interval more than the one before.
  EXPECT_EQ(*bucket.Reserve(max), milliseconds(100));
  EXPECT_EQ(*bucket.Reserve(max), milliseconds(200));
  EXPECT_EQ(*bucket.Reserve(max), milliseconds(300));
  // Time pays the debt back.
  clock.Advance(milliseconds(300));
  EXPECT_EQ(*bucket.Reserve(max), milliseconds(100));
  clock.Advance(std::chrono::seconds(60));  // refills only up to the burst
  EXPECT_EQ(*bucket.Reserve(max), milliseconds(0));
  EXPECT_EQ(*bucket.Reserve(max), milliseconds(0));
  EXPECT_EQ(*bucket.Reserve(max), milliseconds(100));
}

TEST(TokenBucket, AWaitLongerThanTheLimitTakesNoToken) {
  FakeClock clock;
  TokenBucket bucket(/*qps=*/0.1, /*burst=*/1, &clock);
  EXPECT_EQ(*bucket.Reserve(milliseconds(100)), milliseconds(0));
  auto refused = bucket.Reserve(milliseconds(100));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(refused.status().message().find("10s"), std::string::npos)
      << refused.status().ToString();
  // The refusal did not go into debt: after 10 s one token is there.
  clock.Advance(std::chrono::seconds(10));
  EXPECT_EQ(*bucket.Reserve(milliseconds(100)), milliseconds(0));
}

TEST(TokenBucket, NoLimitWithoutQps) {
  FakeClock clock;
  TokenBucket bucket(0, 1, &clock);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(*bucket.Reserve(milliseconds(0)), milliseconds(0));
}

}  // namespace
}  // namespace ringtrain::kube
