// Which pooling windows contain a given input row (or column): the index arithmetic of
// Pool2dBackward's gather (kernels.cu), kept apart so a host test checks it against brute force.
// Header-only, host and device; needs no CUDA to include.
#pragma once

#if defined(__CUDACC__)
#define RINGTRAIN_HOST_DEVICE __host__ __device__
#else
#define RINGTRAIN_HOST_DEVICE
#endif

namespace ringtrain::gpu::kernels {

// The windows first..last (inclusive; empty when first > last) along one axis.
struct WindowRange {
  int first;
  int last;
};

// Window o (0 ≤ o < out_count) covers inputs o·stride .. o·stride + pool − 1 (floor mode:
// out_count = (in − pool) / stride + 1). Input i ≥ 0 lies in window o exactly when
// (i − pool + 1) / stride ≤ o ≤ i / stride, so first = max(0, ⌈(i − pool + 1) / stride⌉) and
// last = min(out_count − 1, ⌊i / stride⌋). C++ division truncates toward zero, so the ceiling
// is only taken of a positive numerator (a numerator ≤ 0 has a ceiling ≤ 0, clamped to 0).
RINGTRAIN_HOST_DEVICE inline WindowRange PoolWindowsContaining(int i, int pool, int stride,
                                                               int out_count) {
  const int numerator = i - pool + 1;
  const int first = numerator > 0 ? (numerator + stride - 1) / stride : 0;
  const int below = i / stride;
  const int last = below < out_count - 1 ? below : out_count - 1;
  return WindowRange{first, last};
}

}  // namespace ringtrain::gpu::kernels

#undef RINGTRAIN_HOST_DEVICE
