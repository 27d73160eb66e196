// The dispatched reduce kernels against a scalar reference, on every ISA this CPU supports,
// for every length around the vector widths and every misalignment of both pointers.
#include "runner/comm/tcp/reduce_kernels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace ringtrain::comm {
namespace {

constexpr std::size_t kMaxLen = 70;     // past two AVX-512 blocks plus a tail
constexpr std::size_t kMaxOffset = 16;  // floats: every misalignment within a 64-byte line
constexpr float kScale = 1.0f / 3.0f;
constexpr float kCanary = -12345.0f;

std::vector<float> Random(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

class ReduceKernelsTest : public ::testing::TestWithParam<ReduceIsa> {};

TEST_P(ReduceKernelsTest, MatchScalarReferenceForEveryLengthAndAlignment) {
  const ReduceKernels k = ReduceKernelsFor(GetParam());
  ASSERT_EQ(k.isa, GetParam());
  const std::size_t total = kMaxLen + kMaxOffset + 8;
  const std::vector<float> src_data = Random(total, 1);
  const std::vector<float> dst_data = Random(total, 2);
  for (int scaled = 0; scaled < 2; ++scaled) {
    for (std::size_t n = 0; n <= kMaxLen; ++n) {
      for (std::size_t doff = 0; doff < kMaxOffset; doff += 3) {
        for (std::size_t soff = 0; soff < kMaxOffset; soff += 5) {
          // Canaries around dst: a masked or unrolled tail must not write past n.
          std::vector<float> dst(total, kCanary), want(total, kCanary);
          std::memcpy(dst.data() + doff, dst_data.data(), n * sizeof(float));
          std::memcpy(want.data() + doff, dst_data.data(), n * sizeof(float));
          const float* src = src_data.data() + soff;
          for (std::size_t i = 0; i < n; ++i) {
            float d = want[doff + i] + src[i];
            want[doff + i] = scaled ? d * kScale : d;
          }
          if (scaled) {
            k.sum_scale(dst.data() + doff, src, n, kScale);
          } else {
            k.sum(dst.data() + doff, src, n);
          }
          for (std::size_t i = 0; i < total; ++i) {
            ASSERT_EQ(dst[i], want[i])
                << ReduceIsaName(k.isa) << (scaled ? " sum_scale" : " sum") << " n=" << n
                << " dst offset " << doff << " src offset " << soff << " index " << i;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SupportedIsas, ReduceKernelsTest,
                         ::testing::ValuesIn(SupportedReduceIsas()),
                         [](const auto& info) { return std::string(ReduceIsaName(info.param)); });

TEST(ReduceKernelsDispatchTest, BestIsTheWidestSupported) {
  EXPECT_EQ(BestReduceKernels().isa, SupportedReduceIsas().back());
}

}  // namespace
}  // namespace ringtrain::comm
