// The CUDA model path: any layer list (model/model_spec.h, the presets included) with the same
// shapes, initial weights and flat parameter/gradient layout as runner/model's Model (so
// checkpoints move between CPU and GPU and the two can be compared element by element), with
// GEMMs in cuBLAS (FP32 or TF32), convolutions in cuDNN, and CUDA kernels for pooling, bias,
// activations, dropout (the CPU layer's masks, bit for bit), Keras' asymmetric padding and the
// losses (softmax cross-entropy, mean squared error).
// Everything is enqueued on the stream given at creation; nothing allocates, synchronizes or reads
// back after Create, so a whole training step can be captured in a CUDA graph (run one step eagerly
// before capturing: cuBLAS and cuDNN may initialize lazily on first use, and CUDA loads kernels
// lazily).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "runner/model/model.h"
#include "runner/model/model_spec.h"

namespace ringtrain::gpu {

enum class MathMode {
  kFp32,  // IEEE float32 GEMMs and convolutions
  kTf32,  // tensor-core TF32 (10-bit mantissa inputs, float32 accumulate)
};

class GpuModel {
 public:
  virtual ~GpuModel() = default;
  // A preset (config.name, for config's input shape and classes). config.max_batch bounds n. The
  // initial weights equal model::Model::Create(config)'s.
  static StatusOr<std::unique_ptr<GpuModel>> Create(const model::ModelConfig& config, MathMode math,
                                                    cudaStream_t stream);
  // A layer list. Of `config` only max_batch, seed and dropout_seed are used, as in
  // model::Model::Create(spec, config), whose initial weights these are.
  static StatusOr<std::unique_ptr<GpuModel>> Create(const model::ModelSpec& spec,
                                                    const model::ModelConfig& config, MathMode math,
                                                    cudaStream_t stream);

  // Device buffers of num_params() floats, laid out like model::Model's params()/grads().
  virtual float* params() = 0;
  virtual float* grads() = 0;
  virtual std::size_t num_params() const = 0;
  virtual const std::vector<model::ParamRange>& layer_ranges() const = 0;
  // Mean squared error (float targets) rather than softmax cross-entropy (int32 labels), and the
  // width of the output: classes, or targets per sample.
  virtual bool regression() const = 0;
  virtual int outputs() const = 0;

  // x: device n×C×H×W floats (normalized), y: device int32 labels; n ≤ max_batch. Enqueues
  // forward and backward: grads() is overwritten with the gradient of the mean loss over the n
  // samples, and that mean loss is added to *loss_accum (device). on_ready(range) is called on
  // the host right after the last kernel writing that layer's gradients has been enqueued,
  // last layer first (so the caller can record an event and start that bucket's all-reduce).
  // InvalidArgument on a regression model.
  virtual Status ForwardBackward(const float* x, const std::int32_t* y, int n, double* loss_accum,
                                 const model::GradReadyFn& on_ready) = 0;
  // Enqueues the forward pass only: sums[0] += summed loss, sums[1] += correct predictions.
  virtual Status Evaluate(const float* x, const std::int32_t* y, int n, double* sums) = 0;
  // The regression path: targets are device n × outputs() floats; sums[1] is left alone.
  // InvalidArgument on a classifier.
  virtual Status ForwardBackward(const float* x, const float* targets, int n, double* loss_accum,
                                 const model::GradReadyFn& on_ready) = 0;
  virtual Status Evaluate(const float* x, const float* targets, int n, double* sums) = 0;

  // model::Model::SeedDropout on the device: enqueues the upload of the seed (capturable steps
  // read it from device memory), so the next training forwards drop what the CPU model seeded
  // alike would. No-op without dropout.
  virtual Status SeedDropout(std::uint64_t seed) = 0;
};

}  // namespace ringtrain::gpu
