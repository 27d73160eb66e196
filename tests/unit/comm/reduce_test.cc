// Every reduce variant this CPU runs gives exactly the baseline's floats, for every length
// around the vector widths and for unaligned buffers (the ring reduces chunks that start
// anywhere in the caller's array).
#include "runner/comm/tcp/reduce.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace ringtrain::comm {
namespace {

TEST(Reduce, EveryVariantMatchesTheScalarLoopAtEveryLengthAndAlignment) {
  const auto variants = SupportedReduceKernels();
  ASSERT_FALSE(variants.empty());
  EXPECT_EQ(variants.back().isa, "baseline");
  EXPECT_EQ(BestReduceKernels().isa, variants.front().isa);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-100.0f, 100.0f);
  for (const ReduceKernels& k : variants) {
    for (std::size_t n = 0; n <= 70; ++n) {
      for (std::size_t offset = 0; offset < 4; ++offset) {
        std::vector<float> src(n + offset + 1), dst(n + offset + 1);
        for (auto& v : src) v = value(rng);
        for (auto& v : dst) v = value(rng);
        std::vector<float> want_sum = dst, want_scaled = dst;
        for (std::size_t i = 0; i < n; ++i) {
          want_sum[offset + i] = dst[offset + i] + src[offset + i];
          want_scaled[offset + i] = (dst[offset + i] + src[offset + i]) * 0.25f;
        }
        std::vector<float> got = dst;
        k.sum(got.data() + offset, src.data() + offset, n);
        ASSERT_EQ(got, want_sum) << k.isa << " sum, n " << n << " offset " << offset;
        got = dst;
        k.sum_scale(got.data() + offset, src.data() + offset, n, 0.25f);
        ASSERT_EQ(got, want_scaled) << k.isa << " sum_scale, n " << n << " offset " << offset;
      }
    }
  }
}

}  // namespace
}  // namespace ringtrain::comm
