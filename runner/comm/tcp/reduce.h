// The ring's arithmetic: dst += src (reduce-scatter) and dst = (dst + src)·scale (the last step
// of an averaging all-reduce), run on each received chunk while it is still in cache. Compiled
// for AVX-512, AVX2 and baseline x86-64 and picked once at run time from CPUID, so one binary
// uses the widest vectors of the CPU it runs on; no -march.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace ringtrain::comm {

struct ReduceKernels {
  std::string_view isa;  // "avx512f", "avx2" or "baseline"
  void (*sum)(float* __restrict dst, const float* __restrict src, std::size_t n);
  void (*sum_scale)(float* __restrict dst, const float* __restrict src, std::size_t n, float scale);
};

// The widest kernels this CPU runs (chosen once; RINGTRAIN_REDUCE_ISA=avx2|baseline narrows it
// for an A/B benchmark).
const ReduceKernels& BestReduceKernels();
// Every variant this CPU can run, widest first (tests compare each with the baseline).
std::vector<ReduceKernels> SupportedReduceKernels();

inline void ReduceSum(float* __restrict dst, const float* __restrict src, std::size_t n) {
  BestReduceKernels().sum(dst, src, n);
}
inline void ReduceSumScale(float* __restrict dst, const float* __restrict src, std::size_t n,
                           float scale) {
  BestReduceKernels().sum_scale(dst, src, n, scale);
}

}  // namespace ringtrain::comm
