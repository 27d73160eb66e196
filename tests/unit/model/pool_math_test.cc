// Pooling's shared per-element arithmetic (model/pool_math.h), on the host: PoolWindowsContaining
// against brute force (which windows of Pool2d's floor-mode layout contain each input row), and
// PoolInputGradient against layers.cc's Pool2d::Backward scatter, bit for bit.
#include "runner/model/pool_math.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "runner/model/layers.h"

namespace ringtrain::model {
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

// layers.cc's max scan (first maximum in row-major window order wins), giving the argmax the
// CUDA forward writes; Pool2d keeps its own private, and the outputs are compared below.
std::vector<std::int32_t> ArgMax(const std::vector<float>& x, int n, int c, int h, int w, int pool,
                                 int stride, int out_h, int out_w) {
  std::vector<std::int32_t> argmax;
  for (int i = 0; i < n; ++i) {
    const float* xs = x.data() + static_cast<std::size_t>(i) * c * h * w;
    for (int ch = 0; ch < c; ++ch) {
      for (int oh = 0; oh < out_h; ++oh) {
        for (int ow = 0; ow < out_w; ++ow) {
          const int base = (ch * h + oh * stride) * w + ow * stride;
          int best = base;
          for (int ki = 0; ki < pool; ++ki) {
            for (int kj = 0; kj < pool; ++kj) {
              const int at = base + ki * w + kj;
              if (xs[at] > xs[best]) best = at;
            }
          }
          argmax.push_back(best);
        }
      }
    }
  }
  return argmax;
}

TEST(PoolWindowsTest, InputGradientIsPool2dBackwardBitForBit) {
  struct Case {
    int h, w, pool, stride;
  };
  // Overlapping windows (stride < pool), gaps (stride > pool), dropped edges, one window.
  const Case cases[] = {{7, 6, 3, 2}, {8, 9, 2, 3}, {6, 6, 3, 1}, {5, 5, 2, 2},
                        {4, 7, 4, 1}, {9, 8, 5, 2}, {3, 3, 3, 5}, {10, 11, 1, 4}};
  const int n = 2;
  const int c = 3;
  std::mt19937 rng(21);
  for (const Case& k : cases) {
    for (const bool max : {true, false}) {
      const int out_h = (k.h - k.pool) / k.stride + 1;
      const int out_w = (k.w - k.pool) / k.stride + 1;
      const Shape in{c, k.h, k.w};
      const Shape out{c, out_h, out_w};
      Pool2d layer(in, out, k.pool, k.stride, max, n);
      // Few distinct inputs, so windows tie and the first-maximum rule matters; gradients of
      // mixed magnitude, so the summation order shows in the rounding.
      std::uniform_int_distribution<int> level(0, 3);
      std::uniform_real_distribution<float> grad(-1.0f, 1.0f);
      std::vector<float> x(in.size() * n);
      for (float& v : x) v = static_cast<float>(level(rng));
      std::vector<float> dy(out.size() * n);
      for (float& v : dy) v = grad(rng) * (level(rng) == 0 ? 1e4f : 1.0f);
      std::vector<float> y(out.size() * n);
      std::vector<float> expected(in.size() * n, -1.0f);
      layer.Forward(x.data(), y.data(), n);
      layer.Backward(x.data(), dy.data(), expected.data(), n);

      const std::vector<std::int32_t> argmax =
          max ? ArgMax(x, n, c, k.h, k.w, k.pool, k.stride, out_h, out_w)
              : std::vector<std::int32_t>{};
      if (max) {
        for (std::size_t o = 0; o < y.size(); ++o) {
          const std::size_t sample = o / out.size();
          ASSERT_EQ(y[o], x[sample * in.size() + argmax[o]]) << "output " << o;
        }
      }
      const float inv = 1.0f / static_cast<float>(k.pool * k.pool);
      int nonzero = 0;
      for (int i = 0; i < n; ++i) {
        const float* dys = dy.data() + out.size() * i;
        const std::int32_t* arg = max ? argmax.data() + out.size() * i : nullptr;
        for (int j = 0; j < static_cast<int>(in.size()); ++j) {
          const float got =
              PoolInputGradient(dys, arg, j, k.h, k.w, k.pool, k.stride, out_h, out_w, max, inv);
          const float want = expected[in.size() * i + j];
          // Bit for bit: EXPECT_EQ on floats compares exactly.
          EXPECT_EQ(got, want) << "h=" << k.h << " w=" << k.w << " pool=" << k.pool
                               << " stride=" << k.stride << (max ? " max" : " avg")
                               << " sample=" << i << " element=" << j;
          nonzero += want != 0.0f ? 1 : 0;
        }
      }
      EXPECT_GT(nonzero, 0);
    }
  }
}

}  // namespace
}  // namespace ringtrain::model
