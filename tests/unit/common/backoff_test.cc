#include "common/backoff.h"

#include <gtest/gtest.h>

namespace ringtrain {
namespace {

// Each wait is uniform in [cap/2, cap], the cap doubling from `initial` up to `max`.
TEST(Backoff, WaitsGrowToTheCapWithJitterInTheUpperHalf) {
  Backoff b(BackoffOptions{Duration{100}, Duration{1000}, 2.0}, /*seed=*/1);
  const long caps[] = {100, 200, 400, 800, 1000, 1000, 1000};
  for (long cap : caps) {
    const long w = b.Next().count();
    EXPECT_GE(w, cap / 2) << "cap " << cap;
    EXPECT_LE(w, cap) << "cap " << cap;
  }
  EXPECT_EQ(b.attempts(), 7);
  b.Reset();
  EXPECT_EQ(b.attempts(), 0);
  EXPECT_LE(b.Next().count(), 100);
}

// The deterministic delay (work queue, planner) is the jittered backoff's cap, exactly.
TEST(Backoff, DelayDoublesFromInitialToTheMaxExactly) {
  const BackoffOptions o{Duration{20}, Duration{1000}, 2.0};
  const long want[] = {20, 40, 80, 160, 320, 640, 1000, 1000};
  for (int attempt = 0; attempt < 8; ++attempt) {
    EXPECT_EQ(BackoffDelay(o, attempt).count(), want[attempt]) << "attempt " << attempt;
  }
  EXPECT_EQ(BackoffDelay(o, 1'000'000).count(), 1000);
  EXPECT_EQ(BackoffDelay(o, -3).count(), 20);
  // An initial delay above the max is the max from the first retry; a zero one stays zero.
  EXPECT_EQ(BackoffDelay({std::chrono::hours(1), Duration{60'000}, 2.0}, 0).count(), 60'000);
  EXPECT_EQ(BackoffDelay({Duration{0}, Duration{60'000}, 2.0}, 5).count(), 0);
  Backoff b(o, /*seed=*/3);
  for (int attempt = 0; attempt < 8; ++attempt) {
    const long w = b.Next().count();
    EXPECT_LE(w, BackoffDelay(o, attempt).count());
    EXPECT_GE(w, BackoffDelay(o, attempt).count() / 2);
  }
}

TEST(Backoff, SameSeedSameWaitsOtherSeedOtherWaits) {
  Backoff a(BackoffOptions{}, 42), b(BackoffOptions{}, 42), c(BackoffOptions{}, 43);
  bool differs = false;
  for (int i = 0; i < 20; ++i) {
    const Duration wa = a.Next();
    EXPECT_EQ(wa, b.Next());
    differs |= wa != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(Backoff, ManyAttemptsNeitherOverflowNorExceedTheMax) {
  Backoff b(BackoffOptions{Duration{50}, Duration{2000}, 2.0}, 7);
  for (int i = 0; i < 10000; ++i) {
    const long w = b.Next().count();
    ASSERT_GE(w, 0);
    ASSERT_LE(w, 2000);
  }
}

}  // namespace
}  // namespace ringtrain
