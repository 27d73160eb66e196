// Optimizers over the model's flat parameter/gradient buffers: SGD with momentum and Adam
// (PyTorch's update rules). State is flat too, so a checkpoint is three or four float arrays.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace ringtrain::model {

struct OptimizerConfig {
  std::string name = "adam";  // "sgd" | "adam"
  double momentum = 0.9;      // sgd
  double beta1 = 0.9;         // adam
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2 added to the gradient, as torch.optim does
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  static StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerConfig& config,
                                                     std::size_t num_params);
  // One update with learning rate `lr` (the trainer applies scaling, warmup and decay).
  virtual void Step(std::span<float> params, std::span<const float> grads, double lr) = 0;
  // Flat state for checkpoints (momentum; or m, v followed by nothing else) and the step count.
  virtual std::span<float> state() = 0;
  virtual std::int64_t steps() const = 0;
  virtual void set_steps(std::int64_t steps) = 0;
};

}  // namespace ringtrain::model
