// GpuOptimizer: optimizer.cc's SGD-momentum and Adam as one fused kernel each (kernels.cu),
// with the same float formulas, rounded operation by operation, so the GPU and CPU updates
// agree bit for bit given the same inputs. The per-step scalars are computed on the host
// exactly as optimizer.cc computes them and copied into a small device struct by SetStep (from
// a ring of pinned slots, see pinned_upload.h); Step only launches the kernel, which reads
// them, so it can sit in a CUDA graph.
#include "runner/model/cuda/gpu_optimizer.h"

#include <cmath>
#include <string>

#include "runner/cuda/cuda_util.h"
#include "runner/cuda/kernels.h"
#include "runner/cuda/pinned_upload.h"

namespace ringtrain::gpu {
namespace {

class CudaOptimizer final : public GpuOptimizer {
 public:
  CudaOptimizer(const model::OptimizerConfig& config, std::size_t num_params, cudaStream_t stream)
      : config_(config), num_params_(num_params), stream_(stream), adam_(config.name == "adam") {}

  Status Init() {
    const std::size_t state_size = adam_ ? 2 * num_params_ : num_params_;
    RETURN_IF_ERROR(state_.Allocate(state_size));
    RETURN_IF_ERROR(scalars_.Allocate(1));
    RETURN_IF_ERROR(upload_.Init());
    if (state_.size() > 0) {
      RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(state_.data(), 0, state_.bytes(), stream_));
    }
    RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scalars_.data(), 0, scalars_.bytes(), stream_));
    int device = 0;
    RT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
    int sms = 0;
    RT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    // A memory-bound elementwise pass: a few resident blocks per SM saturate HBM.
    max_blocks_ = sms > 0 ? 8 * sms : 0;
    RT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  Status SetStep(double lr) override {
    const std::int64_t next = steps_ + 1;
    kernels::StepScalars scalars;
    scalars.lr = static_cast<float>(lr);
    if (adam_) {
      // optimizer.cc's AdamCoefficients, computed the same way in double.
      const double t = static_cast<double>(next);
      scalars.step_size = static_cast<float>(lr / (1.0 - std::pow(config_.beta1, t)));
      scalars.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(config_.beta2, t)));
    }
    RETURN_IF_ERROR(upload_.Enqueue(scalars, scalars_.data(), stream_));
    steps_ = next;
    return Status::Ok();
  }

  Status Step(float* params, const float* grads) override {
    if (num_params_ == 0) return Status::Ok();
    if (params == nullptr || grads == nullptr) {
      return InvalidArgument("GpuOptimizer::Step: null device pointer");
    }
    if (adam_) {
      const kernels::AdamConstants c{
          .one_minus_b1 = static_cast<float>(1.0 - config_.beta1),
          .b2 = static_cast<float>(config_.beta2),
          .one_minus_b2 = static_cast<float>(1.0 - config_.beta2),
          .eps = static_cast<float>(config_.eps),
          .weight_decay = static_cast<float>(config_.weight_decay),
      };
      RT_CUDA_RETURN_IF_ERROR(kernels::AdamStep(params, grads, state_.data(),
                                                state_.data() + num_params_, num_params_, c,
                                                scalars_.data(), max_blocks_, stream_));
    } else {
      RT_CUDA_RETURN_IF_ERROR(kernels::SgdStep(
          params, grads, state_.data(), num_params_, static_cast<float>(config_.momentum),
          static_cast<float>(config_.weight_decay), scalars_.data(), max_blocks_, stream_));
    }
    return Status::Ok();
  }

  float* state() override { return state_.data(); }
  std::size_t state_size() const override { return state_.size(); }
  std::int64_t steps() const override { return steps_; }
  void set_steps(std::int64_t steps) override { steps_ = steps; }

 private:
  model::OptimizerConfig config_;
  std::size_t num_params_;
  cudaStream_t stream_;
  bool adam_;
  DeviceBuffer<float> state_;  // sgd: momentum buffer; adam: m then v
  DeviceBuffer<kernels::StepScalars> scalars_;
  PinnedUpload<kernels::StepScalars> upload_;
  std::int64_t steps_ = 0;
  int max_blocks_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<GpuOptimizer>> GpuOptimizer::Create(const model::OptimizerConfig& config,
                                                             std::size_t num_params,
                                                             cudaStream_t stream) {
  // The CPU optimizer validates the config (it allocates nothing for zero parameters).
  ASSIGN_OR_RETURN(std::unique_ptr<model::Optimizer> check, model::Optimizer::Create(config, 0));
  (void)check;
  auto opt = std::make_unique<CudaOptimizer>(config, num_params, stream);
  RETURN_IF_ERROR(opt->Init().WithContext("creating the GPU optimizer"));
  return std::unique_ptr<GpuOptimizer>(std::move(opt));
}

}  // namespace ringtrain::gpu
