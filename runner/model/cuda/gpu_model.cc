// GpuModel: model::Model's layer stack on the device. The layers, shapes, flat parameter
// layout and initial weights come from the CPU model (built with the same config and checked
// against this stack), so the two compute the same function and checkpoints move between them.
//
// Numerics: GEMMs are cublasGemmEx with an explicit compute type (CUBLAS_COMPUTE_32F under
// CUBLAS_DEFAULT_MATH for kFp32, so TF32 is never used implicitly; CUBLAS_COMPUTE_32F_FAST_TF32
// under CUBLAS_TF32_TENSOR_OP_MATH for kTf32). Convolutions use cuDNN's GEMM-family algorithms
// only (no FFT or Winograd, whose transforms change the rounding), deterministic ones only (no
// atomics), with CUDNN_FMA_MATH for kFp32 and CUDNN_DEFAULT_MATH (TF32 tensor cores permitted,
// no FP16 down-conversion) for kTf32. Pooling, bias, ReLU and the loss are our kernels, with
// layers.cc's tie-breaking. Every kernel is deterministic, so a captured step replays exactly.
//
// Capture safety: Create allocates everything (activations for max_batch, the argmax of each
// pool, two gradient scratch buffers, one cuDNN workspace sized for every batch size up to
// max_batch, and a cuBLAS workspace set with cublasSetWorkspace); ForwardBackward and Evaluate
// only set host-side cuDNN descriptors and enqueue work on the stream.
#include "runner/model/cuda/gpu_model.h"

#include <cublas_v2.h>
#include <cudnn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "runner/cuda/cuda_util.h"
#include "runner/cuda/kernels.h"
#include "runner/model/layers.h"

namespace ringtrain::gpu {
namespace {

// model.cc's cnn (Create checks the resulting layout against the CPU model's).
constexpr int kCnnConv1Channels = 32;
constexpr int kCnnConv2Channels = 64;
constexpr int kCnnKernel = 3;
constexpr int kCnnPadding = 1;
constexpr int kCnnDense = 128;

// cuBLAS's recommendation for Hopper (4 MiB suffices elsewhere); a user workspace is what makes
// cuBLAS calls capturable without allocations.
constexpr std::size_t kCublasWorkspaceBytes = 32u << 20;

Status CublasStatus(cublasStatus_t s, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  const std::string m =
      std::string(what) + ": " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")";
  switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return Status(StatusCode::kResourceExhausted, "GPU out of memory: " + m);
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
  if (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
    return Status(StatusCode::kResourceExhausted, "GPU out of memory: " + m);
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

#define RT_CUBLAS_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(CublasStatus((expr), #expr))
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
    if (h != nullptr) cublasDestroy(h);
  }
};
using CublasHandle = std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDeleter>;

enum class Kind { kLinear, kRelu, kConv, kPool, kFlatten };

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

struct Layer {
  Kind kind = Kind::kRelu;
  model::Shape in;
  model::Shape out;
  int kernel = 0;   // conv
  int padding = 0;  // conv
  int range = -1;   // index into ranges_, or -1 without parameters
  std::size_t num_params = 0;
  DeviceBuffer<float> buf;            // forward output (none for Flatten, which aliases)
  const float* out_ptr = nullptr;     // forward output of the last batch
  DeviceBuffer<std::int32_t> argmax;  // pool
  std::unique_ptr<ConvState> conv;    // conv
  float* w = nullptr;                 // weights then bias, in params()
  float* b = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
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
  CudaModel(const model::ModelConfig& config, MathMode math, cudaStream_t stream)
      : config_(config), math_(math), stream_(stream) {}

  Status Init(const model::Model& cpu_init, std::span<const float> cpu_params) {
    RETURN_IF_ERROR(BuildLayers());
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
    RETURN_IF_ERROR(params_.Allocate(total_params_));
    RETURN_IF_ERROR(grads_.Allocate(total_params_));
    RT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params_.data(), cpu_params.data(),
                                            total_params_ * sizeof(float), cudaMemcpyHostToDevice,
                                            stream_));
    RT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_));
    BindParams();

    // cuBLAS: the stream first (cublasSetStream resets the workspace), then our workspace.
    cublasHandle_t blas = nullptr;
    RT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas));
    blas_.reset(blas);
    RT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas_.get(), stream_));
    RETURN_IF_ERROR(blas_workspace_.Allocate(kCublasWorkspaceBytes));
    RT_CUBLAS_RETURN_IF_ERROR(
        cublasSetWorkspace(blas_.get(), blas_workspace_.data(), blas_workspace_.bytes()));
    RT_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(
        blas_.get(), math_ == MathMode::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    compute_type_ = math_ == MathMode::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

    std::size_t widest = 0;
    for (Layer& layer : layers_) {
      const std::size_t out_size = layer.out.size() * static_cast<std::size_t>(config_.max_batch);
      widest = std::max(widest, layer.out.size());
      if (layer.kind != Kind::kFlatten) RETURN_IF_ERROR(layer.buf.Allocate(out_size));
      if (layer.kind == Kind::kPool) RETURN_IF_ERROR(layer.argmax.Allocate(out_size));
    }
    for (auto& s : scratch_) {
      RETURN_IF_ERROR(s.Allocate(widest * static_cast<std::size_t>(config_.max_batch)));
    }

    bool has_conv = false;
    for (const Layer& layer : layers_) has_conv |= layer.kind == Kind::kConv;
    if (has_conv) {
      cudnnHandle_t dnn = nullptr;
      RT_CUDNN_RETURN_IF_ERROR(cudnnCreate(&dnn));
      dnn_.reset(dnn);
      RT_CUDNN_RETURN_IF_ERROR(cudnnSetStream(dnn_.get(), stream_));
      std::size_t workspace = 0;
      for (std::size_t i = 0; i < layers_.size(); ++i) {
        if (layers_[i].kind != Kind::kConv) continue;
        RETURN_IF_ERROR(PlanConv(layers_[i], /*needs_data_grad=*/i > 0, workspace));
      }
      RETURN_IF_ERROR(conv_workspace_.Allocate(workspace));
      std::string plan;
      for (const Layer& layer : layers_) {
        if (layer.kind != Kind::kConv) continue;
        plan += " [fwd " + std::to_string(static_cast<int>(layer.conv->fwd_algo)) + ", data " +
                std::to_string(static_cast<int>(layer.conv->data_algo)) + ", filter " +
                std::to_string(static_cast<int>(layer.conv->filter_algo)) + "]";
      }
      spdlog::info("GPU model {} ({}): cuDNN algorithms{}, workspace {} bytes", config_.name,
                   math_ == MathMode::kTf32 ? "tf32" : "fp32", plan, workspace);
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

  Status ForwardBackward(const float* x, const std::int32_t* y, int n, double* loss_accum,
                         const model::GradReadyFn& on_ready) override {
    if (n < 1 || n > config_.max_batch) {
      return InvalidArgument("ForwardBackward: batch of " + std::to_string(n) +
                             " samples outside [1, max_batch=" + std::to_string(config_.max_batch) +
                             "]");
    }
    if (x == nullptr || y == nullptr || loss_accum == nullptr) {
      return InvalidArgument("ForwardBackward: null device pointer");
    }
    RETURN_IF_ERROR(SetBatch(n));
    RETURN_IF_ERROR(Forward(x, n));
    float* dy = scratch_[0].data();
    RT_CUDA_RETURN_IF_ERROR(kernels::SoftmaxCrossEntropy(
        layers_.back().out_ptr, y, n, config_.classes, dy, loss_accum, nullptr, stream_));
    for (std::size_t i = layers_.size(); i-- > 0;) {
      Layer& layer = layers_[i];
      const float* input = i == 0 ? x : layers_[i - 1].out_ptr;
      float* dx = nullptr;
      if (i > 0) {
        dx = layer.kind == Kind::kFlatten
                 ? dy
                 : (dy == scratch_[0].data() ? scratch_[1].data() : scratch_[0].data());
      }
      RETURN_IF_ERROR(ParamGrads(layer, input, dy, n));
      if (layer.range >= 0 && on_ready) on_ready(ranges_[static_cast<std::size_t>(layer.range)]);
      if (dx != nullptr) {
        RETURN_IF_ERROR(InputGrad(layer, input, dy, dx, n));
        dy = dx;
      }
    }
    return Status::Ok();
  }

  Status Evaluate(const float* x, const std::int32_t* y, int n, double* sums) override {
    if (n == 0) return Status::Ok();
    if (n < 0 || n > config_.max_batch) {
      return InvalidArgument("Evaluate: batch of " + std::to_string(n) +
                             " samples outside [0, max_batch=" + std::to_string(config_.max_batch) +
                             "]");
    }
    if (x == nullptr || y == nullptr || sums == nullptr) {
      return InvalidArgument("Evaluate: null device pointer");
    }
    RETURN_IF_ERROR(SetBatch(n));
    RETURN_IF_ERROR(Forward(x, n));
    RT_CUDA_RETURN_IF_ERROR(kernels::SoftmaxCrossEntropy(
        layers_.back().out_ptr, y, n, config_.classes, nullptr, nullptr, sums, stream_));
    return Status::Ok();
  }

 private:
  Status BuildLayers() {
    auto linear = [&](int in, int out) {
      Layer l;
      l.kind = Kind::kLinear;
      l.in = {in, 1, 1};
      l.out = {out, 1, 1};
      l.num_params = static_cast<std::size_t>(out) * (static_cast<std::size_t>(in) + 1);
      return l;
    };
    auto simple = [&](Kind kind, model::Shape in, model::Shape out) {
      Layer l;
      l.kind = kind;
      l.in = in;
      l.out = out;
      return l;
    };
    const model::Shape input{config_.channels, config_.height, config_.width};
    if (config_.name == "mlp") {
      layers_.push_back(linear(static_cast<int>(input.size()), config_.hidden));
      layers_.push_back(simple(Kind::kRelu, {config_.hidden, 1, 1}, {config_.hidden, 1, 1}));
      layers_.push_back(linear(config_.hidden, config_.classes));
    } else if (config_.name == "cnn") {
      model::Shape shape = input;
      for (const int channels : {kCnnConv1Channels, kCnnConv2Channels}) {
        Layer conv;
        conv.kind = Kind::kConv;
        conv.in = shape;
        conv.kernel = kCnnKernel;
        conv.padding = kCnnPadding;
        conv.out = {channels, shape.h + 2 * kCnnPadding - kCnnKernel + 1,
                    shape.w + 2 * kCnnPadding - kCnnKernel + 1};
        conv.num_params = static_cast<std::size_t>(channels) *
                          (static_cast<std::size_t>(shape.c) * kCnnKernel * kCnnKernel + 1);
        shape = conv.out;
        layers_.push_back(std::move(conv));
        layers_.push_back(simple(Kind::kRelu, shape, shape));
        const model::Shape pooled{shape.c, shape.h / 2, shape.w / 2};
        layers_.push_back(simple(Kind::kPool, shape, pooled));
        shape = pooled;
      }
      const model::Shape flat{static_cast<int>(shape.size()), 1, 1};
      layers_.push_back(simple(Kind::kFlatten, shape, flat));
      layers_.push_back(linear(flat.c, kCnnDense));
      layers_.push_back(simple(Kind::kRelu, {kCnnDense, 1, 1}, {kCnnDense, 1, 1}));
      layers_.push_back(linear(kCnnDense, config_.classes));
    } else {
      return InvalidArgument("train.model: unknown model \"" + config_.name +
                             "\" (known: mlp, cnn)");
    }
    for (Layer& layer : layers_) {
      if (layer.num_params == 0) continue;
      layer.range = static_cast<int>(ranges_.size());
      ranges_.push_back({total_params_, layer.num_params});
      total_params_ += layer.num_params;
    }
    return Status::Ok();
  }

  void BindParams() {
    for (Layer& layer : layers_) {
      if (layer.range < 0) continue;
      const model::ParamRange& r = ranges_[static_cast<std::size_t>(layer.range)];
      const std::size_t w_count = layer.num_params - static_cast<std::size_t>(layer.out.c);
      layer.w = params_.data() + r.offset;
      layer.b = layer.w + w_count;
      layer.dw = grads_.data() + r.offset;
      layer.db = layer.dw + w_count;
    }
  }

  // ---- cuDNN planning ----

  Status SetConvBatch(ConvState& c, const Layer& layer, int n) {
    RT_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
        c.x.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, layer.in.c, layer.in.h, layer.in.w));
    RT_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
        c.y.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, layer.out.c, layer.out.h, layer.out.w));
    return Status::Ok();
  }

  Status SetBatch(int n) {
    if (n == current_batch_) return Status::Ok();
    for (Layer& layer : layers_) {
      if (layer.kind == Kind::kConv) RETURN_IF_ERROR(SetConvBatch(*layer.conv, layer, n));
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
    RT_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(c.w.get(), CUDNN_DATA_FLOAT,
                                                        CUDNN_TENSOR_NCHW, layer.out.c, layer.in.c,
                                                        layer.kernel, layer.kernel));
    for (ConvDesc* d : {&c.fwd, &c.bwd_data, &c.bwd_filter}) {
      cudnnConvolutionDescriptor_t cd = nullptr;
      RT_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&cd));
      d->reset(cd);
      // Cross-correlation, like torch's Conv2d and layers.cc's im2col.
      RT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
          cd, layer.padding, layer.padding, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      RT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(cd, QueryMathType()));
    }
    RETURN_IF_ERROR(SetConvBatch(c, layer, config_.max_batch));
    int on = 0, oc = 0, oh = 0, ow = 0;
    RT_CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(c.fwd.get(), c.x.get(),
                                                                   c.w.get(), &on, &oc, &oh, &ow));
    if (on != config_.max_batch || oc != layer.out.c || oh != layer.out.h || ow != layer.out.w) {
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
        cublasGemmEx(blas_.get(), ta, tb, m, n, k, &alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb,
                     &beta, c, CUDA_R_32F, ldc, compute_type_, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }

  Status Forward(const float* x, int n) {
    const float* input = x;
    for (Layer& layer : layers_) {
      float* out = layer.buf.data();
      const std::int64_t rows = n;
      switch (layer.kind) {
        case Kind::kLinear: {
          const int in = layer.in.c;
          const int outf = layer.out.c;
          // Y (n×out, row-major) is column-major Yᵀ (out×n) = Wᵀ-view(in×out)ᵀ · Xᵀ-view(in×n).
          RETURN_IF_ERROR(
              Gemm(CUBLAS_OP_T, CUBLAS_OP_N, outf, n, in, layer.w, in, input, in, 0.0f, out, outf));
          RT_CUDA_RETURN_IF_ERROR(kernels::AddBias(out, layer.b, rows, outf, 1, stream_));
          break;
        }
        case Kind::kRelu:
          RT_CUDA_RETURN_IF_ERROR(kernels::ReluForward(
              input, out, rows * static_cast<std::int64_t>(layer.in.size()), stream_));
          break;
        case Kind::kConv: {
          ConvState& c = *layer.conv;
          const float one = 1.0f;
          const float zero = 0.0f;
          RT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
              dnn_.get(), &one, c.x.get(), input, c.w.get(), layer.w, c.fwd.get(), c.fwd_algo,
              conv_workspace_.data(), conv_workspace_.bytes(), &zero, c.y.get(), out));
          RT_CUDA_RETURN_IF_ERROR(
              kernels::AddBias(out, layer.b, rows, layer.out.c,
                               static_cast<std::int64_t>(layer.out.h) * layer.out.w, stream_));
          break;
        }
        case Kind::kPool:
          RT_CUDA_RETURN_IF_ERROR(kernels::MaxPoolForward(
              input, out, layer.argmax.data(), n, layer.in.c, layer.in.h, layer.in.w, stream_));
          break;
        case Kind::kFlatten:
          layer.out_ptr = input;
          continue;
      }
      layer.out_ptr = out;
      input = out;
    }
    return Status::Ok();
  }

  // This layer's parameter gradients (enqueued before on_ready).
  Status ParamGrads(Layer& layer, const float* input, const float* dy, int n) {
    switch (layer.kind) {
      case Kind::kLinear: {
        const int in = layer.in.c;
        const int outf = layer.out.c;
        // dW (out×in, row-major) is column-major dWᵀ (in×out) = Xᵀ-view(in×n) · dYᵀ-view(out×n)ᵀ.
        RETURN_IF_ERROR(
            Gemm(CUBLAS_OP_N, CUBLAS_OP_T, in, outf, n, input, in, dy, outf, 0.0f, layer.dw, in));
        RT_CUDA_RETURN_IF_ERROR(kernels::BiasGrad(dy, layer.db, n, outf, 1, stream_));
        break;
      }
      case Kind::kConv: {
        ConvState& c = *layer.conv;
        const float one = 1.0f;
        const float zero = 0.0f;
        RT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
            dnn_.get(), &one, c.x.get(), input, c.y.get(), dy, c.bwd_filter.get(), c.filter_algo,
            conv_workspace_.data(), conv_workspace_.bytes(), &zero, c.w.get(), layer.dw));
        RT_CUDA_RETURN_IF_ERROR(
            kernels::BiasGrad(dy, layer.db, n, layer.out.c,
                              static_cast<std::int64_t>(layer.out.h) * layer.out.w, stream_));
        break;
      }
      default:
        break;
    }
    return Status::Ok();
  }

  // The gradient with respect to this layer's input (dx may equal dy only for Flatten).
  Status InputGrad(Layer& layer, const float* input, const float* dy, float* dx, int n) {
    const std::int64_t rows = n;
    switch (layer.kind) {
      case Kind::kLinear: {
        const int in = layer.in.c;
        const int outf = layer.out.c;
        // dX (n×in) is column-major dXᵀ (in×n) = Wᵀ-view(in×out) · dYᵀ-view(out×n).
        RETURN_IF_ERROR(
            Gemm(CUBLAS_OP_N, CUBLAS_OP_N, in, n, outf, layer.w, in, dy, outf, 0.0f, dx, in));
        break;
      }
      case Kind::kRelu:
        RT_CUDA_RETURN_IF_ERROR(kernels::ReluBackward(
            input, dy, dx, rows * static_cast<std::int64_t>(layer.in.size()), stream_));
        break;
      case Kind::kConv: {
        ConvState& c = *layer.conv;
        const float one = 1.0f;
        const float zero = 0.0f;
        RT_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
            dnn_.get(), &one, c.w.get(), layer.w, c.y.get(), dy, c.bwd_data.get(), c.data_algo,
            conv_workspace_.data(), conv_workspace_.bytes(), &zero, c.x.get(), dx));
        break;
      }
      case Kind::kPool:
        RT_CUDA_RETURN_IF_ERROR(kernels::MaxPoolBackward(dy, layer.argmax.data(), dx, n, layer.in.c,
                                                         layer.in.h, layer.in.w, stream_));
        break;
      case Kind::kFlatten:
        break;  // dx aliases dy
    }
    return Status::Ok();
  }

  model::ModelConfig config_;
  MathMode math_;
  cudaStream_t stream_;
  std::vector<Layer> layers_;
  std::vector<model::ParamRange> ranges_;
  std::size_t total_params_ = 0;
  DeviceBuffer<float> params_;
  DeviceBuffer<float> grads_;
  DeviceBuffer<float> scratch_[2];  // d(loss)/d(activation), ping-pong
  CublasHandle blas_;
  cublasComputeType_t compute_type_ = CUBLAS_COMPUTE_32F;
  DeviceBuffer<unsigned char> blas_workspace_;
  CudnnHandle dnn_;
  DeviceBuffer<unsigned char> conv_workspace_;
  int current_batch_ = -1;  // the batch size the cuDNN descriptors are set for
};

}  // namespace

StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(const model::ModelConfig& config,
                                                     MathMode math, cudaStream_t stream) {
  if (config.max_batch < 1) {
    return InvalidArgument("model max_batch must be positive, got " +
                           std::to_string(config.max_batch));
  }
  // The CPU model validates the config and draws the initial weights; they do not depend on
  // max_batch, so a batch of one keeps its activation buffers small.
  model::ModelConfig cpu_config = config;
  cpu_config.max_batch = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<model::Model> cpu, model::Model::Create(cpu_config));
  auto gpu = std::make_unique<CudaModel>(config, math, stream);
  RETURN_IF_ERROR(gpu->Init(*cpu, cpu->params()).WithContext("creating the GPU model"));
  return std::unique_ptr<GpuModel>(std::move(gpu));
}

}  // namespace ringtrain::gpu
