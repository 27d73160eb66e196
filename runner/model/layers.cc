#include "runner/model/layers.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runner/model/clones.h"
#include "runner/model/dropout_mask.h"
#include "runner/model/gemm.h"
#include "runner/model/pool_math.h"

namespace ringtrain::model {
namespace {

// Built from raw engine bits rather than std::uniform_real_distribution, whose output the
// standard leaves to the library: the same seed must give the same weights on every build.
void FillUniform(std::mt19937_64& rng, float bound, float* out, std::size_t count) {
  constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
  for (std::size_t i = 0; i < count; ++i) {
    const double u = static_cast<double>(rng() >> 11) * kTwoToMinus53;  // [0, 1)
    out[i] = static_cast<float>((2.0 * u - 1.0) * bound);
  }
}

// torch's default: kaiming_uniform_(a=√5) on weights gives bound 1/√fan_in, and the bias uses
// the same bound.
void InitLikeTorch(std::mt19937_64& rng, std::size_t fan_in, float* w, std::size_t w_count,
                   float* b, std::size_t b_count) {
  const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
  FillUniform(rng, bound, w, w_count);
  FillUniform(rng, bound, b, b_count);
}

// Keras' defaults: Glorot (Xavier) uniform weights, bound √(6 / (fan_in + fan_out)); zero biases.
void InitGlorot(std::mt19937_64& rng, std::size_t fan_in, std::size_t fan_out, float* w,
                std::size_t w_count, float* b, std::size_t b_count) {
  const float bound = static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
  FillUniform(rng, bound, w, w_count);
  std::fill(b, b + b_count, 0.0f);
}

// The elementwise kernels are target clones (clones.h); their loads are unconditional so that
// the selects vectorize.
RINGTRAIN_TARGET_CLONES void ReluForwardKernel(const float* x, float* y, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

RINGTRAIN_TARGET_CLONES void ReluBackwardKernel(const float* x, const float* dy, float* dx,
                                                std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const float g = dy[i];
    dx[i] = x[i] > 0.0f ? g : 0.0f;
  }
}

// One output row of a 2x2/2 max pool over input rows `row` and `row + w` of plane x. First
// maximum wins and NaN propagates, as in torch's CPU kernel; selects, not branches, since the
// winner is unpredictable on real activations.
RINGTRAIN_TARGET_CLONES void MaxPoolRowKernel(const float* x, int row, int w, int out_w, float* y,
                                              std::int32_t* arg) {
  const float* top = x + row;
  const float* bottom = top + w;
  for (int ow = 0; ow < out_w; ++ow) {
    const int at = row + 2 * ow;
    const float a = top[2 * ow];
    const float b = top[2 * ow + 1];
    const float c = bottom[2 * ow];
    const float d = bottom[2 * ow + 1];
    int best = at;
    float max = a;
    bool take = (b > max) | (b != b);
    best = take ? at + 1 : best;
    max = take ? b : max;
    take = (c > max) | (c != c);
    best = take ? at + w : best;
    max = take ? c : max;
    take = (d > max) | (d != d);
    best = take ? at + w + 1 : best;
    max = take ? d : max;
    y[ow] = max;
    arg[ow] = best;
  }
}

#if defined(__x86_64__)
// MaxPoolRowKernel in AVX-512, 16 windows per step: the CNN's rows are 14 and 7 windows wide,
// too short for the compiler's vector loop, whose scalar remainder then branches on every
// compare. Masked loads and stores cover the tail; even and odd columns are split with one
// permute each. Same comparisons in the same order as the scalar kernel.
__attribute__((target("avx512f"))) void MaxPoolRowAvx512(const float* x, int row, int w, int out_w,
                                                         float* y, std::int32_t* arg) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i lane2 =
      _mm512_slli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 1);
  const float* top = x + row;
  const float* bottom = top + w;
  for (int ow = 0; ow < out_w; ow += 16) {
    const int left = out_w - ow < 16 ? out_w - ow : 16;
    const __mmask16 out_mask = static_cast<__mmask16>((1u << left) - 1u);
    const int in_lo = 2 * left < 16 ? 2 * left : 16;
    const int in_hi = 2 * left - in_lo;
    const __mmask16 lo_mask = static_cast<__mmask16>((1u << in_lo) - 1u);
    const __mmask16 hi_mask = static_cast<__mmask16>((1u << in_hi) - 1u);
    const __m512 t0 = _mm512_maskz_loadu_ps(lo_mask, top + 2 * ow);
    const __m512 t1 = _mm512_maskz_loadu_ps(hi_mask, top + 2 * ow + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo_mask, bottom + 2 * ow);
    const __m512 b1 = _mm512_maskz_loadu_ps(hi_mask, bottom + 2 * ow + 16);
    const __m512 a = _mm512_permutex2var_ps(t0, even, t1);
    const __m512 b = _mm512_permutex2var_ps(t0, odd, t1);
    const __m512 c = _mm512_permutex2var_ps(b0, even, b1);
    const __m512 d = _mm512_permutex2var_ps(b0, odd, b1);
    const __m512i at = _mm512_add_epi32(_mm512_set1_epi32(row + 2 * ow), lane2);
    __m512 max = a;
    __m512i best = at;
    __mmask16 take =
        _mm512_cmp_ps_mask(b, max, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
    max = _mm512_mask_blend_ps(take, max, b);
    best = _mm512_mask_blend_epi32(take, best, _mm512_add_epi32(at, _mm512_set1_epi32(1)));
    take = _mm512_cmp_ps_mask(c, max, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
    max = _mm512_mask_blend_ps(take, max, c);
    best = _mm512_mask_blend_epi32(take, best, _mm512_add_epi32(at, _mm512_set1_epi32(w)));
    take = _mm512_cmp_ps_mask(d, max, _CMP_GT_OQ) | _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q);
    max = _mm512_mask_blend_ps(take, max, d);
    best = _mm512_mask_blend_epi32(take, best, _mm512_add_epi32(at, _mm512_set1_epi32(w + 1)));
    _mm512_mask_storeu_ps(y + ow, out_mask, max);
    _mm512_mask_storeu_epi32(arg + ow, out_mask, best);
  }
}

using MaxPoolRowFn = void (*)(const float*, int, int, int, float*, std::int32_t*);
const MaxPoolRowFn kMaxPoolRow =
    __builtin_cpu_supports("avx512f") ? MaxPoolRowAvx512 : MaxPoolRowKernel;
#else
constexpr auto kMaxPoolRow = MaxPoolRowKernel;
#endif

}  // namespace

std::vector<ParamRange> Layer::GradSlices(std::size_t /*max_slice*/) const {
  if (num_params() == 0) return {};
  return {ParamRange{0, num_params()}};
}

void Layer::BackwardSliced(const float* x, const float* dy, float* dx, int n,
                           std::size_t /*max_slice*/, const SliceReadyFn& ready) {
  Backward(x, dy, dx, n);
  if (num_params() > 0 && ready) ready(ParamRange{0, num_params()});
}

Linear::Linear(int in_features, int out_features, Initializer init)
    : Layer(Shape{in_features, 1, 1}, Shape{out_features, 1, 1}),
      in_(in_features),
      out_(out_features),
      init_(init) {}

std::size_t Linear::num_params() const { return static_cast<std::size_t>(out_) * (in_ + 1); }

void Linear::Bind(float* params, float* grads) {
  const std::size_t w_count = static_cast<std::size_t>(out_) * in_;
  w_ = params;
  b_ = params + w_count;
  dw_ = grads;
  db_ = grads + w_count;
}

void Linear::Init(std::mt19937_64& rng) {
  if (init_ == Initializer::kGlorot) {
    InitGlorot(rng, in_, out_, w_, static_cast<std::size_t>(out_) * in_, b_, out_);
    return;
  }
  InitLikeTorch(rng, in_, w_, static_cast<std::size_t>(out_) * in_, b_, out_);
}

void Linear::Forward(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) std::copy(b_, b_ + out_, y + static_cast<std::size_t>(i) * out_);
  Sgemm(Transpose::kNo, Transpose::kYes, n, out_, in_, 1.0f, x, in_, w_, in_, 1.0f, y, out_);
}

int Linear::RowsPerSlice(int in_features, int out_features, std::size_t max_slice) {
  const std::size_t weights = static_cast<std::size_t>(out_features) * in_features;
  if (max_slice == 0 || weights <= max_slice) return out_features;
  const std::size_t slices = (weights + max_slice - 1) / max_slice;
  return static_cast<int>((static_cast<std::size_t>(out_features) + slices - 1) / slices);
}

std::size_t Linear::SliceCount(int in_features, int out_features, std::size_t max_slice) {
  if (out_features <= 0) return 0;
  const auto rows = static_cast<std::size_t>(RowsPerSlice(in_features, out_features, max_slice));
  return (static_cast<std::size_t>(out_features) + rows - 1) / rows;
}

std::vector<ParamRange> Linear::GradSlices(std::size_t max_slice) const {
  const int rows = RowsPerSlice(in_, out_, max_slice);
  std::vector<ParamRange> slices;
  for (int r = 0; r < out_; r += rows) {
    const int end = std::min(out_, r + rows);
    std::size_t count = static_cast<std::size_t>(end - r) * in_;
    if (end == out_) count += static_cast<std::size_t>(out_);  // the bias rides with the last rows
    slices.push_back({static_cast<std::size_t>(r) * in_, count});
  }
  return slices;
}

void Linear::Backward(const float* x, const float* dy, float* dx, int n) {
  BackwardSliced(x, dy, dx, n, 0, nullptr);
}

void Linear::BackwardSliced(const float* x, const float* dy, float* dx, int n,
                            std::size_t max_slice, const SliceReadyFn& ready) {
  std::fill(db_, db_ + out_, 0.0f);
  for (int i = 0; i < n; ++i) {
    const float* row = dy + static_cast<std::size_t>(i) * out_;
    for (int o = 0; o < out_; ++o) db_[o] += row[o];
  }
  // dW[r0:r1, :] = dy[:, r0:r1]ᵀ · x, one row block at a time from the last, each reported as
  // soon as it is written so its all-reduce overlaps the blocks still to come.
  const int rows = RowsPerSlice(in_, out_, max_slice);
  const int last_begin = ((out_ - 1) / rows) * rows;
  for (int r0 = last_begin; r0 >= 0; r0 -= rows) {
    const int r1 = std::min(out_, r0 + rows);
    Sgemm(Transpose::kYes, Transpose::kNo, r1 - r0, in_, n, 1.0f, dy + r0, out_, x, in_, 0.0f,
          dw_ + static_cast<std::size_t>(r0) * in_, in_);
    if (ready) {
      std::size_t count = static_cast<std::size_t>(r1 - r0) * in_;
      if (r1 == out_) count += static_cast<std::size_t>(out_);
      ready(ParamRange{static_cast<std::size_t>(r0) * in_, count});
    }
  }
  if (dx != nullptr) {
    Sgemm(Transpose::kNo, Transpose::kNo, n, in_, out_, 1.0f, dy, out_, w_, in_, 0.0f, dx, in_);
  }
}

void ReLU::Forward(const float* x, float* y, int n) {
  ReluForwardKernel(x, y, in_shape().size() * n);
}

void ReLU::Backward(const float* x, const float* dy, float* dx, int n) {
  if (dx == nullptr) return;
  ReluBackwardKernel(x, dy, dx, in_shape().size() * n);
}

Conv2d::Conv2d(Shape in, int out_channels, int kernel, int padding, Initializer init)
    : Conv2d(in, OutShape(in, out_channels, kernel, padding), kernel, 1, padding, padding, init) {}

Conv2d::Conv2d(Shape in, Shape out, int kernel, int stride, int pad_top, int pad_left,
               Initializer init)
    : Layer(in, out),
      kernel_(kernel),
      stride_(stride),
      pad_top_(pad_top),
      padding_(pad_left),
      patch_(in.c * kernel * kernel),
      init_(init),
      col_(ColumnFloats(in, out, kernel)) {}

std::size_t Conv2d::ColumnFloats(Shape in, Shape out, int kernel) {
  return static_cast<std::size_t>(in.c) * kernel * kernel * out.h * out.w;
}

std::size_t Conv2d::num_params() const {
  return static_cast<std::size_t>(out_shape().c) * (patch_ + 1);
}

void Conv2d::Bind(float* params, float* grads) {
  const std::size_t w_count = static_cast<std::size_t>(out_shape().c) * patch_;
  w_ = params;
  b_ = params + w_count;
  dw_ = grads;
  db_ = grads + w_count;
}

void Conv2d::Init(std::mt19937_64& rng) {
  if (init_ == Initializer::kGlorot) {
    const std::size_t window = static_cast<std::size_t>(kernel_) * kernel_;
    InitGlorot(rng, patch_, window * out_shape().c, w_,
               static_cast<std::size_t>(out_shape().c) * patch_, b_, out_shape().c);
    return;
  }
  InitLikeTorch(rng, patch_, w_, static_cast<std::size_t>(out_shape().c) * patch_, b_,
                out_shape().c);
}

// col[(c·k + ki)·k + kj][oh·OW + ow] = x[c][oh + ki − p][ow + kj − p], zero outside the image.
// Each row splits into a zero prefix, one contiguous copy and a zero suffix.
void Conv2d::Im2Col(const float* x) {
  const Shape& in = in_shape();
  const int oh_count = out_shape().h;
  const int ow_count = out_shape().w;
  float* dst = col_.data();
  if (stride_ != 1) {
    for (int c = 0; c < in.c; ++c) {
      const float* plane = x + static_cast<std::size_t>(c) * in.h * in.w;
      for (int ki = 0; ki < kernel_; ++ki) {
        for (int kj = 0; kj < kernel_; ++kj) {
          for (int oh = 0; oh < oh_count; ++oh, dst += ow_count) {
            const int ih = oh * stride_ + ki - pad_top_;
            for (int ow = 0; ow < ow_count; ++ow) {
              const int iw = ow * stride_ + kj - padding_;
              const bool inside = ih >= 0 && ih < in.h && iw >= 0 && iw < in.w;
              dst[ow] = inside ? plane[ih * in.w + iw] : 0.0f;
            }
          }
        }
      }
    }
    return;
  }
  for (int c = 0; c < in.c; ++c) {
    const float* plane = x + static_cast<std::size_t>(c) * in.h * in.w;
    for (int ki = 0; ki < kernel_; ++ki) {
      for (int kj = 0; kj < kernel_; ++kj) {
        const int shift = kj - padding_;
        const int ow_begin = std::clamp(-shift, 0, ow_count);
        const int ow_end = std::clamp(in.w - shift, ow_begin, ow_count);
        for (int oh = 0; oh < oh_count; ++oh, dst += ow_count) {
          const int ih = oh + ki - pad_top_;
          if (ih < 0 || ih >= in.h) {
            std::fill(dst, dst + ow_count, 0.0f);
            continue;
          }
          std::fill(dst, dst + ow_begin, 0.0f);
          std::copy(plane + ih * in.w + ow_begin + shift, plane + ih * in.w + ow_end + shift,
                    dst + ow_begin);
          std::fill(dst + ow_end, dst + ow_count, 0.0f);
        }
      }
    }
  }
}

// The adjoint of Im2Col: every column entry adds back into the pixel it was copied from.
void Conv2d::Col2Im(float* dx) const {
  const Shape& in = in_shape();
  const int oh_count = out_shape().h;
  const int ow_count = out_shape().w;
  std::fill(dx, dx + in.size(), 0.0f);
  const float* src = col_.data();
  if (stride_ != 1) {
    for (int c = 0; c < in.c; ++c) {
      float* plane = dx + static_cast<std::size_t>(c) * in.h * in.w;
      for (int ki = 0; ki < kernel_; ++ki) {
        for (int kj = 0; kj < kernel_; ++kj) {
          for (int oh = 0; oh < oh_count; ++oh, src += ow_count) {
            const int ih = oh * stride_ + ki - pad_top_;
            if (ih < 0 || ih >= in.h) continue;
            for (int ow = 0; ow < ow_count; ++ow) {
              const int iw = ow * stride_ + kj - padding_;
              if (iw >= 0 && iw < in.w) plane[ih * in.w + iw] += src[ow];
            }
          }
        }
      }
    }
    return;
  }
  for (int c = 0; c < in.c; ++c) {
    float* plane = dx + static_cast<std::size_t>(c) * in.h * in.w;
    for (int ki = 0; ki < kernel_; ++ki) {
      for (int kj = 0; kj < kernel_; ++kj) {
        const int shift = kj - padding_;
        const int ow_begin = std::clamp(-shift, 0, ow_count);
        const int ow_end = std::clamp(in.w - shift, ow_begin, ow_count);
        for (int oh = 0; oh < oh_count; ++oh, src += ow_count) {
          const int ih = oh + ki - pad_top_;
          if (ih < 0 || ih >= in.h) continue;
          float* row = plane + ih * in.w;
          for (int ow = ow_begin; ow < ow_end; ++ow) row[ow + shift] += src[ow];
        }
      }
    }
  }
}

void Conv2d::ForwardSample(const float* x, float* y) {
  const int out_c = out_shape().c;
  const int pixels = out_shape().h * out_shape().w;
  Im2Col(x);
  for (int o = 0; o < out_c; ++o) std::fill(y + o * pixels, y + (o + 1) * pixels, b_[o]);
  Sgemm(Transpose::kNo, Transpose::kNo, out_c, pixels, patch_, 1.0f, w_, patch_, col_.data(),
        pixels, 1.0f, y, pixels);
}

void Conv2d::Forward(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) ForwardSample(x + in_shape().size() * i, y + out_shape().size() * i);
}

void Conv2d::BackwardSample(const float* x, const float* dy, float* dx, bool first) {
  const int out_c = out_shape().c;
  const int pixels = out_shape().h * out_shape().w;
  if (first) std::fill(db_, db_ + out_c, 0.0f);
  Im2Col(x);
  Sgemm(Transpose::kNo, Transpose::kYes, out_c, patch_, pixels, 1.0f, dy, pixels, col_.data(),
        pixels, first ? 0.0f : 1.0f, dw_, patch_);
  for (int o = 0; o < out_c; ++o) {
    float sum = 0.0f;
    for (int p = 0; p < pixels; ++p) sum += dy[o * pixels + p];
    db_[o] += sum;
  }
  if (dx == nullptr) return;
  // The columns are no longer needed once dW has them, so their gradient reuses the buffer.
  Sgemm(Transpose::kYes, Transpose::kNo, patch_, pixels, out_c, 1.0f, w_, patch_, dy, pixels, 0.0f,
        col_.data(), pixels);
  Col2Im(dx);
}

void Conv2d::Backward(const float* x, const float* dy, float* dx, int n) {
  for (int i = 0; i < n; ++i) {
    BackwardSample(x + in_shape().size() * i, dy + out_shape().size() * i,
                   dx == nullptr ? nullptr : dx + in_shape().size() * i, i == 0);
  }
}

MaxPool2d::MaxPool2d(Shape in, int max_batch)
    : Layer(in, OutShape(in)), argmax_(ArgmaxSize(in, max_batch)) {}

void MaxPool2d::ForwardSample(int i, const float* x, float* y) {
  const Shape& in = in_shape();
  const Shape& out = out_shape();
  std::int32_t* arg = argmax_.data() + out.size() * i;
  for (int c = 0; c < in.c; ++c) {
    for (int oh = 0; oh < out.h; ++oh, y += out.w, arg += out.w) {
      kMaxPoolRow(x, (c * in.h + 2 * oh) * in.w, in.w, out.w, y, arg);
    }
  }
}

void MaxPool2d::Forward(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i)
    ForwardSample(i, x + in_shape().size() * i, y + out_shape().size() * i);
}

// Windows do not overlap, so each input pixel receives at most one output's gradient.
void MaxPool2d::BackwardSample(int i, const float* dy, float* dx) const {
  const std::size_t out_size = out_shape().size();
  std::fill(dx, dx + in_shape().size(), 0.0f);
  const std::int32_t* arg = argmax_.data() + out_size * i;
  for (std::size_t j = 0; j < out_size; ++j) dx[arg[j]] = dy[j];
}

void MaxPool2d::Backward(const float* /*x*/, const float* dy, float* dx, int n) {
  if (dx == nullptr) return;
  for (int i = 0; i < n; ++i) {
    BackwardSample(i, dy + out_shape().size() * i, dx + in_shape().size() * i);
  }
}

ConvReluPool::ConvReluPool(Shape in, int out_channels, int kernel, int padding, int max_batch,
                           Initializer init)
    : Layer(in, MaxPool2d::OutShape(Conv2d::OutShape(in, out_channels, kernel, padding))),
      conv_(in, out_channels, kernel, padding, init),
      pool_(conv_.out_shape(), max_batch),
      relu_out_(conv_.out_shape().size() * static_cast<std::size_t>(max_batch)),
      grad_(conv_.out_shape().size()) {}

std::size_t ConvReluPool::BufferBytes(Shape in, int out_channels, int kernel, int padding,
                                      int max_batch) {
  const Shape conv = Conv2d::OutShape(in, out_channels, kernel, padding);
  // The convolution's columns and the pool's argmax, then relu_out_ and grad_.
  return Conv2d::BufferBytes(in, conv, kernel) + MaxPool2d::BufferBytes(conv, max_batch) +
         conv.size() * (static_cast<std::size_t>(max_batch) + 1) * sizeof(float);
}

std::size_t ConvReluPool::buffer_bytes() const {
  return conv_.buffer_bytes() + pool_.buffer_bytes() +
         (relu_out_.size() + grad_.size()) * sizeof(float);
}

void ConvReluPool::Forward(const float* x, float* y, int n) {
  const std::size_t mid = conv_.out_shape().size();
  for (int i = 0; i < n; ++i) {
    float* act = relu_out_.data() + mid * i;
    conv_.ForwardSample(x + in_shape().size() * i, act);
    ReluForwardKernel(act, act, mid);
    pool_.ForwardSample(i, act, y + out_shape().size() * i);
  }
}

// The ReLU's gradient gate reads its output: y > 0 exactly where its input x > 0 (a NaN input
// gives 0, closed either way).
void ConvReluPool::Backward(const float* x, const float* dy, float* dx, int n) {
  const std::size_t mid = conv_.out_shape().size();
  for (int i = 0; i < n; ++i) {
    pool_.BackwardSample(i, dy + out_shape().size() * i, grad_.data());
    ReluBackwardKernel(relu_out_.data() + mid * i, grad_.data(), grad_.data(), mid);
    conv_.BackwardSample(x + in_shape().size() * i, grad_.data(),
                         dx == nullptr ? nullptr : dx + in_shape().size() * i, i == 0);
  }
}

Pool2d::Pool2d(Shape in, Shape out, int pool, int stride, bool max, int max_batch)
    : Layer(in, out),
      pool_(pool),
      stride_(stride),
      max_(max),
      argmax_(ArgmaxSize(out, max, max_batch)) {}

void Pool2d::Forward(const float* x, float* y, int n) {
  const Shape& in = in_shape();
  const Shape& out = out_shape();
  const float inv = 1.0f / static_cast<float>(pool_ * pool_);
  for (int i = 0; i < n; ++i) {
    const float* xs = x + in.size() * i;
    float* ys = y + out.size() * i;
    std::int32_t* arg = max_ ? argmax_.data() + out.size() * i : nullptr;
    for (int c = 0; c < out.c; ++c) {
      for (int oh = 0; oh < out.h; ++oh) {
        for (int ow = 0; ow < out.w; ++ow) {
          const int base = (c * in.h + oh * stride_) * in.w + ow * stride_;
          const std::size_t o = (static_cast<std::size_t>(c) * out.h + oh) * out.w + ow;
          std::int32_t best = 0;
          ys[o] = PoolWindow(xs, base, in.w, pool_, max_, inv, &best);
          if (max_) arg[o] = best;
        }
      }
    }
  }
}

void Pool2d::Backward(const float* /*x*/, const float* dy, float* dx, int n) {
  if (dx == nullptr) return;
  const Shape& in = in_shape();
  const Shape& out = out_shape();
  const float inv = 1.0f / static_cast<float>(pool_ * pool_);
  std::fill(dx, dx + in.size() * n, 0.0f);
  for (int i = 0; i < n; ++i) {
    const float* dys = dy + out.size() * i;
    float* dxs = dx + in.size() * i;
    if (max_) {
      const std::int32_t* arg = argmax_.data() + out.size() * i;
      for (std::size_t j = 0; j < out.size(); ++j) dxs[arg[j]] += dys[j];
      continue;
    }
    for (int c = 0; c < out.c; ++c) {
      for (int oh = 0; oh < out.h; ++oh) {
        for (int ow = 0; ow < out.w; ++ow) {
          const int base = (c * in.h + oh * stride_) * in.w + ow * stride_;
          const float g = dys[(static_cast<std::size_t>(c) * out.h + oh) * out.w + ow] * inv;
          for (int ki = 0; ki < pool_; ++ki) {
            for (int kj = 0; kj < pool_; ++kj) dxs[base + ki * in.w + kj] += g;
          }
        }
      }
    }
  }
}

void Elementwise::Forward(const float* x, float* y, int n) {
  const std::size_t count = in_shape().size() * n;
  switch (kind_) {
    case Activation::kTanh:
      for (std::size_t i = 0; i < count; ++i) y[i] = std::tanh(x[i]);
      break;
    case Activation::kSigmoid:
      for (std::size_t i = 0; i < count; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
      break;
    case Activation::kGelu:
      for (std::size_t i = 0; i < count; ++i) {
        y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
      }
      break;
  }
}

void Elementwise::Backward(const float* x, const float* dy, float* dx, int n) {
  if (dx == nullptr) return;
  const std::size_t count = in_shape().size() * n;
  switch (kind_) {
    case Activation::kTanh:
      for (std::size_t i = 0; i < count; ++i) {
        const float t = std::tanh(x[i]);
        dx[i] = dy[i] * (1.0f - t * t);
      }
      break;
    case Activation::kSigmoid:
      for (std::size_t i = 0; i < count; ++i) {
        const float s = 1.0f / (1.0f + std::exp(-x[i]));
        dx[i] = dy[i] * s * (1.0f - s);
      }
      break;
    case Activation::kGelu: {
      // d/dx x·Φ(x) = Φ(x) + x·φ(x)
      const float inv_sqrt_2pi = static_cast<float>(0.5 * M_2_SQRTPI * M_SQRT1_2);
      for (std::size_t i = 0; i < count; ++i) {
        const float v = x[i];
        const float cdf = 0.5f * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2)));
        const float pdf = inv_sqrt_2pi * std::exp(-0.5f * v * v);
        dx[i] = dy[i] * (cdf + v * pdf);
      }
      break;
    }
  }
}

Dropout::Dropout(Shape shape, double rate, std::uint64_t seed, int max_batch)
    : Layer(shape, shape),
      rate_(rate),
      scale_(static_cast<float>(1.0 / (1.0 - rate))),
      seed_(seed),
      mask_(MaskSize(shape, max_batch)) {}

void Dropout::Forward(const float* x, float* y, int n) {
  const std::size_t count = in_shape().size() * n;
  if (!training_) {
    std::copy(x, x + count, y);
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    mask_[i] = DropoutUniform(seed_, calls_, i) < rate_ ? 0.0f : scale_;
    y[i] = x[i] * mask_[i];
  }
  ++calls_;
}

void Dropout::Backward(const float* /*x*/, const float* dy, float* dx, int n) {
  if (dx == nullptr) return;
  const std::size_t count = in_shape().size() * n;
  for (std::size_t i = 0; i < count; ++i) dx[i] = dy[i] * mask_[i];
}

void Flatten::Forward(const float* x, float* y, int n) {
  std::copy(x, x + in_shape().size() * n, y);
}

void Flatten::Backward(const float* /*x*/, const float* dy, float* dx, int n) {
  if (dx != nullptr) std::copy(dy, dy + in_shape().size() * n, dx);
}

EvalResult SoftmaxCrossEntropy(const float* logits, const std::int32_t* labels, int n, int classes,
                               float* dlogits) {
  EvalResult result;
  const double inv_n = 1.0 / n;
  for (int i = 0; i < n; ++i) {
    const float* z = logits + static_cast<std::size_t>(i) * classes;
    const int best = static_cast<int>(std::max_element(z, z + classes) - z);
    const double max = z[best];
    double sum = 0.0;
    for (int k = 0; k < classes; ++k) sum += std::exp(z[k] - max);
    const int label = labels[i];
    result.loss_sum += max + std::log(sum) - z[label];
    result.correct += best == label ? 1 : 0;
    if (dlogits != nullptr) {
      float* dz = dlogits + static_cast<std::size_t>(i) * classes;
      for (int k = 0; k < classes; ++k) {
        const double p = std::exp(z[k] - max) / sum;
        dz[k] = static_cast<float>(((k == label ? p - 1.0 : p)) * inv_n);
      }
    }
  }
  return result;
}

}  // namespace ringtrain::model

namespace ringtrain::model {

EvalResult MeanSquaredError(const float* out, const float* targets, int n, int width, float* dout) {
  EvalResult result;
  const double inv_width = 1.0 / width;
  const double grad_scale = 2.0 / (static_cast<double>(n) * width);
  for (int i = 0; i < n; ++i) {
    const std::size_t row = static_cast<std::size_t>(i) * width;
    double sum = 0.0;
    for (int k = 0; k < width; ++k) {
      const double d = static_cast<double>(out[row + k]) - targets[row + k];
      sum += d * d;
      if (dout != nullptr) dout[row + k] = static_cast<float>(d * grad_scale);
    }
    result.loss_sum += sum * inv_width;
  }
  return result;
}

}  // namespace ringtrain::model
