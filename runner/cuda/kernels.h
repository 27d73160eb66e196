// Host launch wrappers for the runner's CUDA kernels (kernels.cu, sort.cu). Each enqueues on
// `stream` and returns the launch error (cudaGetLastError), never synchronizes or allocates, so
// every one of them may be captured in a CUDA graph. Callers validate sizes; the kernels only
// guard their own index arithmetic. Float formulas that must equal the CPU code bit for bit
// (data normalization, optimizer updates) round every operation (no FMA contraction).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "runner/cuda/shard.h"

namespace ringtrain::gpu::kernels {

// ---- model ----

// y[(r·channels + c)·pixels + p] += bias[c] for r < rows.
cudaError_t AddBias(float* y, const float* bias, std::int64_t rows, int channels,
                    std::int64_t pixels, cudaStream_t stream);
// db[c] = Σ_{r, p} dy[(r·channels + c)·pixels + p] (overwrites db). Deterministic.
cudaError_t BiasGrad(const float* dy, float* db, std::int64_t rows, int channels,
                     std::int64_t pixels, cudaStream_t stream);
// y = x > 0 ? x : 0, and dx = x > 0 ? dy : 0 (x is the forward input), like layers.cc.
cudaError_t ReluForward(const float* x, float* y, std::int64_t count, cudaStream_t stream);
cudaError_t ReluBackward(const float* x, const float* dy, float* dx, std::int64_t count,
                         cudaStream_t stream);
// Pooling of n×c×h×w into n×c×oh×ow, pool×pool windows at `stride`, floor mode (oh = (h − pool)
// / stride + 1; layers.cc's Pool2d). Max: the first maximum in the window's row-major order wins
// and a NaN propagates (the first NaN stays); argmax gets each winner's offset within its sample.
// Average: the window's sum in row-major order, times 1/pool² (argmax unused, may be null).
cudaError_t Pool2dForward(const float* x, float* y, std::int32_t* argmax, int n, int c, int h,
                          int w, int pool, int stride, bool max, cudaStream_t stream);
// Overwrites dx (n×c×h×w): each input element gathers, over the windows that contain it in
// row-major window order, dy (max: only the windows whose argmax is that element; average: dy ×
// 1/pool²). A gather, not a scatter: deterministic when windows overlap (stride < pool).
cudaError_t Pool2dBackward(const float* dy, const std::int32_t* argmax, float* dx, int n, int c,
                           int h, int w, int pool, int stride, bool max, cudaStream_t stream);
// tanh, the logistic sigmoid and GELU's erf form x·Φ(x), with layers.cc's Elementwise formulas
// (tanhf, 1/(1 + expf(−x)), 0.5·x·(1 + erff(x/√2)); backward recomputes from the input x).
enum class Activation { kTanh, kSigmoid, kGelu };
cudaError_t ActivationForward(Activation kind, const float* x, float* y, std::int64_t count,
                              cudaStream_t stream);
cudaError_t ActivationBackward(Activation kind, const float* x, const float* dy, float* dx,
                               std::int64_t count, cudaStream_t stream);

// A model's dropout stream on the device: the seed set by the host before a step (a pinned
// upload, so a captured step reads the new one) and the training forwards since then.
struct DropoutState {
  std::uint64_t seed = 0;
  std::uint64_t calls = 0;
};
// Training forward of one dropout layer: mask[i] = DropoutUniform(state->seed + layer_offset,
// state->calls, i) < rate ? 0 : scale (model/dropout_mask.h, the CPU layer's mask bit for bit)
// and y[i] = x[i]·mask[i], for i < count.
cudaError_t DropoutForward(const float* x, float* y, float* mask, std::int64_t count, double rate,
                           float scale, const DropoutState* state, std::uint64_t layer_offset,
                           cudaStream_t stream);
// ++state->calls: enqueued once after a training forward (every layer of it saw the same calls).
cudaError_t DropoutAdvance(DropoutState* state, cudaStream_t stream);
// c[i] = a[i]·b[i] (dropout's backward: dx = dy·mask).
cudaError_t Multiply(const float* a, const float* b, float* c, std::int64_t count,
                     cudaStream_t stream);

// y (n×c×(h+top+bottom)×(w+left+right)) = x (n×c×h×w) placed at (top, left), zeros around:
// Keras' "same" padding, whose odd pixel goes to the bottom/right (cuDNN pads symmetrically).
cudaError_t Pad2d(const float* x, float* y, int n, int c, int h, int w, int top, int bottom,
                  int left, int right, cudaStream_t stream);
// dx (n×c×h×w) = the (top, left) window of dy (n×c×(h+top+bottom)×(w+left+right)).
cudaError_t Crop2d(const float* dy, float* dx, int n, int c, int h, int w, int top, int bottom,
                   int left, int right, cudaStream_t stream);

// Softmax cross-entropy over n ≥ 1 rows, in double like layers.cc. With dlogits: writes the
// gradient of the mean loss and adds the mean loss to *loss_accum. With sums: sums[0] += summed
// loss, sums[1] += rows whose first maximal logit is the label. A label outside [0, classes)
// makes the loss (and that row's gradient) NaN instead of reading out of bounds.
cudaError_t SoftmaxCrossEntropy(const float* logits, const std::int32_t* labels, int n, int classes,
                                float* dlogits, double* loss_accum, double* sums,
                                cudaStream_t stream);

// Mean squared error over n ≥ 1 rows of `width` outputs against float targets, in double like
// layers.cc's MeanSquaredError (each row's mean of squared differences). With dout: writes
// dout = 2·(out − target)/(n·width) (as float, from the double difference) and adds the loss
// (the mean of the rows' means) to *loss_accum. With sums: sums[0] += the sum of the rows' means
// (sums[1] untouched). Deterministic (fixed-order reduction).
cudaError_t MeanSquaredError(const float* out, const float* targets, int n, int width, float* dout,
                             double* loss_accum, double* sums, cudaStream_t stream);

// ---- optimizers ----

// Written by GpuOptimizer::SetStep before each update; read by the update kernels.
struct StepScalars {
  float lr = 0;            // sgd
  float step_size = 0;     // adam: lr / (1 − β1^t)
  float inv_sqrt_bc2 = 0;  // adam: 1 / √(1 − β2^t)
};

struct AdamConstants {
  float one_minus_b1;
  float b2;
  float one_minus_b2;
  float eps;
  float weight_decay;
};

// buf = momentum·buf + (g + wd·p); p −= lr·buf.
cudaError_t SgdStep(float* p, const float* g, float* buf, std::size_t count, float momentum,
                    float weight_decay, const StepScalars* scalars, int max_blocks,
                    cudaStream_t stream);
// torch.optim.Adam (no amsgrad), exactly optimizer.cc's AdamUpdate.
cudaError_t AdamStep(float* p, const float* g, float* m, float* v, std::size_t count,
                     AdamConstants constants, const StepScalars* scalars, int max_blocks,
                     cudaStream_t stream);

// ---- input ----

// Batch *cursor of this rank (positions plan.PermPosition(*cursor, i), i < n) from uint8
// images (count × sample_size) into normalized floats: x = float(pixel)·scale − shift.
cudaError_t GatherShuffled(const std::uint8_t* images, const std::int32_t* labels,
                           const std::uint32_t* perm, const std::int64_t* cursor, ShardPlan plan,
                           int n, int sample_size, float scale, float shift, float* x,
                           std::int32_t* y, cudaStream_t stream);
// Samples first, first + stride, ... (n of them), unshuffled.
cudaError_t GatherStrided(const std::uint8_t* images, const std::int32_t* labels,
                          std::int64_t first, std::int64_t stride, int n, int sample_size,
                          float scale, float shift, float* x, std::int32_t* y, cudaStream_t stream);

// keys[i] = ShuffleKey(seed, epoch, i) for i < count.
cudaError_t ShuffleKeys(std::uint64_t* keys, std::int64_t count, std::uint64_t seed, int epoch,
                        cudaStream_t stream);
// values[i] = i.
cudaError_t Iota(std::uint32_t* values, std::int64_t count, cudaStream_t stream);
// cub::DeviceRadixSort::SortPairs over 64-bit keys and 32-bit values (stable). With temp ==
// nullptr only sets *temp_bytes.
cudaError_t SortPairs(void* temp, std::size_t* temp_bytes, const std::uint64_t* keys_in,
                      std::uint64_t* keys_out, const std::uint32_t* values_in,
                      std::uint32_t* values_out, int count, cudaStream_t stream);

}  // namespace ringtrain::gpu::kernels
