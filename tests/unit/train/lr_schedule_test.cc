#include "runner/train/lr_schedule.h"

#include <gtest/gtest.h>

namespace ringtrain::train {
namespace {

TEST(LrSchedule, WarmupRampsLinearlyFromBaseToPeak) {
  LrSchedule s{0.001, 0.004, /*warmup_steps=*/3, /*total_steps=*/10, /*cosine=*/false};
  EXPECT_DOUBLE_EQ(s.At(0), 0.002);
  EXPECT_DOUBLE_EQ(s.At(1), 0.003);
  EXPECT_DOUBLE_EQ(s.At(2), 0.004);
  EXPECT_DOUBLE_EQ(s.At(3), 0.004);
  EXPECT_DOUBLE_EQ(s.At(9), 0.004);  // constant after warmup
}

TEST(LrSchedule, CosineDecaysFromPeakToZeroAndStaysThere) {
  LrSchedule s{0.001, 0.002, /*warmup_steps=*/0, /*total_steps=*/100, /*cosine=*/true};
  EXPECT_DOUBLE_EQ(s.At(0), 0.002);
  EXPECT_NEAR(s.At(50), 0.001, 1e-12);  // half way: half the peak
  EXPECT_NEAR(s.At(100), 0.0, 1e-12);
  EXPECT_NEAR(s.At(1000), 0.0, 1e-12);  // past the end (a longer resumed run) never negative
  for (int i = 1; i <= 100; ++i) EXPECT_LE(s.At(i), s.At(i - 1));
}

TEST(LrSchedule, CosineStartsAfterWarmup) {
  LrSchedule s{0.0, 1.0, /*warmup_steps=*/10, /*total_steps=*/20, /*cosine=*/true};
  EXPECT_DOUBLE_EQ(s.At(9), 1.0);
  EXPECT_DOUBLE_EQ(s.At(10), 1.0);
  EXPECT_NEAR(s.At(15), 0.5, 1e-12);
}

TEST(LrSchedule, WarmupLongerThanTheRunStaysOnTheRamp) {
  LrSchedule s{0.0, 1.0, /*warmup_steps=*/100, /*total_steps=*/10, /*cosine=*/true};
  EXPECT_DOUBLE_EQ(s.At(9), 0.1);
}

}  // namespace
}  // namespace ringtrain::train
