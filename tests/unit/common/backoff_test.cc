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
