#include "runner/model/optimizer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runner/model/clones.h"

namespace ringtrain::model {
namespace {

// A size mismatch is the trainer's bug, and the loops below would run off the end of a buffer.
// An assertion exits with a permanent code, like the model's (see model.cc).
void CheckSizes(std::span<float> params, std::span<const float> grads, std::size_t expected) {
  if (params.size() == expected && grads.size() == expected) return;
  std::fprintf(stderr, "ringtrain optimizer: %zu params and %zu grads, created for %zu\n",
               params.size(), grads.size(), expected);
  std::fflush(stderr);
  std::_Exit(kExitPermanent);
}

// The update kernels take __restrict parameters (GCC ignores it on local pointers): params,
// grads and state never alias, and saying so lets the loops vectorize without overlap checks.
// They are target clones (clones.h): every element goes through the same IEEE operations in
// every clone, so replicas on CPUs of different generations apply bit-identical updates.

// torch.optim.SGD (dampening 0, no Nesterov): buf = m·buf + g; p −= lr·buf. Its first step sets
// buf = g, which is what m·0 + g gives with the zero-initialized buffer.
RINGTRAIN_TARGET_CLONES void SgdUpdate(float* __restrict p, const float* __restrict g,
                                       float* __restrict buf, std::size_t count, float momentum,
                                       float weight_decay, float lr) {
  for (std::size_t i = 0; i < count; ++i) {
    buf[i] = momentum * buf[i] + (g[i] + weight_decay * p[i]);
    p[i] -= lr * buf[i];
  }
}

struct AdamCoefficients {
  float one_minus_b1;
  float b2;
  float one_minus_b2;
  float step_size;  // lr / bc1
  float inv_sqrt_bc2;
  float eps;
  float weight_decay;
};

RINGTRAIN_TARGET_CLONES void AdamUpdate(float* __restrict p, const float* __restrict grad,
                                        float* __restrict m, float* __restrict v, std::size_t count,
                                        const AdamCoefficients c) {
  for (std::size_t i = 0; i < count; ++i) {
    const float g = grad[i] + c.weight_decay * p[i];
    m[i] += c.one_minus_b1 * (g - m[i]);
    v[i] = c.b2 * v[i] + c.one_minus_b2 * g * g;
    p[i] -= c.step_size * m[i] / (std::sqrt(v[i]) * c.inv_sqrt_bc2 + c.eps);
  }
}

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& config, std::size_t num_params)
      : momentum_(static_cast<float>(config.momentum)),
        weight_decay_(static_cast<float>(config.weight_decay)),
        buf_(num_params) {}

  void Step(std::span<float> params, std::span<const float> grads, double lr) override {
    CheckSizes(params, grads, buf_.size());
    SgdUpdate(params.data(), grads.data(), buf_.data(), buf_.size(), momentum_, weight_decay_,
              static_cast<float>(lr));
    ++steps_;
  }

  std::span<float> state() override { return buf_; }
  std::int64_t steps() const override { return steps_; }
  void set_steps(std::int64_t steps) override { steps_ = steps; }

 private:
  float momentum_;
  float weight_decay_;
  std::vector<float> buf_;
  std::int64_t steps_ = 0;
};

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& config, std::size_t num_params)
      : config_(config), num_params_(num_params), state_(2 * num_params) {}

  // torch.optim.Adam without amsgrad: m lerps toward g, v = β2·v + (1−β2)·g²,
  // p −= (lr / bc1) · m / (√v / √bc2 + ε) with bc_i = 1 − β_i^t. The bias corrections are why a
  // resumed run must restore steps() along with the state.
  void Step(std::span<float> params, std::span<const float> grads, double lr) override {
    CheckSizes(params, grads, num_params_);
    ++steps_;
    const double t = static_cast<double>(steps_);
    const AdamCoefficients c{
        .one_minus_b1 = static_cast<float>(1.0 - config_.beta1),
        .b2 = static_cast<float>(config_.beta2),
        .one_minus_b2 = static_cast<float>(1.0 - config_.beta2),
        .step_size = static_cast<float>(lr / (1.0 - std::pow(config_.beta1, t))),
        .inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(config_.beta2, t))),
        .eps = static_cast<float>(config_.eps),
        .weight_decay = static_cast<float>(config_.weight_decay),
    };
    AdamUpdate(params.data(), grads.data(), state_.data(), state_.data() + num_params_, num_params_,
               c);
  }

  std::span<float> state() override { return state_; }  // m, then v
  std::int64_t steps() const override { return steps_; }
  void set_steps(std::int64_t steps) override { steps_ = steps; }

 private:
  OptimizerConfig config_;
  std::size_t num_params_;
  std::vector<float> state_;
  std::int64_t steps_ = 0;
};

Status CheckUnitInterval(const char* field, double value) {
  if (value >= 0.0 && value < 1.0) return Status::Ok();
  return InvalidArgument(std::string("optimizer ") + field + " must be in [0, 1), got " +
                         std::to_string(value));
}

}  // namespace

StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& config,
                                                       std::size_t num_params) {
  if (!(config.weight_decay >= 0.0)) {
    return InvalidArgument("optimizer weight_decay must be >= 0, got " +
                           std::to_string(config.weight_decay));
  }
  if (config.name == "sgd") {
    RETURN_IF_ERROR(CheckUnitInterval("momentum", config.momentum));
    return std::unique_ptr<Optimizer>(std::make_unique<Sgd>(config, num_params));
  }
  if (config.name == "adam") {
    RETURN_IF_ERROR(CheckUnitInterval("beta1", config.beta1));
    RETURN_IF_ERROR(CheckUnitInterval("beta2", config.beta2));
    if (!(config.eps > 0.0)) {
      return InvalidArgument("optimizer eps must be > 0, got " + std::to_string(config.eps));
    }
    return std::unique_ptr<Optimizer>(std::make_unique<Adam>(config, num_params));
  }
  return InvalidArgument("train.optimizer: unknown optimizer \"" + config.name +
                         "\" (known: sgd, adam)");
}

}  // namespace ringtrain::model
