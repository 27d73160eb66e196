#include "runner/comm/tcp/reduce.h"

#include <cstdlib>

namespace ringtrain::comm {
namespace {

// One loop body, compiled once per instruction set; GCC vectorizes each at -O3 (rt_comm sets it
// for this file).
#define RINGTRAIN_REDUCE_VARIANT(suffix, attr)                                                  \
  attr void Sum##suffix(float* __restrict dst, const float* __restrict src, std::size_t n) {    \
    for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];                                       \
  }                                                                                             \
  attr void SumScale##suffix(float* __restrict dst, const float* __restrict src, std::size_t n, \
                             float scale) {                                                     \
    for (std::size_t i = 0; i < n; ++i) dst[i] = (dst[i] + src[i]) * scale;                     \
  }

RINGTRAIN_REDUCE_VARIANT(Baseline, )
#if defined(__x86_64__) && defined(__GNUC__)
#define RINGTRAIN_REDUCE_X86 1
RINGTRAIN_REDUCE_VARIANT(Avx2, __attribute__((target("avx2"))))
RINGTRAIN_REDUCE_VARIANT(Avx512, __attribute__((target("avx512f"))))
#endif

}  // namespace

std::vector<ReduceKernels> SupportedReduceKernels() {
  std::vector<ReduceKernels> out;
#ifdef RINGTRAIN_REDUCE_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) out.push_back({"avx512f", SumAvx512, SumScaleAvx512});
  if (__builtin_cpu_supports("avx2")) out.push_back({"avx2", SumAvx2, SumScaleAvx2});
#endif
  out.push_back({"baseline", SumBaseline, SumScaleBaseline});
  return out;
}

const ReduceKernels& BestReduceKernels() {
  // RINGTRAIN_REDUCE_ISA (benchmarks: A/B of the variants) picks a narrower one by name.
  static const ReduceKernels best = [] {
    const auto all = SupportedReduceKernels();
    if (const char* want = std::getenv("RINGTRAIN_REDUCE_ISA")) {
      for (const auto& k : all) {
        if (k.isa == want) return k;
      }
    }
    return all.front();
  }();
  return best;
}

}  // namespace ringtrain::comm
