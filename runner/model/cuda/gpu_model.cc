// GpuModel: model::Model's layer stack on the device. The layers, shapes and flat parameter
// layout come from model::PlanLayers and the initial weights from the CPU model built from the
// same spec (its layout checked against the plan), so the two compute the same function and
// checkpoints move between them.
//
// Numerics: GEMMs are cublasGemmEx with an explicit compute type (CUBLAS_COMPUTE_32F under
// CUBLAS_DEFAULT_MATH for kFp32, so TF32 is never used implicitly; CUBLAS_COMPUTE_32F_FAST_TF32
// under CUBLAS_TF32_TENSOR_OP_MATH for kTf32). Convolutions use cuDNN's GEMM-family algorithms
// only (no FFT or Winograd, whose transforms change the rounding), deterministic ones only (no
// atomics), with CUDNN_FMA_MATH for kFp32 and CUDNN_DEFAULT_MATH (TF32 tensor cores permitted,
// no FP16 down-conversion) for kTf32. Pooling, bias, activations, dropout, padding and the losses
// are our kernels, with layers.cc's tie-breaking and dropout masks. Keras' "same" padding with
// an odd total (the extra zero at the bottom/right) is an explicit pad kernel before a "valid"
// cuDNN convolution; symmetric padding is cuDNN's own. Every kernel is deterministic, so a
// captured step replays exactly.
//
// Capture safety: Create allocates everything (activations for max_batch, the argmax of each
// pool, dropout masks, padded inputs, two gradient scratch buffers, one cuDNN workspace sized for
// every batch size up to max_batch, and a cuBLAS workspace set with cublasSetWorkspace);
// ForwardBackward and Evaluate only set host-side cuDNN descriptors and enqueue work on the stream
// (the dropout seed is read from device memory, uploaded by SeedDropout).
#include "runner/model/cuda/gpu_model.h"

#include <cublas_v2.h>
#include <cudnn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "runner/cuda/cuda_util.h"
#include "runner/cuda/kernels.h"
#include "runner/cuda/pinned_upload.h"
#include "runner/model/cuda/cublas_loader.h"
#include "runner/model/layer_plan.h"

namespace ringtrain::gpu {
namespace {

// cuBLAS's recommendation for Hopper (4 MiB suffices elsewhere); a user workspace is what makes
// cuBLAS calls capturable without allocations.
constexpr std::size_t kCublasWorkspaceBytes = 32u << 20;

Status CublasStatus(cublasStatus_t s, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  // A status came from cuBLAS, so it is loaded.
  const StatusOr<const CublasApi*> api = Cublas();
  const std::string m =
      std::string(what) + ": " +
      (api.ok() ? std::string((*api)->status_name(s)) + " (" + (*api)->status_string(s) + ")"
                : "cuBLAS status " + std::to_string(static_cast<int>(s)));
  switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return DeviceOutOfMemory(m, 0);
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return FailedPrecondition(m);
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return Unavailable("GPU fault: " + m);
    default:
      return Internal(m);
  }
}

Status CudnnStatus(cudnnStatus_t s, std::string_view what) {
  if (s == CUDNN_STATUS_SUCCESS) return Status::Ok();
  std::string m = std::string(what) + ": " + cudnnGetErrorString(s);
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0] != '\0') m += std::string(" (") + detail + ")";
  if (s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) return DeviceOutOfMemory(m, 0);
  if (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED) {
    return Status(StatusCode::kResourceExhausted, "out of host memory: " + m);
  }
  switch (CUDNN_STATUS_CATEGORY(s)) {
    case 1000:  // uncategorized: not initialized, version mismatch, sublibrary loading
    case CUDNN_STATUS_NOT_SUPPORTED:
      return FailedPrecondition(m);
    case CUDNN_STATUS_EXECUTION_FAILED:
      return Unavailable("GPU fault: " + m);
    default:
      return Internal(m);
  }
}

#define RT_CUDNN_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(CudnnStatus((expr), #expr))

template <typename T, cudnnStatus_t (*Destroy)(T)>
struct CudnnDeleter {
  void operator()(T p) const {
    if (p != nullptr) Destroy(p);
  }
};
template <typename T, cudnnStatus_t (*Destroy)(T)>
using CudnnPtr = std::unique_ptr<std::remove_pointer_t<T>, CudnnDeleter<T, Destroy>>;
using CudnnHandle = CudnnPtr<cudnnHandle_t, cudnnDestroy>;
using TensorDesc = CudnnPtr<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnPtr<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = CudnnPtr<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;

struct CublasDeleter {
  void operator()(cublasHandle_t h) const {
    // A handle was created, so cuBLAS is loaded.
    if (h == nullptr) return;
    if (const StatusOr<const CublasApi*> api = Cublas(); api.ok()) (*api)->destroy(h);
  }
};
using CublasHandle = std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDeleter>;

using model::LayerKind;

// One convolution's cuDNN state: descriptors (x and y are re-set when the batch size changes),
// one convolution descriptor per direction (each carries its algorithm's math type), and the
// algorithms chosen at Create.
struct ConvState {
  TensorDesc x;
  TensorDesc y;
  FilterDesc w;
  ConvDesc fwd;
  ConvDesc bwd_data;
  ConvDesc bwd_filter;
  cudnnConvolutionFwdAlgo_t fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
};

// One planned layer (model::PlannedLayer) and its device state.
struct Layer {
  model::PlannedLayer plan;
  DeviceBuffer<float> buf;            // forward output (none for flatten, which aliases)
  const float* out_ptr = nullptr;     // forward output of the last batch
  DeviceBuffer<std::int32_t> argmax;  // max pool
  DeviceBuffer<float> mask;           // dropout: 0 or 1/(1 − rate) per element of the batch
  // conv with asymmetric padding: the padded input in forward, then (after the filter gradient
  // has read it) the gradient with respect to it, cropped into dx.
  DeviceBuffer<float> padded;
  std::unique_ptr<ConvState> conv;  // conv
  float* w = nullptr;               // weights then bias, in params()
  float* b = nullptr;
  float* dw = nullptr;
  float* db = nullptr;

  LayerKind kind() const { return plan.kind; }
  const model::Shape& in() const { return plan.in; }
  const model::Shape& out() const { return plan.out; }
  bool explicit_pad() const { return plan.kind == LayerKind::kConv2d && !plan.symmetric(); }
  // What cuDNN convolves: the padded input when the padding is ours.
  model::Shape conv_in() const { return explicit_pad() ? plan.padded_in() : plan.in; }
  int conv_pad() const { return explicit_pad() ? 0 : plan.pad_top; }
};

kernels::Activation ActivationOf(LayerKind kind) {
  switch (kind) {
    case LayerKind::kTanh:
      return kernels::Activation::kTanh;
    case LayerKind::kSigmoid:
      return kernels::Activation::kSigmoid;
    default:
      return kernels::Activation::kGelu;
  }
}

// The batch's targets: labels for a classifier, floats for a regression.
struct Targets {
  const std::int32_t* labels = nullptr;
  const float* values = nullptr;
};

// The GEMM-family algorithms: their rounding is that of a float32 dot product.
bool Allowed(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}
// ALGO_0 (and filter ALGO_3) accumulate with atomics: not deterministic.
bool Allowed(cudnnConvolutionBwdDataAlgo_t a) { return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1; }
bool Allowed(cudnnConvolutionBwdFilterAlgo_t a) { return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1; }

class CudaModel final : public GpuModel {
 public:
  CudaModel(model::LayerPlan plan, const model::ModelConfig& config, std::string label,
            MathMode math, cudaStream_t stream)
      : plan_(std::move(plan)),
        config_(config),
        label_(std::move(label)),
        math_(math),
        stream_(stream) {}

  Status Init(const model::Model& cpu_init, std::span<const float> cpu_params) {
    ranges_ = plan_.ranges;
    total_params_ = plan_.num_params;
    if (ranges_.size() != cpu_init.layer_ranges().size() || total_params_ != cpu_params.size()) {
      return Internal("GPU model layout differs from the CPU model's (" +
                      std::to_string(total_params_) + " vs " + std::to_string(cpu_params.size()) +
                      " parameters)");
    }
    for (std::size_t i = 0; i < ranges_.size(); ++i) {
      const model::ParamRange& cpu = cpu_init.layer_ranges()[i];
      if (ranges_[i].offset != cpu.offset || ranges_[i].count != cpu.count) {
        return Internal("GPU model layer range " + std::to_string(i) +
                        " differs from the CPU model's");
      }
    }
    for (const model::PlannedLayer& p : plan_.layers) {
      Layer layer;
      layer.plan = p;
      layers_.push_back(std::move(layer));
    }
    RETURN_IF_ERROR(params_.Allocate(total_params_));
    RETURN_IF_ERROR(grads_.Allocate(total_params_));
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params_.data(), cpu_params.data(),
                                            total_params_ * sizeof(float), cudaMemcpyHostToDevice,
                                            stream_));
    RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_));
    BindParams();

    // cuBLAS: the stream first (cublasSetStream resets the workspace), then our workspace.
    // Loaded here, not at the process's start (cublas_loader.h).
    ASSIGN_OR_RETURN(cublas_, Cublas());
    cublasHandle_t blas = nullptr;
    RETURN_IF_ERROR(CublasStatus(cublas_->create(&blas), "cublasCreate"));
    blas_.reset(blas);
    RETURN_IF_ERROR(CublasStatus(cublas_->set_stream(blas_.get(), stream_), "cublasSetStream"));
    RETURN_IF_ERROR(blas_workspace_.Allocate(kCublasWorkspaceBytes));
    RETURN_IF_ERROR(CublasStatus(
        cublas_->set_workspace(blas_.get(), blas_workspace_.data(), blas_workspace_.bytes()),
        "cublasSetWorkspace"));
    RETURN_IF_ERROR(CublasStatus(
        cublas_->set_math_mode(blas_.get(), math_ == MathMode::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                     : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode"));
    compute_type_ = math_ == MathMode::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

    const auto batch = static_cast<std::size_t>(config_.max_batch);
    // The loss writes its gradient to a scratch buffer even when there is no layer.
    std::size_t widest = static_cast<std::size_t>(plan_.outputs);
    bool has_conv = false;
    bool has_dropout = false;
    for (Layer& layer : layers_) {
      const std::size_t out_size = layer.out().size() * batch;
      widest = std::max({widest, layer.out().size(), layer.in().size()});
      switch (layer.kind()) {
        case LayerKind::kFlatten:
          break;  // aliases its input
        case LayerKind::kMaxPool2d:
          RETURN_IF_ERROR(layer.argmax.Allocate(out_size));
          RETURN_IF_ERROR(layer.buf.Allocate(out_size));
          break;
        case LayerKind::kDropout:
          has_dropout = true;
          RETURN_IF_ERROR(layer.mask.Allocate(out_size));
          RETURN_IF_ERROR(layer.buf.Allocate(out_size));
          break;
        case LayerKind::kConv2d:
          has_conv = true;
          if (layer.explicit_pad()) {
            RETURN_IF_ERROR(layer.padded.Allocate(layer.conv_in().size() * batch));
          }
          RETURN_IF_ERROR(layer.buf.Allocate(out_size));
          break;
        default:
          RETURN_IF_ERROR(layer.buf.Allocate(out_size));
          break;
      }
    }
    for (auto& s : scratch_) RETURN_IF_ERROR(s.Allocate(widest * batch));
    if (has_dropout) {
      RETURN_IF_ERROR(dropout_state_.Allocate(1));
      RETURN_IF_ERROR(dropout_upload_.Init());
      RETURN_IF_ERROR(SeedDropout(config_.dropout_seed));
    }

    if (has_conv) {
      cudnnHandle_t dnn = nullptr;
      RT_CUDNN_RETURN_IF_ERROR(cudnnCreate(&dnn));
      dnn_.reset(dnn);
      RT_CUDNN_RETURN_IF_ERROR(cudnnSetStream(dnn_.get(), stream_));
      std::size_t workspace = 0;
      const auto planning = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < layers_.size(); ++i) {
        if (layers_[i].kind() != LayerKind::kConv2d) continue;
        RETURN_IF_ERROR(PlanConv(layers_[i], /*needs_data_grad=*/i > 0, workspace));
      }
      const double planned_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - planning)
              .count();
      RETURN_IF_ERROR(conv_workspace_.Allocate(workspace));
      std::string algos;
      for (const Layer& layer : layers_) {
        if (layer.kind() != LayerKind::kConv2d) continue;
        algos += " [fwd " + std::to_string(static_cast<int>(layer.conv->fwd_algo)) + ", data " +
                 std::to_string(static_cast<int>(layer.conv->data_algo)) + ", filter " +
                 std::to_string(static_cast<int>(layer.conv->filter_algo)) + "]";
      }
      // The library found at run time may differ from the headers built against.
      spdlog::info(
          "GPU model {} ({}): cuDNN {} (built with {}) algorithms{}, workspace {} bytes, planned "
          "in {:.0f} ms",
          label_, math_ == MathMode::kTf32 ? "tf32" : "fp32", cudnnGetVersion(), CUDNN_VERSION,
          algos, workspace, planned_ms);
      RETURN_IF_ERROR(SetBatch(config_.max_batch));
    }
    // Create is synchronous: the caller may free cpu_params, and errors surface here.
    RT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  std::size_t num_params() const override { return total_params_; }
  const std::vector<model::ParamRange>& layer_ranges() const override { return ranges_; }
  bool regression() const override { return plan_.loss == model::Loss::kMse; }
  int outputs() const override { return plan_.outputs; }

  Status ForwardBackward(const float* x, const std::int32_t* y, int n, double* loss_accum,
                         const model::GradReadyFn& on_ready) override {
    if (regression()) return InvalidArgument("ForwardBackward: labels given to an mse model");
    return Train(x, Targets{y, nullptr}, n, loss_accum, on_ready);
  }
  Status ForwardBackward(const float* x, const float* targets, int n, double* loss_accum,
                         const model::GradReadyFn& on_ready) override {
    if (!regression()) {
      return InvalidArgument("ForwardBackward: float targets given to a classifier");
    }
    return Train(x, Targets{nullptr, targets}, n, loss_accum, on_ready);
  }
  Status Evaluate(const float* x, const std::int32_t* y, int n, double* sums) override {
    if (regression()) return InvalidArgument("Evaluate: labels given to an mse model");
    return Eval(x, Targets{y, nullptr}, n, sums);
  }
  Status Evaluate(const float* x, const float* targets, int n, double* sums) override {
    if (!regression()) return InvalidArgument("Evaluate: float targets given to a classifier");
    return Eval(x, Targets{nullptr, targets}, n, sums);
  }

  Status SeedDropout(std::uint64_t seed) override {
    if (dropout_state_.data() == nullptr) return Status::Ok();
    kernels::DropoutState state;
    state.seed = seed;
    return dropout_upload_.Enqueue(state, dropout_state_.data(), stream_);
  }

 private:
  Status Train(const float* x, Targets t, int n, double* loss_accum,
               const model::GradReadyFn& on_ready) {
    if (n < 1 || n > config_.max_batch) {
      return InvalidArgument("ForwardBackward: batch of " + std::to_string(n) +
                             " samples outside [1, max_batch=" + std::to_string(config_.max_batch) +
                             "]");
    }
    if (x == nullptr || (t.labels == nullptr && t.values == nullptr) || loss_accum == nullptr) {
      return InvalidArgument("ForwardBackward: null device pointer");
    }
    RETURN_IF_ERROR(SetBatch(n));
    RETURN_IF_ERROR(Forward(x, n, /*training=*/true));
    float* dy = scratch_[0].data();
    const float* logits = layers_.empty() ? x : layers_.back().out_ptr;
    RETURN_IF_ERROR(ApplyLoss(logits, t, n, dy, loss_accum, nullptr));
    for (std::size_t i = layers_.size(); i-- > 0;) {
      Layer& layer = layers_[i];
      const float* input = i == 0 ? x : layers_[i - 1].out_ptr;
      float* dx = nullptr;
      if (i > 0) {
        dx = layer.kind() == LayerKind::kFlatten
                 ? dy
                 : (dy == scratch_[0].data() ? scratch_[1].data() : scratch_[0].data());
      }
      RETURN_IF_ERROR(ParamGrads(layer, input, dy, n));
      if (layer.plan.range >= 0 && on_ready) {
        on_ready(ranges_[static_cast<std::size_t>(layer.plan.range)]);
      }
      if (dx != nullptr) {
        RETURN_IF_ERROR(InputGrad(layer, input, dy, dx, n));
        dy = dx;
      }
    }
    return Status::Ok();
  }

  Status Eval(const float* x, Targets t, int n, double* sums) {
    if (n == 0) return Status::Ok();
    if (n < 0 || n > config_.max_batch) {
      return InvalidArgument("Evaluate: batch of " + std::to_string(n) +
                             " samples outside [0, max_batch=" + std::to_string(config_.max_batch) +
                             "]");
    }
    if (x == nullptr || (t.labels == nullptr && t.values == nullptr) || sums == nullptr) {
      return InvalidArgument("Evaluate: null device pointer");
    }
    RETURN_IF_ERROR(SetBatch(n));
    RETURN_IF_ERROR(Forward(x, n, /*training=*/false));
    const float* logits = layers_.empty() ? x : layers_.back().out_ptr;
    return ApplyLoss(logits, t, n, nullptr, nullptr, sums);
  }

  Status ApplyLoss(const float* out, Targets t, int n, float* dout, double* loss_accum,
                   double* sums) {
    if (t.values != nullptr) {
      RT_CUDA_RETURN_IF_ERROR(kernels::MeanSquaredError(out, t.values, n, plan_.outputs, dout,
                                                        loss_accum, sums, stream_));
    } else {
      RT_CUDA_RETURN_IF_ERROR(kernels::SoftmaxCrossEntropy(out, t.labels, n, plan_.outputs, dout,
                                                           loss_accum, sums, stream_));
    }
    return Status::Ok();
  }

  void BindParams() {
    for (Layer& layer : layers_) {
      if (layer.plan.range < 0) continue;
      const model::ParamRange& r = ranges_[static_cast<std::size_t>(layer.plan.range)];
      const std::size_t w_count = layer.plan.num_params - static_cast<std::size_t>(layer.out().c);
      layer.w = params_.data() + r.offset;
      layer.b = layer.w + w_count;
      layer.dw = grads_.data() + r.offset;
      layer.db = layer.dw + w_count;
    }
  }

  // ---- cuDNN planning ----

  Status SetConvBatch(ConvState& c, const Layer& layer, int n) {
    const model::Shape in = layer.conv_in();
    const model::Shape& out = layer.out();
    RT_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(c.x.get(), CUDNN_TENSOR_NCHW,
                                                        CUDNN_DATA_FLOAT, n, in.c, in.h, in.w));
    RT_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(c.y.get(), CUDNN_TENSOR_NCHW,
                                                        CUDNN_DATA_FLOAT, n, out.c, out.h, out.w));
    return Status::Ok();
  }

  Status SetBatch(int n) {
    if (n == current_batch_) return Status::Ok();
    for (Layer& layer : layers_) {
      if (layer.kind() == LayerKind::kConv2d) {
        RETURN_IF_ERROR(SetConvBatch(*layer.conv, layer, n));
      }
    }
    current_batch_ = n;
    return Status::Ok();
  }

  bool MathTypeAllowed(cudnnMathType_t t) const {
    if (math_ == MathMode::kFp32) return t == CUDNN_FMA_MATH || t == CUDNN_DEFAULT_MATH;
    return t != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  }

  // The math type a convolution descriptor runs with: always FMA-only for kFp32; for kTf32 the
  // one the heuristic reported for the algorithm.
  cudnnMathType_t ExecMathType(cudnnMathType_t reported) const {
    return math_ == MathMode::kFp32 ? CUDNN_FMA_MATH : reported;
  }
  cudnnMathType_t QueryMathType() const {
    return math_ == MathMode::kFp32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
  }

  // Picks the first heuristic candidate that is allowed, deterministic and works (workspace
  // query succeeds) for every batch size in [1, max_batch]; `ws(n, algo, &bytes)` sets the
  // descriptors for n and queries. Raises `workspace` to the largest size seen.
  template <typename Algo, typename Perf, typename WorkspaceFn>
  Status Choose(const char* what, const std::vector<Perf>& perf, Algo fallback,
                cudnnConvolutionDescriptor_t desc, WorkspaceFn ws, Algo& chosen,
                std::size_t& workspace) {
    std::vector<std::pair<Algo, cudnnMathType_t>> candidates;
    for (const Perf& p : perf) {
      if (p.status != CUDNN_STATUS_SUCCESS || !Allowed(p.algo) ||
          p.determinism != CUDNN_DETERMINISTIC || !MathTypeAllowed(p.mathType)) {
        continue;
      }
      candidates.emplace_back(p.algo, p.mathType);
    }
    candidates.emplace_back(fallback, QueryMathType());
    std::string tried;
    for (const auto& [algo, math] : candidates) {
      RT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(desc, ExecMathType(math)));
      std::size_t most = 0;
      Status failed = Status::Ok();
      for (int n = 1; n <= config_.max_batch && failed.ok(); ++n) {
        std::size_t bytes = 0;
        failed = ws(n, algo, &bytes);
        most = std::max(most, bytes);
      }
      if (failed.ok()) {
        chosen = algo;
        workspace = std::max(workspace, most);
        return Status::Ok();
      }
      tried += " [algo " + std::to_string(static_cast<int>(algo)) + ": " + failed.message() + "]";
    }
    return FailedPrecondition(std::string("cuDNN has no deterministic GEMM-based ") + what +
                              " algorithm for this model:" + tried);
  }

  Status PlanConv(Layer& layer, bool needs_data_grad, std::size_t& workspace) {
    layer.conv = std::make_unique<ConvState>();
    ConvState& c = *layer.conv;
    cudnnTensorDescriptor_t t = nullptr;
    RT_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&t));
    c.x.reset(t);
    RT_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&t));
    c.y.reset(t);
    cudnnFilterDescriptor_t f = nullptr;
    RT_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&f));
    c.w.reset(f);
    const model::PlannedLayer& p = layer.plan;
    RT_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
        c.w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p.out.c, p.in.c, p.kernel, p.kernel));
    for (ConvDesc* d : {&c.fwd, &c.bwd_data, &c.bwd_filter}) {
      cudnnConvolutionDescriptor_t cd = nullptr;
      RT_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&cd));
      d->reset(cd);
      // Cross-correlation, like torch's Conv2d and layers.cc's im2col.
      RT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
          cd, layer.conv_pad(), layer.conv_pad(), p.stride, p.stride, 1, 1, CUDNN_CROSS_CORRELATION,
          CUDNN_DATA_FLOAT));
      RT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(cd, QueryMathType()));
    }
    RETURN_IF_ERROR(SetConvBatch(c, layer, config_.max_batch));
    int on = 0, oc = 0, oh = 0, ow = 0;
    RT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(c.fwd.get(), c.x.get(),
                                                                   c.w.get(), &on, &oc, &oh, &ow));
    if (on != config_.max_batch || oc != p.out.c || oh != p.out.h || ow != p.out.w) {
      return Internal("cuDNN convolution output shape differs from the CPU layer's");
    }
    cudnnHandle_t h = dnn_.get();

    {
      int max_count = 0;
      RT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(max_count));
      int returned = 0;
      // Without a heuristic answer, only the fallback algorithm is tried.
      if (cudnnGetConvolutionForwardAlgorithm_v7(h, c.x.get(), c.w.get(), c.fwd.get(), c.y.get(),
                                                 max_count, &returned,
                                                 perf.data()) != CUDNN_STATUS_SUCCESS) {
        returned = 0;
      }
      perf.resize(static_cast<std::size_t>(std::clamp(returned, 0, max_count)));
      RETURN_IF_ERROR(Choose(
          "forward convolution", perf, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, c.fwd.get(),
          [&](int n, cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) -> Status {
            RETURN_IF_ERROR(SetConvBatch(c, layer, n));
            return CudnnStatus(cudnnGetConvolutionForwardWorkspaceSize(
                                   h, c.x.get(), c.w.get(), c.fwd.get(), c.y.get(), algo, bytes),
                               "cudnnGetConvolutionForwardWorkspaceSize");
          },
          c.fwd_algo, workspace));
    }
    if (needs_data_grad) {
      int max_count = 0;
      RT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(max_count));
      int returned = 0;
      RETURN_IF_ERROR(SetConvBatch(c, layer, config_.max_batch));
      // Without a heuristic answer, only the fallback algorithm is tried.
      if (cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c.w.get(), c.y.get(), c.bwd_data.get(),
                                                      c.x.get(), max_count, &returned,
                                                      perf.data()) != CUDNN_STATUS_SUCCESS) {
        returned = 0;
      }
      perf.resize(static_cast<std::size_t>(std::clamp(returned, 0, max_count)));
      RETURN_IF_ERROR(Choose(
          "backward-data convolution", perf, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, c.bwd_data.get(),
          [&](int n, cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) -> Status {
            RETURN_IF_ERROR(SetConvBatch(c, layer, n));
            return CudnnStatus(
                cudnnGetConvolutionBackwardDataWorkspaceSize(
                    h, c.w.get(), c.y.get(), c.bwd_data.get(), c.x.get(), algo, bytes),
                "cudnnGetConvolutionBackwardDataWorkspaceSize");
          },
          c.data_algo, workspace));
    }
    {
      int max_count = 0;
      RT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(max_count));
      int returned = 0;
      RETURN_IF_ERROR(SetConvBatch(c, layer, config_.max_batch));
      // Without a heuristic answer, only the fallback algorithm is tried.
      if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c.x.get(), c.y.get(), c.bwd_filter.get(),
                                                        c.w.get(), max_count, &returned,
                                                        perf.data()) != CUDNN_STATUS_SUCCESS) {
        returned = 0;
      }
      perf.resize(static_cast<std::size_t>(std::clamp(returned, 0, max_count)));
      RETURN_IF_ERROR(Choose(
          "backward-filter convolution", perf, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
          c.bwd_filter.get(),
          [&](int n, cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) -> Status {
            RETURN_IF_ERROR(SetConvBatch(c, layer, n));
            return CudnnStatus(
                cudnnGetConvolutionBackwardFilterWorkspaceSize(
                    h, c.x.get(), c.y.get(), c.bwd_filter.get(), c.w.get(), algo, bytes),
                "cudnnGetConvolutionBackwardFilterWorkspaceSize");
          },
          c.filter_algo, workspace));
    }
    current_batch_ = -1;  // the descriptors were left at some batch size: re-set on next use
    return Status::Ok();
  }

  // ---- compute ----

  // Row-major C[m×n] = op(A)·op(B) through column-major cuBLAS (see the callers).
  Status Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a,
              int lda, const float* b, int ldb, float beta, float* c, int ldc) {
    const float alpha = 1.0f;
    return CublasStatus(
        cublas_->gemm_ex(blas_.get(), ta, tb, m, n, k, &alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F,
                         ldb, &beta, c, CUDA_R_32F, ldc, compute_type_, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }

  Status Forward(const float* x, int n, bool training) {
    const float* input = x;
    bool dropped = false;
    for (Layer& layer : layers_) {
      const model::PlannedLayer& p = layer.plan;
      float* out = layer.buf.data();
      const std::int64_t rows = n;
      const std::int64_t count = rows * static_cast<std::int64_t>(p.in.size());
      switch (p.kind) {
        case LayerKind::kDense: {
          const int in = static_cast<int>(p.in.size());
          const int outf = p.out.c;
          // Y (n×out, row-major) is column-major Yᵀ (out×n) = Wᵀ-view(in×out)ᵀ · Xᵀ-view(in×n).
          RETURN_IF_ERROR(
              Gemm(CUBLAS_OP_T, CUBLAS_OP_N, outf, n, in, layer.w, in, input, in, 0.0f, out, outf));
          RT_CUDA_RETURN_IF_ERROR(kernels::AddBias(out, layer.b, rows, outf, 1, stream_));
          break;
        }
        case LayerKind::kConv2d: {
          ConvState& c = *layer.conv;
          const float* conv_x = input;
          if (layer.explicit_pad()) {
            RT_CUDA_RETURN_IF_ERROR(kernels::Pad2d(input, layer.padded.data(), n, p.in.c, p.in.h,
                                                   p.in.w, p.pad_top, p.pad_bottom, p.pad_left,
                                                   p.pad_right, stream_));
            conv_x = layer.padded.data();
          }
          const float one = 1.0f;
          const float zero = 0.0f;
          RT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
              dnn_.get(), &one, c.x.get(), conv_x, c.w.get(), layer.w, c.fwd.get(), c.fwd_algo,
              conv_workspace_.data(), conv_workspace_.bytes(), &zero, c.y.get(), out));
          RT_CUDA_RETURN_IF_ERROR(kernels::AddBias(
              out, layer.b, rows, p.out.c, static_cast<std::int64_t>(p.out.h) * p.out.w, stream_));
          break;
        }
        case LayerKind::kMaxPool2d:
        case LayerKind::kAvgPool2d: {
          const bool max = p.kind == LayerKind::kMaxPool2d;
          RT_CUDA_RETURN_IF_ERROR(
              kernels::Pool2dForward(input, out, max ? layer.argmax.data() : nullptr, n, p.in.c,
                                     p.in.h, p.in.w, p.pool, p.stride, max, stream_));
          break;
        }
        case LayerKind::kRelu:
          RT_CUDA_RETURN_IF_ERROR(kernels::ReluForward(input, out, count, stream_));
          break;
        case LayerKind::kTanh:
        case LayerKind::kSigmoid:
        case LayerKind::kGelu:
          RT_CUDA_RETURN_IF_ERROR(
              kernels::ActivationForward(ActivationOf(p.kind), input, out, count, stream_));
          break;
        case LayerKind::kDropout:
          if (!training) {
            layer.out_ptr = input;  // evaluation: the identity
            continue;
          }
          RT_CUDA_RETURN_IF_ERROR(
              kernels::DropoutForward(input, out, layer.mask.data(), count, p.rate,
                                      static_cast<float>(1.0 / (1.0 - p.rate)),
                                      dropout_state_.data(), p.dropout_offset, stream_));
          dropped = true;
          break;
        case LayerKind::kFlatten:
        case LayerKind::kSoftmax:  // never planned (folded into the loss)
          layer.out_ptr = input;
          continue;
      }
      layer.out_ptr = out;
      input = out;
    }
    // The CPU layers count their training forwards since the seed was set: so does the device.
    if (dropped) RT_CUDA_RETURN_IF_ERROR(kernels::DropoutAdvance(dropout_state_.data(), stream_));
    return Status::Ok();
  }

  // This layer's parameter gradients (enqueued before on_ready).
  Status ParamGrads(Layer& layer, const float* input, const float* dy, int n) {
    const model::PlannedLayer& p = layer.plan;
    switch (p.kind) {
      case LayerKind::kDense: {
        const int in = static_cast<int>(p.in.size());
        const int outf = p.out.c;
        // dW (out×in, row-major) is column-major dWᵀ (in×out) = Xᵀ-view(in×n) · dYᵀ-view(out×n)ᵀ.
        RETURN_IF_ERROR(
            Gemm(CUBLAS_OP_N, CUBLAS_OP_T, in, outf, n, input, in, dy, outf, 0.0f, layer.dw, in));
        RT_CUDA_RETURN_IF_ERROR(kernels::BiasGrad(dy, layer.db, n, outf, 1, stream_));
        break;
      }
      case LayerKind::kConv2d: {
        ConvState& c = *layer.conv;
        const float one = 1.0f;
        const float zero = 0.0f;
        const float* conv_x = layer.explicit_pad() ? layer.padded.data() : input;
        RT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
            dnn_.get(), &one, c.x.get(), conv_x, c.y.get(), dy, c.bwd_filter.get(), c.filter_algo,
            conv_workspace_.data(), conv_workspace_.bytes(), &zero, c.w.get(), layer.dw));
        RT_CUDA_RETURN_IF_ERROR(kernels::BiasGrad(
            dy, layer.db, n, p.out.c, static_cast<std::int64_t>(p.out.h) * p.out.w, stream_));
        break;
      }
      default:
        break;
    }
    return Status::Ok();
  }

  // The gradient with respect to this layer's input (dx may equal dy only for flatten).
  Status InputGrad(Layer& layer, const float* input, const float* dy, float* dx, int n) {
    const model::PlannedLayer& p = layer.plan;
    const std::int64_t count =
        static_cast<std::int64_t>(n) * static_cast<std::int64_t>(p.in.size());
    switch (p.kind) {
      case LayerKind::kDense: {
        const int in = static_cast<int>(p.in.size());
        const int outf = p.out.c;
        // dX (n×in) is column-major dXᵀ (in×n) = Wᵀ-view(in×out) · dYᵀ-view(out×n).
        RETURN_IF_ERROR(
            Gemm(CUBLAS_OP_N, CUBLAS_OP_N, in, n, outf, layer.w, in, dy, outf, 0.0f, dx, in));
        break;
      }
      case LayerKind::kConv2d: {
        ConvState& c = *layer.conv;
        const float one = 1.0f;
        const float zero = 0.0f;
        // With our padding, the gradient of the padded input lands where that input was (the
        // filter gradient, enqueued before, has read it), and its interior is dx.
        float* conv_dx = layer.explicit_pad() ? layer.padded.data() : dx;
        RT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
            dnn_.get(), &one, c.w.get(), layer.w, c.y.get(), dy, c.bwd_data.get(), c.data_algo,
            conv_workspace_.data(), conv_workspace_.bytes(), &zero, c.x.get(), conv_dx));
        if (layer.explicit_pad()) {
          RT_CUDA_RETURN_IF_ERROR(kernels::Crop2d(conv_dx, dx, n, p.in.c, p.in.h, p.in.w, p.pad_top,
                                                  p.pad_bottom, p.pad_left, p.pad_right, stream_));
        }
        break;
      }
      case LayerKind::kMaxPool2d:
      case LayerKind::kAvgPool2d: {
        const bool max = p.kind == LayerKind::kMaxPool2d;
        RT_CUDA_RETURN_IF_ERROR(kernels::Pool2dBackward(dy, max ? layer.argmax.data() : nullptr, dx,
                                                        n, p.in.c, p.in.h, p.in.w, p.pool, p.stride,
                                                        max, stream_));
        break;
      }
      case LayerKind::kRelu:
        RT_CUDA_RETURN_IF_ERROR(kernels::ReluBackward(input, dy, dx, count, stream_));
        break;
      case LayerKind::kTanh:
      case LayerKind::kSigmoid:
      case LayerKind::kGelu:
        RT_CUDA_RETURN_IF_ERROR(
            kernels::ActivationBackward(ActivationOf(p.kind), input, dy, dx, count, stream_));
        break;
      case LayerKind::kDropout:
        RT_CUDA_RETURN_IF_ERROR(kernels::Multiply(dy, layer.mask.data(), dx, count, stream_));
        break;
      case LayerKind::kFlatten:
      case LayerKind::kSoftmax:
        break;  // dx aliases dy
    }
    return Status::Ok();
  }

  model::LayerPlan plan_;
  model::ModelConfig config_;
  std::string label_;  // for the log: the preset's name, or "layer list"
  MathMode math_;
  cudaStream_t stream_;
  std::vector<Layer> layers_;
  std::vector<model::ParamRange> ranges_;
  std::size_t total_params_ = 0;
  DeviceBuffer<float> params_;
  DeviceBuffer<float> grads_;
  DeviceBuffer<float> scratch_[2];                     // d(loss)/d(activation), ping-pong
  DeviceBuffer<kernels::DropoutState> dropout_state_;  // with dropout only
  PinnedUpload<kernels::DropoutState> dropout_upload_;
  const CublasApi* cublas_ = nullptr;
  CublasHandle blas_;
  cublasComputeType_t compute_type_ = CUBLAS_COMPUTE_32F;
  DeviceBuffer<unsigned char> blas_workspace_;
  CudnnHandle dnn_;
  DeviceBuffer<unsigned char> conv_workspace_;
  int current_batch_ = -1;  // the batch size the cuDNN descriptors are set for
};

StatusOr<std::unique_ptr<GpuModel>> CreateFromSpec(const model::ModelSpec& spec,
                                                   const model::ModelConfig& config,
                                                   std::string label, MathMode math,
                                                   cudaStream_t stream) {
  if (config.max_batch < 1) {
    return InvalidArgument("model max_batch must be positive, got " +
                           std::to_string(config.max_batch));
  }
  ASSIGN_OR_RETURN(model::LayerPlan plan, model::PlanLayers(spec));
  // The CPU model validates the spec and draws the initial weights; they do not depend on
  // max_batch, so a batch of one keeps its activation buffers small.
  model::ModelConfig cpu_config = config;
  cpu_config.max_batch = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> cpu, model::Model::Create(spec, cpu_config));
  auto gpu = std::make_unique<CudaModel>(std::move(plan), config, std::move(label), math, stream);
  RETURN_IF_ERROR(gpu->Init(*cpu, cpu->params()).WithContext("creating the GPU model"));
  return std::unique_ptr<GpuModel>(std::move(gpu));
}

}  // namespace

StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(const model::ModelConfig& config,
                                                     MathMode math, cudaStream_t stream) {
  ASSIGN_OR_RETURN(
      const model::ModelSpec spec,
      model::PresetSpec(config.name, model::Shape{config.channels, config.height, config.width},
                        config.classes, config.hidden));
  return CreateFromSpec(spec, config, config.name, math, stream);
}

StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(const model::ModelSpec& spec,
                                                     const model::ModelConfig& config,
                                                     MathMode math, cudaStream_t stream) {
  return CreateFromSpec(spec, config, "layer list", math, stream);
}

}  // namespace ringtrain::gpu
