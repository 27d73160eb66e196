// The runner's CUDA kernels (see kernels.h). Grid-stride loops over 64-bit indices; every
// reduction is a fixed-order tree in one block, so results are deterministic (a replayed CUDA
// graph computes exactly what the eager step computed).
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "runner/cuda/kernels.h"
#include "runner/model/dropout_mask.h"
#include "runner/model/pool_math.h"

namespace ringtrain::gpu::kernels {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; grid-stride loops do the rest.
constexpr std::int64_t kMaxBlocks = 8192;

int BlocksFor(std::int64_t count) {
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

__device__ __forceinline__ std::int64_t GlobalThread() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t GridThreads() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

// Sums `value` over a block of kThreads threads in a fixed order; the result is valid in
// thread 0. `shared` holds kThreads elements.
template <typename T>
__device__ T BlockSum(T value, T* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  return shared[0];
}

// ---- model ----

__global__ void AddBiasKernel(float* __restrict__ y, const float* __restrict__ bias,
                              std::int64_t total, int channels, std::int64_t pixels) {
  for (std::int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int c = static_cast<int>((e / pixels) % channels);
    y[e] += bias[c];
  }
}

// pixels == 1 (Linear): thread c sums column c; neighbouring threads read neighbouring floats.
__global__ void ColumnSumKernel(const float* __restrict__ dy, float* __restrict__ db,
                                std::int64_t rows, int channels) {
  for (std::int64_t c = GlobalThread(); c < channels; c += GridThreads()) {
    float sum = 0.0f;
    for (std::int64_t r = 0; r < rows; ++r) sum += dy[r * channels + c];
    db[c] = sum;
  }
}

// pixels > 1 (Conv2d): one block per channel reduces rows × pixels values.
__global__ void ChannelSumKernel(const float* __restrict__ dy, float* __restrict__ db,
                                 std::int64_t rows, int channels, std::int64_t pixels) {
  __shared__ float shared[kThreads];
  const std::int64_t per_channel = rows * pixels;
  for (int c = blockIdx.x; c < channels; c += gridDim.x) {
    float sum = 0.0f;
    for (std::int64_t e = threadIdx.x; e < per_channel; e += blockDim.x) {
      const std::int64_t r = e / pixels;
      const std::int64_t p = e - r * pixels;
      sum += dy[(r * channels + c) * pixels + p];
    }
    const float total = BlockSum(sum, shared);
    if (threadIdx.x == 0) db[c] = total;
    __syncthreads();  // shared is reused by the next channel
  }
}

__global__ void ReluForwardKernel(const float* __restrict__ x, float* __restrict__ y,
                                  std::int64_t count) {
  for (std::int64_t e = GlobalThread(); e < count; e += GridThreads()) {
    const float v = x[e];
    y[e] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void ReluBackwardKernel(const float* __restrict__ x, const float* __restrict__ dy,
                                   float* __restrict__ dx, std::int64_t count) {
  for (std::int64_t e = GlobalThread(); e < count; e += GridThreads()) {
    dx[e] = x[e] > 0.0f ? dy[e] : 0.0f;
  }
}

// General pooling (Pool2d in layers.cc): one thread per output element, scanning its window in
// row-major order. inv is the host's 1.0f / float(pool·pool), as layers.cc computes it.
__global__ void Pool2dForwardKernel(const float* __restrict__ x, float* __restrict__ y,
                                    std::int32_t* __restrict__ argmax, int n, int c, int h, int w,
                                    int pool, int stride, int oh_count, int ow_count, bool max,
                                    float inv) {
  const std::int64_t in_size = static_cast<std::int64_t>(c) * h * w;
  const std::int64_t total = static_cast<std::int64_t>(n) * c * oh_count * ow_count;
  for (std::int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int ow = static_cast<int>(e % ow_count);
    std::int64_t t = e / ow_count;
    const int oh = static_cast<int>(t % oh_count);
    t /= oh_count;
    const int ch = static_cast<int>(t % c);
    const std::int64_t i = t / c;
    const float* xi = x + i * in_size;
    const int base = (ch * h + oh * stride) * w + ow * stride;  // offset within the sample
    std::int32_t best = 0;
    y[e] = model::PoolWindow(xi, base, w, pool, max, inv, &best);
    if (max) argmax[e] = best;
  }
}

// One thread per input element, gathering from the windows that contain it (PoolInputGradient,
// layers.cc's scatter order, bit for bit).
__global__ void Pool2dBackwardKernel(const float* __restrict__ dy,
                                     const std::int32_t* __restrict__ argmax,
                                     float* __restrict__ dx, int n, int c, int h, int w, int pool,
                                     int stride, int oh_count, int ow_count, bool max, float inv) {
  const std::int64_t in_size = static_cast<std::int64_t>(c) * h * w;
  const std::int64_t out_size = static_cast<std::int64_t>(c) * oh_count * ow_count;
  const std::int64_t total = static_cast<std::int64_t>(n) * in_size;
  for (std::int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const std::int64_t i = e / in_size;
    const int j = static_cast<int>(e - i * in_size);                  // offset within the sample
    const std::int32_t* arg = max ? argmax + i * out_size : nullptr;  // null for average
    dx[e] = model::PoolInputGradient(dy + i * out_size, arg, j, h, w, pool, stride, oh_count,
                                     ow_count, max, inv);
  }
}

// layers.cc's Elementwise constants, folded by the host compiler as there.
constexpr float kSqrtHalf = static_cast<float>(M_SQRT1_2);
constexpr float kInvSqrt2Pi = static_cast<float>(0.5 * M_2_SQRTPI * M_SQRT1_2);

// x and y may be the same buffer (each element is read before it is written).
template <Activation kKind>
__global__ void ActivationForwardKernel(const float* x, float* y, std::int64_t count) {
  for (std::int64_t e = GlobalThread(); e < count; e += GridThreads()) {
    const float v = x[e];
    if constexpr (kKind == Activation::kTanh) {
      y[e] = tanhf(v);
    } else if constexpr (kKind == Activation::kSigmoid) {
      y[e] = 1.0f / (1.0f + expf(-v));
    } else {
      y[e] = 0.5f * v * (1.0f + erff(v * kSqrtHalf));
    }
  }
}

template <Activation kKind>
__global__ void ActivationBackwardKernel(const float* x, const float* dy, float* dx,
                                         std::int64_t count) {
  for (std::int64_t e = GlobalThread(); e < count; e += GridThreads()) {
    const float v = x[e];
    if constexpr (kKind == Activation::kTanh) {
      const float t = tanhf(v);
      dx[e] = dy[e] * (1.0f - t * t);
    } else if constexpr (kKind == Activation::kSigmoid) {
      const float s = 1.0f / (1.0f + expf(-v));
      dx[e] = dy[e] * s * (1.0f - s);
    } else {
      // d/dx x·Φ(x) = Φ(x) + x·φ(x)
      const float cdf = 0.5f * (1.0f + erff(v * kSqrtHalf));
      const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
      dx[e] = dy[e] * (cdf + v * pdf);
    }
  }
}

// The seed and the call count are read from device memory when the kernel runs, so a replayed
// graph uses the values the host uploaded (and DropoutAdvance left) before the replay.
__global__ void DropoutForwardKernel(const float* x, float* y, float* __restrict__ mask,
                                     std::int64_t count, double rate, float scale,
                                     const DropoutState* __restrict__ state,
                                     std::uint64_t layer_offset) {
  const std::uint64_t seed = state->seed + layer_offset;
  const std::uint64_t call = state->calls;
  for (std::int64_t e = GlobalThread(); e < count; e += GridThreads()) {
    const float m =
        model::DropoutUniform(seed, call, static_cast<std::uint64_t>(e)) < rate ? 0.0f : scale;
    mask[e] = m;
    y[e] = x[e] * m;
  }
}

__global__ void DropoutAdvanceKernel(DropoutState* state) { ++state->calls; }

__global__ void MultiplyKernel(const float* a, const float* b, float* c, std::int64_t count) {
  for (std::int64_t e = GlobalThread(); e < count; e += GridThreads()) c[e] = a[e] * b[e];
}

// One thread per padded output element: the interior copies x, the border is zero.
__global__ void Pad2dKernel(const float* __restrict__ x, float* __restrict__ y, int h, int w,
                            int top, int left, int ph, int pw, std::int64_t total) {
  for (std::int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int ow = static_cast<int>(e % pw);
    const std::int64_t t = e / pw;
    const int oh = static_cast<int>(t % ph);
    const std::int64_t plane = t / ph;  // sample · c + channel
    const int ih = oh - top;
    const int iw = ow - left;
    const bool inside = ih >= 0 && ih < h && iw >= 0 && iw < w;
    y[e] = inside ? x[(plane * h + ih) * w + iw] : 0.0f;
  }
}

// One thread per cropped element, read from the interior of the padded dy.
__global__ void Crop2dKernel(const float* __restrict__ dy, float* __restrict__ dx, int h, int w,
                             int top, int left, int ph, int pw, std::int64_t total) {
  for (std::int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int iw = static_cast<int>(e % w);
    const std::int64_t t = e / w;
    const int ih = static_cast<int>(t % h);
    const std::int64_t plane = t / h;
    dx[e] = dy[(plane * ph + ih + top) * pw + iw + left];
  }
}

// One block; thread t takes rows t, t + kThreads, ... Sums are reduced in a fixed tree.
__global__ void SoftmaxCrossEntropyKernel(const float* __restrict__ logits,
                                          const std::int32_t* __restrict__ labels, int n,
                                          int classes, float* __restrict__ dlogits,
                                          double* __restrict__ loss_accum,
                                          double* __restrict__ sums) {
  __shared__ double shared[kThreads];
  const double inv_n = 1.0 / n;
  double loss = 0.0;
  double correct = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float* z = logits + static_cast<std::int64_t>(i) * classes;
    // std::max_element: the first largest (a later element wins only if strictly larger).
    int best = 0;
    for (int k = 1; k < classes; ++k) {
      if (z[best] < z[k]) best = k;
    }
    const double max = z[best];
    double sum = 0.0;
    for (int k = 0; k < classes; ++k) sum += exp(static_cast<double>(z[k]) - max);
    const int label = labels[i];
    const bool valid = label >= 0 && label < classes;
    if (valid) {
      loss += max + log(sum) - static_cast<double>(z[label]);
      correct += best == label ? 1.0 : 0.0;
    } else {
      loss += __longlong_as_double(0x7ff8000000000000ll);  // NaN: a corrupt label
    }
    if (dlogits != nullptr) {
      float* dz = dlogits + static_cast<std::int64_t>(i) * classes;
      for (int k = 0; k < classes; ++k) {
        const double p = exp(static_cast<double>(z[k]) - max) / sum;
        dz[k] = valid ? static_cast<float>((k == label ? p - 1.0 : p) * inv_n)
                      : __int_as_float(0x7fc00000);
      }
    }
  }
  const double total_loss = BlockSum(loss, shared);
  __syncthreads();
  const double total_correct = BlockSum(correct, shared);
  if (threadIdx.x == 0) {
    if (loss_accum != nullptr) *loss_accum += total_loss * inv_n;
    if (sums != nullptr) {
      sums[0] += total_loss;
      sums[1] += total_correct;
    }
  }
}

// One block; thread t takes rows t, t + kThreads, ... Each row is layers.cc's loop in double,
// rounded operation by operation (no FMA); the rows' means are reduced in a fixed tree.
// inv_width = 1.0 / width and grad_scale = 2.0 / (double(n)·width), from the host as layers.cc.
__global__ void MeanSquaredErrorKernel(const float* __restrict__ out,
                                       const float* __restrict__ targets, int n, int width,
                                       float* __restrict__ dout, double* __restrict__ loss_accum,
                                       double* __restrict__ sums, double inv_width,
                                       double grad_scale) {
  __shared__ double shared[kThreads];
  double loss = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const std::int64_t row = static_cast<std::int64_t>(i) * width;
    double sum = 0.0;
    for (int k = 0; k < width; ++k) {
      const double d =
          __dsub_rn(static_cast<double>(out[row + k]), static_cast<double>(targets[row + k]));
      sum = __dadd_rn(sum, __dmul_rn(d, d));
      if (dout != nullptr) dout[row + k] = static_cast<float>(__dmul_rn(d, grad_scale));
    }
    loss = __dadd_rn(loss, __dmul_rn(sum, inv_width));
  }
  const double total = BlockSum(loss, shared);
  if (threadIdx.x == 0) {
    if (loss_accum != nullptr) *loss_accum += total / n;
    if (sums != nullptr) sums[0] += total;
  }
}

// ---- optimizers: every operation rounded on its own, as the CPU (no FMA) computes it ----

__device__ __forceinline__ void SgdOne(float& p, float g, float& buf, float momentum,
                                       float weight_decay, float lr) {
  buf = __fadd_rn(__fmul_rn(momentum, buf), __fadd_rn(g, __fmul_rn(weight_decay, p)));
  p = __fsub_rn(p, __fmul_rn(lr, buf));
}

__device__ __forceinline__ void AdamOne(float& p, float grad, float& m, float& v,
                                        const AdamConstants& c, float step_size,
                                        float inv_sqrt_bc2) {
  const float g = __fadd_rn(grad, __fmul_rn(c.weight_decay, p));
  m = __fadd_rn(m, __fmul_rn(c.one_minus_b1, __fsub_rn(g, m)));
  v = __fadd_rn(__fmul_rn(c.b2, v), __fmul_rn(__fmul_rn(c.one_minus_b2, g), g));
  const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(v), inv_sqrt_bc2), c.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(step_size, m), denom));
}

// kVec: all pointers are 16-byte aligned; float4 over the first count/4·4 elements, then the
// scalar tail.
template <bool kVec>
__global__ void SgdKernel(float* __restrict__ p, const float* __restrict__ g,
                          float* __restrict__ buf, std::int64_t count, float momentum,
                          float weight_decay, const StepScalars* __restrict__ scalars) {
  const float lr = scalars->lr;
  std::int64_t done = 0;
  if constexpr (kVec) {
    const std::int64_t n4 = count / 4;
    for (std::int64_t i = GlobalThread(); i < n4; i += GridThreads()) {
      float4 pv = reinterpret_cast<float4*>(p)[i];
      const float4 gv = reinterpret_cast<const float4*>(g)[i];
      float4 bv = reinterpret_cast<float4*>(buf)[i];
      SgdOne(pv.x, gv.x, bv.x, momentum, weight_decay, lr);
      SgdOne(pv.y, gv.y, bv.y, momentum, weight_decay, lr);
      SgdOne(pv.z, gv.z, bv.z, momentum, weight_decay, lr);
      SgdOne(pv.w, gv.w, bv.w, momentum, weight_decay, lr);
      reinterpret_cast<float4*>(p)[i] = pv;
      reinterpret_cast<float4*>(buf)[i] = bv;
    }
    done = n4 * 4;
  }
  for (std::int64_t i = done + GlobalThread(); i < count; i += GridThreads()) {
    SgdOne(p[i], g[i], buf[i], momentum, weight_decay, lr);
  }
}

template <bool kVec>
__global__ void AdamKernel(float* __restrict__ p, const float* __restrict__ g,
                           float* __restrict__ m, float* __restrict__ v, std::int64_t count,
                           AdamConstants c, const StepScalars* __restrict__ scalars) {
  const float step_size = scalars->step_size;
  const float inv_sqrt_bc2 = scalars->inv_sqrt_bc2;
  std::int64_t done = 0;
  if constexpr (kVec) {
    const std::int64_t n4 = count / 4;
    for (std::int64_t i = GlobalThread(); i < n4; i += GridThreads()) {
      float4 pv = reinterpret_cast<float4*>(p)[i];
      const float4 gv = reinterpret_cast<const float4*>(g)[i];
      float4 mv = reinterpret_cast<float4*>(m)[i];
      float4 vv = reinterpret_cast<float4*>(v)[i];
      AdamOne(pv.x, gv.x, mv.x, vv.x, c, step_size, inv_sqrt_bc2);
      AdamOne(pv.y, gv.y, mv.y, vv.y, c, step_size, inv_sqrt_bc2);
      AdamOne(pv.z, gv.z, mv.z, vv.z, c, step_size, inv_sqrt_bc2);
      AdamOne(pv.w, gv.w, mv.w, vv.w, c, step_size, inv_sqrt_bc2);
      reinterpret_cast<float4*>(p)[i] = pv;
      reinterpret_cast<float4*>(m)[i] = mv;
      reinterpret_cast<float4*>(v)[i] = vv;
    }
    done = n4 * 4;
  }
  for (std::int64_t i = done + GlobalThread(); i < count; i += GridThreads()) {
    AdamOne(p[i], g[i], m[i], v[i], c, step_size, inv_sqrt_bc2);
  }
}

bool Aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

int OptimizerBlocks(std::size_t count, int max_blocks) {
  int blocks = BlocksFor(static_cast<std::int64_t>(count));
  if (max_blocks > 0 && blocks > max_blocks) blocks = max_blocks;
  return blocks;
}

// ---- input: x = float(pixel)·scale − shift, rounded like idx.cc's loop ----

__device__ __forceinline__ float Normalize(std::uint8_t pixel, float scale, float shift) {
  return __fsub_rn(__fmul_rn(static_cast<float>(pixel), scale), shift);
}

__global__ void GatherShuffledKernel(const std::uint8_t* __restrict__ images,
                                     const std::int32_t* __restrict__ labels,
                                     const std::uint32_t* __restrict__ perm,
                                     const std::int64_t* __restrict__ cursor, ShardPlan plan, int n,
                                     int sample_size, float scale, float shift,
                                     float* __restrict__ x, std::int32_t* __restrict__ y) {
  const std::int64_t step = *cursor;
  const std::int64_t total = static_cast<std::int64_t>(n) * sample_size;
  for (std::int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const std::int64_t i = e / sample_size;
    const std::int64_t j = e - i * sample_size;
    std::int64_t q = plan.PermPosition(step, i);
    if (q < 0) q += plan.count;  // only reachable with a corrupt cursor; stay in bounds
    const std::int64_t s = perm[q];
    x[e] = Normalize(images[s * sample_size + j], scale, shift);
    if (j == 0) y[i] = labels[s];
  }
}

__global__ void GatherStridedKernel(const std::uint8_t* __restrict__ images,
                                    const std::int32_t* __restrict__ labels, std::int64_t first,
                                    std::int64_t stride, int n, int sample_size, float scale,
                                    float shift, float* __restrict__ x,
                                    std::int32_t* __restrict__ y) {
  const std::int64_t total = static_cast<std::int64_t>(n) * sample_size;
  for (std::int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const std::int64_t i = e / sample_size;
    const std::int64_t j = e - i * sample_size;
    const std::int64_t s = first + i * stride;
    x[e] = Normalize(images[s * sample_size + j], scale, shift);
    if (j == 0) y[i] = labels[s];
  }
}

}  // namespace

cudaError_t AddBias(float* y, const float* bias, std::int64_t rows, int channels,
                    std::int64_t pixels, cudaStream_t stream) {
  const std::int64_t total = rows * channels * pixels;
  if (total <= 0) return cudaSuccess;
  AddBiasKernel<<<BlocksFor(total), kThreads, 0, stream>>>(y, bias, total, channels, pixels);
  return cudaGetLastError();
}

cudaError_t BiasGrad(const float* dy, float* db, std::int64_t rows, int channels,
                     std::int64_t pixels, cudaStream_t stream) {
  if (channels <= 0) return cudaSuccess;
  if (pixels == 1) {
    ColumnSumKernel<<<BlocksFor(channels), kThreads, 0, stream>>>(dy, db, rows, channels);
  } else {
    const int blocks = channels < kMaxBlocks ? channels : static_cast<int>(kMaxBlocks);
    ChannelSumKernel<<<blocks, kThreads, 0, stream>>>(dy, db, rows, channels, pixels);
  }
  return cudaGetLastError();
}

cudaError_t ReluForward(const float* x, float* y, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  ReluForwardKernel<<<BlocksFor(count), kThreads, 0, stream>>>(x, y, count);
  return cudaGetLastError();
}

cudaError_t ReluBackward(const float* x, const float* dy, float* dx, std::int64_t count,
                         cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  ReluBackwardKernel<<<BlocksFor(count), kThreads, 0, stream>>>(x, dy, dx, count);
  return cudaGetLastError();
}

cudaError_t Pool2dForward(const float* x, float* y, std::int32_t* argmax, int n, int c, int h,
                          int w, int pool, int stride, bool max, cudaStream_t stream) {
  if (pool <= 0 || stride <= 0 || pool > h || pool > w) return cudaErrorInvalidValue;
  const int oh_count = (h - pool) / stride + 1;
  const int ow_count = (w - pool) / stride + 1;
  const std::int64_t total = static_cast<std::int64_t>(n) * c * oh_count * ow_count;
  if (total <= 0) return cudaSuccess;
  const float inv = 1.0f / static_cast<float>(pool * pool);
  Pool2dForwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(
      x, y, argmax, n, c, h, w, pool, stride, oh_count, ow_count, max, inv);
  return cudaGetLastError();
}

cudaError_t Pool2dBackward(const float* dy, const std::int32_t* argmax, float* dx, int n, int c,
                           int h, int w, int pool, int stride, bool max, cudaStream_t stream) {
  if (pool <= 0 || stride <= 0 || pool > h || pool > w) return cudaErrorInvalidValue;
  const int oh_count = (h - pool) / stride + 1;
  const int ow_count = (w - pool) / stride + 1;
  const std::int64_t total = static_cast<std::int64_t>(n) * c * h * w;
  if (total <= 0) return cudaSuccess;
  const float inv = 1.0f / static_cast<float>(pool * pool);
  Pool2dBackwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(
      dy, argmax, dx, n, c, h, w, pool, stride, oh_count, ow_count, max, inv);
  return cudaGetLastError();
}

cudaError_t ActivationForward(Activation kind, const float* x, float* y, std::int64_t count,
                              cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  const int blocks = BlocksFor(count);
  switch (kind) {
    case Activation::kTanh:
      ActivationForwardKernel<Activation::kTanh><<<blocks, kThreads, 0, stream>>>(x, y, count);
      break;
    case Activation::kSigmoid:
      ActivationForwardKernel<Activation::kSigmoid><<<blocks, kThreads, 0, stream>>>(x, y, count);
      break;
    case Activation::kGelu:
      ActivationForwardKernel<Activation::kGelu><<<blocks, kThreads, 0, stream>>>(x, y, count);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t ActivationBackward(Activation kind, const float* x, const float* dy, float* dx,
                               std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  const int blocks = BlocksFor(count);
  switch (kind) {
    case Activation::kTanh:
      ActivationBackwardKernel<Activation::kTanh>
          <<<blocks, kThreads, 0, stream>>>(x, dy, dx, count);
      break;
    case Activation::kSigmoid:
      ActivationBackwardKernel<Activation::kSigmoid>
          <<<blocks, kThreads, 0, stream>>>(x, dy, dx, count);
      break;
    case Activation::kGelu:
      ActivationBackwardKernel<Activation::kGelu>
          <<<blocks, kThreads, 0, stream>>>(x, dy, dx, count);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t DropoutForward(const float* x, float* y, float* mask, std::int64_t count, double rate,
                           float scale, const DropoutState* state, std::uint64_t layer_offset,
                           cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  DropoutForwardKernel<<<BlocksFor(count), kThreads, 0, stream>>>(x, y, mask, count, rate, scale,
                                                                  state, layer_offset);
  return cudaGetLastError();
}

cudaError_t DropoutAdvance(DropoutState* state, cudaStream_t stream) {
  DropoutAdvanceKernel<<<1, 1, 0, stream>>>(state);
  return cudaGetLastError();
}

cudaError_t Multiply(const float* a, const float* b, float* c, std::int64_t count,
                     cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  MultiplyKernel<<<BlocksFor(count), kThreads, 0, stream>>>(a, b, c, count);
  return cudaGetLastError();
}

cudaError_t Pad2d(const float* x, float* y, int n, int c, int h, int w, int top, int bottom,
                  int left, int right, cudaStream_t stream) {
  if (top < 0 || bottom < 0 || left < 0 || right < 0) return cudaErrorInvalidValue;
  const int ph = h + top + bottom;
  const int pw = w + left + right;
  const std::int64_t total = static_cast<std::int64_t>(n) * c * ph * pw;
  if (total <= 0) return cudaSuccess;
  Pad2dKernel<<<BlocksFor(total), kThreads, 0, stream>>>(x, y, h, w, top, left, ph, pw, total);
  return cudaGetLastError();
}

cudaError_t Crop2d(const float* dy, float* dx, int n, int c, int h, int w, int top, int bottom,
                   int left, int right, cudaStream_t stream) {
  if (top < 0 || bottom < 0 || left < 0 || right < 0) return cudaErrorInvalidValue;
  const int ph = h + top + bottom;
  const int pw = w + left + right;
  const std::int64_t total = static_cast<std::int64_t>(n) * c * h * w;
  if (total <= 0) return cudaSuccess;
  Crop2dKernel<<<BlocksFor(total), kThreads, 0, stream>>>(dy, dx, h, w, top, left, ph, pw, total);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(const float* logits, const std::int32_t* labels, int n, int classes,
                                float* dlogits, double* loss_accum, double* sums,
                                cudaStream_t stream) {
  if (n <= 0 || classes <= 0) return cudaErrorInvalidValue;
  SoftmaxCrossEntropyKernel<<<1, kThreads, 0, stream>>>(logits, labels, n, classes, dlogits,
                                                        loss_accum, sums);
  return cudaGetLastError();
}

cudaError_t MeanSquaredError(const float* out, const float* targets, int n, int width, float* dout,
                             double* loss_accum, double* sums, cudaStream_t stream) {
  if (n <= 0 || width <= 0) return cudaErrorInvalidValue;
  const double inv_width = 1.0 / width;
  const double grad_scale = 2.0 / (static_cast<double>(n) * width);
  MeanSquaredErrorKernel<<<1, kThreads, 0, stream>>>(out, targets, n, width, dout, loss_accum, sums,
                                                     inv_width, grad_scale);
  return cudaGetLastError();
}

cudaError_t SgdStep(float* p, const float* g, float* buf, std::size_t count, float momentum,
                    float weight_decay, const StepScalars* scalars, int max_blocks,
                    cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const int blocks = OptimizerBlocks(count, max_blocks);
  const auto n = static_cast<std::int64_t>(count);
  if (Aligned16(p) && Aligned16(g) && Aligned16(buf)) {
    SgdKernel<true><<<blocks, kThreads, 0, stream>>>(p, g, buf, n, momentum, weight_decay, scalars);
  } else {
    SgdKernel<false>
        <<<blocks, kThreads, 0, stream>>>(p, g, buf, n, momentum, weight_decay, scalars);
  }
  return cudaGetLastError();
}

cudaError_t AdamStep(float* p, const float* g, float* m, float* v, std::size_t count,
                     AdamConstants constants, const StepScalars* scalars, int max_blocks,
                     cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const int blocks = OptimizerBlocks(count, max_blocks);
  const auto n = static_cast<std::int64_t>(count);
  if (Aligned16(p) && Aligned16(g) && Aligned16(m) && Aligned16(v)) {
    AdamKernel<true><<<blocks, kThreads, 0, stream>>>(p, g, m, v, n, constants, scalars);
  } else {
    AdamKernel<false><<<blocks, kThreads, 0, stream>>>(p, g, m, v, n, constants, scalars);
  }
  return cudaGetLastError();
}

cudaError_t GatherShuffled(const std::uint8_t* images, const std::int32_t* labels,
                           const std::uint32_t* perm, const std::int64_t* cursor, ShardPlan plan,
                           int n, int sample_size, float scale, float shift, float* x,
                           std::int32_t* y, cudaStream_t stream) {
  const std::int64_t total = static_cast<std::int64_t>(n) * sample_size;
  if (total <= 0) return cudaSuccess;
  if (plan.count <= 0) return cudaErrorInvalidValue;
  GatherShuffledKernel<<<BlocksFor(total), kThreads, 0, stream>>>(
      images, labels, perm, cursor, plan, n, sample_size, scale, shift, x, y);
  return cudaGetLastError();
}

cudaError_t GatherStrided(const std::uint8_t* images, const std::int32_t* labels,
                          std::int64_t first, std::int64_t stride, int n, int sample_size,
                          float scale, float shift, float* x, std::int32_t* y,
                          cudaStream_t stream) {
  const std::int64_t total = static_cast<std::int64_t>(n) * sample_size;
  if (total <= 0) return cudaSuccess;
  GatherStridedKernel<<<BlocksFor(total), kThreads, 0, stream>>>(images, labels, first, stride, n,
                                                                 sample_size, scale, shift, x, y);
  return cudaGetLastError();
}

}  // namespace ringtrain::gpu::kernels
