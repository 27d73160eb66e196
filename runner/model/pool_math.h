// Pooling's per-element arithmetic, shared by layers.cc's Pool2d and the CUDA kernels
// (kernels.cu) so both compute it alike: one window's max (with its argmax) or average, which
// windows contain a given input row (or column), and the gradient one input element gathers from
// them (the kernel's gather, bit for bit layers.cc's scatter). Header-only, host and device;
// needs no CUDA to include.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace ringtrain::model {

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

// a + b and a·b rounded on their own (no FMA contraction): __fadd_rn/__fmul_rn on the device; the
// host build compiles with -ffp-contract=off, as layers.cc.
RINGTRAIN_HOST_DEVICE inline float RoundedAdd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
RINGTRAIN_HOST_DEVICE inline float RoundedMul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// One pool × pool window of one sample plane, whose top-left input is x[base] (rows w apart):
// max: the first maximum in row-major order wins and a NaN propagates (the first NaN stays),
// *argmax gets the winner's offset (base-relative offsets added to base); average: the sum in
// row-major order times inv (= 1/pool²).
RINGTRAIN_HOST_DEVICE inline float PoolWindow(const float* x, int base, int w, int pool, bool max,
                                              float inv, std::int32_t* argmax) {
  if (max) {
    int best = base;
    float m = x[base];
    for (int ki = 0; ki < pool; ++ki) {
      for (int kj = 0; kj < pool; ++kj) {
        const int at = base + ki * w + kj;
        const float v = x[at];
        if (v > m || v != v) {
          if (m != m) continue;  // the first NaN stays
          m = v;
          best = at;
        }
      }
    }
    *argmax = best;
    return m;
  }
  float sum = 0.0f;
  for (int ki = 0; ki < pool; ++ki) {
    for (int kj = 0; kj < pool; ++kj) sum = RoundedAdd(sum, x[base + ki * w + kj]);
  }
  return RoundedMul(sum, inv);
}

// The pooling gradient of input element j = (ch·h + ih)·w + iw of one sample (h × w planes,
// out_h × out_w outputs per channel): the sum, over the windows that contain it in increasing
// (oh, ow) order, of dy (max: only where argmax, the winner's offset within the sample, is j;
// average: dy·inv with inv = 1/pool²). dy and argmax point at the sample's outputs; argmax is
// not read for average pooling. That is the order in which layers.cc's Pool2d::Backward scatters
// into dx[j] from zero, so the result is its bit for bit; 0 for an element in no window.
RINGTRAIN_HOST_DEVICE inline float PoolInputGradient(const float* dy, const std::int32_t* argmax,
                                                     int j, int h, int w, int pool, int stride,
                                                     int out_h, int out_w, bool max, float inv) {
  const int iw = j % w;
  const int ih = (j / w) % h;
  const int ch = j / (h * w);
  const WindowRange rows = PoolWindowsContaining(ih, pool, stride, out_h);
  const WindowRange cols = PoolWindowsContaining(iw, pool, stride, out_w);
  const std::int64_t channel = static_cast<std::int64_t>(ch) * out_h * out_w;
  float sum = 0.0f;
  for (int oh = rows.first; oh <= rows.last; ++oh) {
    for (int ow = cols.first; ow <= cols.last; ++ow) {
      const std::int64_t o = channel + static_cast<std::int64_t>(oh) * out_w + ow;
      if (max) {
        if (argmax[o] == j) sum = RoundedAdd(sum, dy[o]);
      } else {
        sum = RoundedAdd(sum, RoundedMul(dy[o], inv));
      }
    }
  }
  return sum;
}

}  // namespace ringtrain::model
