// PoolWindowsContaining, the index arithmetic of the CUDA Pool2dBackward gather: checked on the
// host against brute force (which windows of Pool2d's floor-mode layout contain each input row).
#include "runner/cuda/pool_windows.h"

#include <gtest/gtest.h>

#include <vector>

namespace ringtrain::gpu::kernels {
namespace {

std::vector<int> Windows(WindowRange range) {
  std::vector<int> windows;
  for (int o = range.first; o <= range.last; ++o) windows.push_back(o);
  return windows;
}

std::vector<int> BruteForce(int i, int pool, int stride, int out_count) {
  std::vector<int> windows;
  for (int o = 0; o < out_count; ++o) {
    if (o * stride <= i && i < o * stride + pool) windows.push_back(o);
  }
  return windows;
}

TEST(PoolWindowsTest, MatchesBruteForceForEveryInputRow) {
  int checked = 0;
  int uncovered = 0;
  int overlapped = 0;
  for (int h = 1; h <= 12; ++h) {
    for (int pool = 1; pool <= 5 && pool <= h; ++pool) {
      for (int stride = 1; stride <= 5; ++stride) {
        const int out_count = (h - pool) / stride + 1;  // Pool2d's floor mode
        for (int i = 0; i < h; ++i) {
          const std::vector<int> expected = BruteForce(i, pool, stride, out_count);
          EXPECT_EQ(Windows(PoolWindowsContaining(i, pool, stride, out_count)), expected)
              << "h=" << h << " pool=" << pool << " stride=" << stride << " row=" << i;
          ++checked;
          uncovered += expected.empty() ? 1 : 0;
          overlapped += expected.size() > 1 ? 1 : 0;
        }
      }
    }
  }
  // The sweep reaches the interesting cases: rows no window covers (stride > pool, and the rows
  // past the last window) and rows in several windows (stride < pool).
  EXPECT_GT(checked, 1000);
  EXPECT_GT(uncovered, 0);
  EXPECT_GT(overlapped, 0);
}

TEST(PoolWindowsTest, KnownCases) {
  // h = 7, pool 3, stride 2: windows cover 0..2, 2..4, 4..6.
  EXPECT_EQ(Windows(PoolWindowsContaining(0, 3, 2, 3)), (std::vector<int>{0}));
  EXPECT_EQ(Windows(PoolWindowsContaining(2, 3, 2, 3)), (std::vector<int>{0, 1}));
  EXPECT_EQ(Windows(PoolWindowsContaining(4, 3, 2, 3)), (std::vector<int>{1, 2}));
  EXPECT_EQ(Windows(PoolWindowsContaining(6, 3, 2, 3)), (std::vector<int>{2}));
  // h = 8, pool 2, stride 3: windows cover 0..1, 3..4, 6..7; rows 2 and 5 are in none.
  EXPECT_EQ(Windows(PoolWindowsContaining(2, 2, 3, 3)), (std::vector<int>{}));
  EXPECT_EQ(Windows(PoolWindowsContaining(5, 2, 3, 3)), (std::vector<int>{}));
  EXPECT_EQ(Windows(PoolWindowsContaining(7, 2, 3, 3)), (std::vector<int>{2}));
  // h = 5, pool 2, stride 2 (the classic 2×2 pool, odd edge): row 4 is dropped.
  EXPECT_EQ(Windows(PoolWindowsContaining(3, 2, 2, 2)), (std::vector<int>{1}));
  EXPECT_EQ(Windows(PoolWindowsContaining(4, 2, 2, 2)), (std::vector<int>{}));
}

}  // namespace
}  // namespace ringtrain::gpu::kernels
