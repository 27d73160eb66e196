#include "runner/comm/tcp/reduce_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RINGTRAIN_X86 1
#endif

namespace ringtrain::comm {
namespace {

// (d + s) * scale, never contracted differently from the vector paths: the scalar tails of
// every ISA and the reference in the tests must give bit-identical results.
void SumScalar(float* __restrict dst, const float* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void SumScaleScalar(float* __restrict dst, const float* __restrict src, std::size_t n,
                    float scale) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = (dst[i] + src[i]) * scale;
}

#ifdef RINGTRAIN_X86
// Unaligned loads and stores throughout: dst points into the caller's tensor at any float
// offset, and on these ISAs unaligned access to aligned data costs nothing extra.
void SumSse(float* __restrict dst, const float* __restrict src, std::size_t n) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    _mm_storeu_ps(dst + i, _mm_add_ps(_mm_loadu_ps(dst + i), _mm_loadu_ps(src + i)));
  }
  SumScalar(dst + i, src + i, n - i);
}

void SumScaleSse(float* __restrict dst, const float* __restrict src, std::size_t n, float scale) {
  const __m128 s = _mm_set1_ps(scale);
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_add_ps(_mm_loadu_ps(dst + i), _mm_loadu_ps(src + i));
    _mm_storeu_ps(dst + i, _mm_mul_ps(v, s));
  }
  SumScaleScalar(dst + i, src + i, n - i, scale);
}

__attribute__((target("avx2"))) void SumAvx2(float* __restrict dst, const float* __restrict src,
                                             std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i));
    __m256 b = _mm256_add_ps(_mm256_loadu_ps(dst + i + 8), _mm256_loadu_ps(src + i + 8));
    _mm256_storeu_ps(dst + i, a);
    _mm256_storeu_ps(dst + i + 8, b);
  }
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i)));
  }
  SumScalar(dst + i, src + i, n - i);
}

__attribute__((target("avx2"))) void SumScaleAvx2(float* __restrict dst,
                                                  const float* __restrict src, std::size_t n,
                                                  float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(v, s));
  }
  SumScaleScalar(dst + i, src + i, n - i, scale);
}

// The tail is one masked operation rather than a scalar loop.
__attribute__((target("avx512f"))) void SumAvx512(float* __restrict dst,
                                                  const float* __restrict src, std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 a = _mm512_add_ps(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(src + i));
    __m512 b = _mm512_add_ps(_mm512_loadu_ps(dst + i + 16), _mm512_loadu_ps(src + i + 16));
    _mm512_storeu_ps(dst + i, a);
    _mm512_storeu_ps(dst + i + 16, b);
  }
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(src + i)));
  }
  if (i < n) {
    auto m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + i), _mm512_maskz_loadu_ps(m, src + i));
    _mm512_mask_storeu_ps(dst + i, m, v);
  }
}

__attribute__((target("avx512f"))) void SumScaleAvx512(float* __restrict dst,
                                                       const float* __restrict src, std::size_t n,
                                                       float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_add_ps(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(src + i));
    _mm512_storeu_ps(dst + i, _mm512_mul_ps(v, s));
  }
  if (i < n) {
    auto m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + i), _mm512_maskz_loadu_ps(m, src + i));
    _mm512_mask_storeu_ps(dst + i, m, _mm512_mul_ps(v, s));
  }
}
#endif

}  // namespace

const char* ReduceIsaName(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kScalar:
      return "scalar";
    case ReduceIsa::kSse:
      return "sse";
    case ReduceIsa::kAvx2:
      return "avx2";
    case ReduceIsa::kAvx512:
      return "avx512f";
  }
  return "unknown";
}

bool CpuSupports(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kScalar:
      return true;
#ifdef RINGTRAIN_X86
    case ReduceIsa::kSse:
      return __builtin_cpu_supports("sse");
    case ReduceIsa::kAvx2:
      return __builtin_cpu_supports("avx2");
    case ReduceIsa::kAvx512:
      return __builtin_cpu_supports("avx512f");
#else
    default:
      return false;
#endif
  }
  return false;
}

std::vector<ReduceIsa> SupportedReduceIsas() {
  std::vector<ReduceIsa> out;
  for (ReduceIsa isa :
       {ReduceIsa::kScalar, ReduceIsa::kSse, ReduceIsa::kAvx2, ReduceIsa::kAvx512}) {
    if (CpuSupports(isa)) out.push_back(isa);
  }
  return out;
}

ReduceKernels ReduceKernelsFor(ReduceIsa isa) {
  switch (isa) {
#ifdef RINGTRAIN_X86
    case ReduceIsa::kSse:
      return {isa, SumSse, SumScaleSse};
    case ReduceIsa::kAvx2:
      return {isa, SumAvx2, SumScaleAvx2};
    case ReduceIsa::kAvx512:
      return {isa, SumAvx512, SumScaleAvx512};
#endif
    default:
      return {ReduceIsa::kScalar, SumScalar, SumScaleScalar};
  }
}

const ReduceKernels& BestReduceKernels() {
  static const ReduceKernels best = ReduceKernelsFor(SupportedReduceIsas().back());
  return best;
}

}  // namespace ringtrain::comm
