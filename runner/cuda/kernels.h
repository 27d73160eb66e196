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
// 2×2/2 max pooling over n×c×h×w (odd edges dropped); argmax holds each window's winner as an
// offset within its sample (first maximum wins, NaN propagates), and backward routes dy there.
cudaError_t MaxPoolForward(const float* x, float* y, std::int32_t* argmax, int n, int c, int h,
                           int w, cudaStream_t stream);
cudaError_t MaxPoolBackward(const float* dy, const std::int32_t* argmax, float* dx, int n, int c,
                            int h, int w, cudaStream_t stream);
// Softmax cross-entropy over n ≥ 1 rows, in double like layers.cc. With dlogits: writes the
// gradient of the mean loss and adds the mean loss to *loss_accum. With sums: sums[0] += summed
// loss, sums[1] += rows whose first maximal logit is the label. A label outside [0, classes)
// makes the loss (and that row's gradient) NaN instead of reading out of bounds.
cudaError_t SoftmaxCrossEntropy(const float* logits, const std::int32_t* labels, int n, int classes,
                                float* dlogits, double* loss_accum, double* sums,
                                cudaStream_t stream);

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
