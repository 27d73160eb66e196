// Fused optimizer steps on the GPU: one kernel updates parameters and state in place, with the
// same rules and state layout as runner/model/optimizer (SGD with momentum; Adam with bias
// correction; L2 weight decay added to the gradient as torch.optim does), so checkpoints are
// interchangeable. The step's scalars (learning rate, bias corrections) live in device memory:
// SetStep enqueues their copy outside a CUDA graph, Step reads them inside it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "runner/model/optimizer.h"

namespace ringtrain::gpu {

class GpuOptimizer {
 public:
  virtual ~GpuOptimizer() = default;
  static StatusOr<std::unique_ptr<GpuOptimizer>> Create(const model::OptimizerConfig& config,
                                                        std::size_t num_params,
                                                        cudaStream_t stream);
  // Enqueues the scalars for the next update (learning rate `lr`, the update being number
  // steps()+1) and counts the step. Not capturable; call before launching a captured Step.
  virtual Status SetStep(double lr) = 0;
  // Enqueues the fused update of `params` (device) from `grads` (device). Capturable.
  virtual Status Step(float* params, const float* grads) = 0;

  // Device state, laid out like model::Optimizer::state() (size may be 0 for plain SGD).
  virtual float* state() = 0;
  virtual std::size_t state_size() const = 0;
  virtual std::int64_t steps() const = 0;
  virtual void set_steps(std::int64_t steps) = 0;
};

}  // namespace ringtrain::gpu
