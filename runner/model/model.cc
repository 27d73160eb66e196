#include "runner/model/model.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>

#include "runner/model/dropout_mask.h"
#include "runner/model/layer_plan.h"
#include "runner/model/layers.h"
#include "runner/model/model_spec.h"

namespace ringtrain::model {
namespace {

// The cnn's widths are the classic MNIST ones; at batch 64 a single core still runs them at
// well over a thousand samples/s, so there is no reason to shrink them.
constexpr int kCnnConv1Channels = 32;
constexpr int kCnnConv2Channels = 64;
constexpr int kCnnKernel = 3;
constexpr int kCnnPadding = 1;  // "same" output size, so only the pools shrink the image
constexpr int kCnnDense = 128;

// The hot path returns plain values, so a caller's broken precondition (a batch larger than
// what Create sized the buffers for, a label the data module should have rejected) cannot be
// reported as a Status, and carrying on would write out of bounds. It is an assertion, so the
// exit code is a permanent one: abort()'s 134 would read as retryable and restart the gang.
[[noreturn]] void Fatal(const char* what, long long value, long long limit) {
  std::fprintf(stderr, "ringtrain model: %s (got %lld, limit %lld)\n", what, value, limit);
  std::fflush(stderr);
  std::_Exit(kExitPermanent);
}

// Sequential's own buffers, in floats, for layers whose outputs are `out_sizes` floats per
// sample: each layer's output for a batch, kept for backward, and the two gradient buffers
// backward alternates between, wide enough for any layer's output and the loss's gradient.
struct SequentialBuffers {
  std::vector<std::size_t> activations;
  std::size_t gradient = 0;  // each of the two
};
SequentialBuffers SequentialBufferSizes(const std::vector<std::size_t>& out_sizes, int outputs,
                                        int max_batch) {
  const auto batch = static_cast<std::size_t>(max_batch);
  SequentialBuffers b;
  // The loss writes its gradient to dy_ even when there is no layer to differentiate.
  std::size_t widest = static_cast<std::size_t>(outputs);
  for (const std::size_t size : out_sizes) {
    b.activations.push_back(size * batch);
    widest = std::max(widest, size);
  }
  b.gradient = widest * batch;
  return b;
}

class Sequential final : public Model {
 public:
  // `outputs`: the classes (softmax cross-entropy) or the width of the targets (mse).
  Sequential(std::vector<std::unique_ptr<Layer>> layers, const ModelConfig& config, Loss loss,
             int outputs)
      : layers_(std::move(layers)),
        max_batch_(config.max_batch),
        classes_(outputs),
        loss_(loss),
        max_grad_slice_(config.max_grad_slice) {
    std::size_t total = 0;
    for (const auto& layer : layers_) {
      const std::size_t count = layer->num_params();
      range_of_layer_.push_back(count == 0 ? -1 : static_cast<int>(ranges_.size()));
      if (count > 0) ranges_.push_back({total, count});
      for (const ParamRange& s : layer->GradSlices(max_grad_slice_)) {
        grad_ranges_.push_back({total + s.offset, s.count});
      }
      total += count;
    }
    params_.resize(total);
    grads_.resize(total);
    std::mt19937_64 rng(config.seed);
    std::vector<std::size_t> out_sizes;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      Layer& layer = *layers_[i];
      if (range_of_layer_[i] >= 0) {
        const std::size_t offset = ranges_[range_of_layer_[i]].offset;
        layer.Bind(params_.data() + offset, grads_.data() + offset);
        layer.Init(rng);
      }
      out_sizes.push_back(layer.out_shape().size());
    }
    const SequentialBuffers sizes = SequentialBufferSizes(out_sizes, classes_, max_batch_);
    for (const std::size_t size : sizes.activations) activations_.emplace_back(size);
    dy_.resize(sizes.gradient);
    dx_.resize(sizes.gradient);
  }

  std::span<float> params() override { return params_; }
  std::span<float> grads() override { return grads_; }
  void SeedDropout(std::uint64_t seed) override {
    // The derivation of Create(spec): one stream per dropout layer, in order.
    for (const auto& layer : layers_) {
      if (!layer->random()) continue;
      seed += kDropoutStreamStride;
      layer->Reseed(seed);
    }
  }
  const std::vector<ParamRange>& layer_ranges() const override { return ranges_; }
  const std::vector<ParamRange>& grad_ranges() const override { return grad_ranges_; }
  std::uint64_t buffer_bytes() const override {
    std::uint64_t floats = dy_.size() + dx_.size();
    for (const auto& a : activations_) floats += a.size();
    std::uint64_t bytes = floats * sizeof(float);
    for (const auto& layer : layers_) bytes += layer->buffer_bytes();
    return bytes;
  }

  float ForwardBackward(const float* x, const std::int32_t* y, int n,
                        const GradReadyFn& on_ready) override {
    if (n < 1) Fatal("ForwardBackward needs at least one sample", n, 1);
    if (loss_ != Loss::kSoftmaxCrossEntropy) Fatal("labels given to an mse model", 0, 0);
    CheckBatch(y, n);
    const float* logits = Forward(x, n, true);
    const EvalResult loss = SoftmaxCrossEntropy(logits, y, n, classes_, dy_.data());
    Backward(x, n, on_ready);
    return static_cast<float>(loss.loss_sum / n);
  }

  float ForwardBackward(const float* x, const float* targets, int n,
                        const GradReadyFn& on_ready) override {
    if (n < 1) Fatal("ForwardBackward needs at least one sample", n, 1);
    if (loss_ != Loss::kMse) Fatal("float targets given to a classifier", 0, 0);
    if (n > max_batch_) Fatal("batch size outside [0, max_batch]", n, max_batch_);
    const float* out = Forward(x, n, true);
    const EvalResult loss = MeanSquaredError(out, targets, n, classes_, dy_.data());
    Backward(x, n, on_ready);
    return static_cast<float>(loss.loss_sum / n);
  }

  EvalResult Evaluate(const float* x, const std::int32_t* y, int n) override {
    if (n == 0) return {};
    if (loss_ != Loss::kSoftmaxCrossEntropy) Fatal("labels given to an mse model", 0, 0);
    CheckBatch(y, n);
    return SoftmaxCrossEntropy(Forward(x, n, false), y, n, classes_, nullptr);
  }

  EvalResult Evaluate(const float* x, const float* targets, int n) override {
    if (n == 0) return {};
    if (loss_ != Loss::kMse) Fatal("float targets given to a classifier", 0, 0);
    if (n < 0 || n > max_batch_) Fatal("batch size outside [0, max_batch]", n, max_batch_);
    return MeanSquaredError(Forward(x, n, false), targets, n, classes_, nullptr);
  }

 private:
  // Back from the loss gradient in dy_.
  void Backward(const float* x, int n, const GradReadyFn& on_ready) {
    float* dy = dy_.data();
    float* dx = dx_.data();
    for (std::size_t i = layers_.size(); i-- > 0;) {
      const float* input = i == 0 ? x : activations_[i - 1].data();
      if (range_of_layer_[i] < 0 || !on_ready) {
        layers_[i]->Backward(input, dy, i == 0 ? nullptr : dx, n);
      } else {
        const std::size_t base = ranges_[range_of_layer_[i]].offset;
        layers_[i]->BackwardSliced(input, dy, i == 0 ? nullptr : dx, n, max_grad_slice_,
                                   [&](const ParamRange& s) {
                                     on_ready(ParamRange{base + s.offset, s.count});
                                   });
      }
      std::swap(dy, dx);
    }
  }

  void CheckBatch(const std::int32_t* y, int n) const {
    if (n < 0 || n > max_batch_) Fatal("batch size outside [0, max_batch]", n, max_batch_);
    for (int i = 0; i < n; ++i) {
      if (y[i] < 0 || y[i] >= classes_) Fatal("label outside [0, classes)", y[i], classes_);
    }
  }

  const float* Forward(const float* x, int n, bool training) {
    if (training != training_) {
      for (auto& layer : layers_) layer->SetTraining(training);
      training_ = training;
    }
    const float* input = x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      layers_[i]->Forward(input, activations_[i].data(), n);
      input = activations_[i].data();
    }
    return input;
  }

  std::vector<std::unique_ptr<Layer>> layers_;
  int max_batch_;
  int classes_;
  Loss loss_;
  bool training_ = true;
  std::size_t max_grad_slice_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<ParamRange> ranges_;
  std::vector<int> range_of_layer_;      // index into ranges_, or -1 for a layer without parameters
  std::vector<ParamRange> grad_ranges_;  // what backward reports: ranges_ or slices of them
  std::vector<std::vector<float>> activations_;  // [i]: output of layer i, kept for backward
  // d(loss)/d(activation) for the layer being differentiated and the one below it.
  std::vector<float> dy_;
  std::vector<float> dx_;
};

std::vector<std::unique_ptr<Layer>> BuildMlp(const ModelConfig& config) {
  const Shape input{config.channels, config.height, config.width};
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Linear>(static_cast<int>(input.size()), config.hidden));
  layers.push_back(std::make_unique<ReLU>(Shape{config.hidden, 1, 1}));
  layers.push_back(std::make_unique<Linear>(config.hidden, config.classes));
  return layers;
}

std::vector<std::unique_ptr<Layer>> BuildCnn(const ModelConfig& config) {
  std::vector<std::unique_ptr<Layer>> layers;
  Shape shape{config.channels, config.height, config.width};
  auto add = [&](std::unique_ptr<Layer> layer) {
    shape = layer->out_shape();
    layers.push_back(std::move(layer));
  };
  for (const int channels : {kCnnConv1Channels, kCnnConv2Channels}) {
    add(std::make_unique<ConvReluPool>(shape, channels, kCnnKernel, kCnnPadding, config.max_batch));
  }
  add(std::make_unique<Flatten>(shape));
  add(std::make_unique<Linear>(shape.c, kCnnDense));
  add(std::make_unique<ReLU>(shape));
  add(std::make_unique<Linear>(shape.c, config.classes));
  return layers;
}

Status Validate(const ModelConfig& config) {
  const std::pair<const char*, int> positive[] = {
      {"channels", config.channels}, {"height", config.height},       {"width", config.width},
      {"classes", config.classes},   {"max_batch", config.max_batch}, {"hidden", config.hidden},
  };
  for (const auto& [field, value] : positive) {
    if (value < 1) {
      return InvalidArgument("model " + std::string(field) + " must be positive, got " +
                             std::to_string(value));
    }
  }
  if (config.name == "cnn" && (config.height < 4 || config.width < 4)) {
    return InvalidArgument(
        "train.model: cnn pools twice by 2 and needs an image of at least 4x4, "
        "got " +
        std::to_string(config.height) + "x" + std::to_string(config.width));
  }
  return Status::Ok();
}

// The CPU layer class that runs one or more planned layers.
enum class CpuLayerType {
  kLinear,
  kConvReluPool,  // conv2d (stride 1, symmetric padding) → relu → max_pool2d(2, 2), fused
  kConv2d,        // stride 1, symmetric padding
  kConv2dStrided,
  kMaxPool2x2,
  kPool2d,
  kDropout,
  kRelu,
  kElementwise,
};

// One layer Model::Create(spec) builds: its class, the planned layer it starts at (a fused one
// also covers the next two) and its output.
struct CpuStage {
  CpuLayerType type = CpuLayerType::kRelu;
  const PlannedLayer* p = nullptr;
  Shape out;
};

// The layers Create(spec) builds for `plan`, which they point into; what ActivationBytes sizes.
std::vector<CpuStage> CpuStages(const LayerPlan& plan) {
  std::vector<CpuStage> stages;
  const auto& l = plan.layers;
  for (std::size_t i = 0; i < l.size(); ++i) {
    const PlannedLayer& p = l[i];
    CpuStage stage{CpuLayerType::kRelu, &p, p.out};
    switch (p.kind) {
      case LayerKind::kDense:
        stage.type = CpuLayerType::kLinear;
        break;
      case LayerKind::kConv2d:
        // conv2d(stride 1, symmetric) → relu → max_pool2d(2, 2): the fused layer, which is
        // bit-identical to the three and keeps a sample in cache between them.
        if (p.stride == 1 && p.symmetric() && i + 2 < l.size() &&
            l[i + 1].kind == LayerKind::kRelu && l[i + 2].kind == LayerKind::kMaxPool2d &&
            l[i + 2].pool == 2 && l[i + 2].stride == 2) {
          stage.type = CpuLayerType::kConvReluPool;
          stage.out = l[i + 2].out;
          i += 2;
        } else if (p.stride == 1 && p.symmetric()) {
          stage.type = CpuLayerType::kConv2d;
        } else {
          stage.type = CpuLayerType::kConv2dStrided;
        }
        break;
      case LayerKind::kMaxPool2d:
        stage.type =
            p.pool == 2 && p.stride == 2 ? CpuLayerType::kMaxPool2x2 : CpuLayerType::kPool2d;
        break;
      case LayerKind::kAvgPool2d:
        stage.type = CpuLayerType::kPool2d;
        break;
      case LayerKind::kFlatten:
        // The layout of a batch does not change (NCHW is already one row per sample): the next
        // layer reads the same floats, so no layer and no copy.
        continue;
      case LayerKind::kDropout:
        stage.type = CpuLayerType::kDropout;
        break;
      case LayerKind::kRelu:
        stage.type = CpuLayerType::kRelu;
        break;
      case LayerKind::kTanh:
      case LayerKind::kSigmoid:
      case LayerKind::kGelu:
        stage.type = CpuLayerType::kElementwise;
        break;
      case LayerKind::kSoftmax:
        continue;  // never planned: part of the loss
    }
    stages.push_back(stage);
  }
  return stages;
}

Activation ActivationOf(LayerKind kind) {
  return kind == LayerKind::kTanh      ? Activation::kTanh
         : kind == LayerKind::kSigmoid ? Activation::kSigmoid
                                       : Activation::kGelu;
}

std::unique_ptr<Layer> MakeLayer(const CpuStage& stage, Initializer init,
                                 const ModelConfig& config) {
  const PlannedLayer& p = *stage.p;
  switch (stage.type) {
    case CpuLayerType::kLinear:
      return std::make_unique<Linear>(p.in.c, p.out.c, init);
    case CpuLayerType::kConvReluPool:
      return std::make_unique<ConvReluPool>(p.in, p.out.c, p.kernel, p.pad_top, config.max_batch,
                                            init);
    case CpuLayerType::kConv2d:
      return std::make_unique<Conv2d>(p.in, p.out.c, p.kernel, p.pad_top, init);
    case CpuLayerType::kConv2dStrided:
      return std::make_unique<Conv2d>(p.in, p.out, p.kernel, p.stride, p.pad_top, p.pad_left, init);
    case CpuLayerType::kMaxPool2x2:
      return std::make_unique<MaxPool2d>(p.in, config.max_batch);
    case CpuLayerType::kPool2d:
      return std::make_unique<Pool2d>(p.in, p.out, p.pool, p.stride,
                                      p.kind == LayerKind::kMaxPool2d, config.max_batch);
    case CpuLayerType::kDropout:
      return std::make_unique<Dropout>(p.in, p.rate, config.dropout_seed + p.dropout_offset,
                                       config.max_batch);
    case CpuLayerType::kRelu:
      return std::make_unique<ReLU>(p.in);
    case CpuLayerType::kElementwise:
      return std::make_unique<Elementwise>(p.in, ActivationOf(p.kind));
  }
  return nullptr;  // unreachable: every type is handled above
}

// What the layer MakeLayer builds for `stage` allocates (Layer::buffer_bytes), without building it.
std::uint64_t StageBufferBytes(const CpuStage& stage, int max_batch) {
  const PlannedLayer& p = *stage.p;
  switch (stage.type) {
    case CpuLayerType::kConvReluPool:
      return ConvReluPool::BufferBytes(p.in, p.out.c, p.kernel, p.pad_top, max_batch);
    case CpuLayerType::kConv2d:
    case CpuLayerType::kConv2dStrided:
      return Conv2d::BufferBytes(p.in, p.out, p.kernel);
    case CpuLayerType::kMaxPool2x2:
      return MaxPool2d::BufferBytes(p.in, max_batch);
    case CpuLayerType::kPool2d:
      return Pool2d::BufferBytes(p.out, p.kind == LayerKind::kMaxPool2d, max_batch);
    case CpuLayerType::kDropout:
      return Dropout::BufferBytes(p.in, max_batch);
    case CpuLayerType::kLinear:
    case CpuLayerType::kRelu:
    case CpuLayerType::kElementwise:
      return 0;
  }
  return 0;
}

}  // namespace

StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config) {
  if (config.name != "mlp" && config.name != "cnn") {
    return InvalidArgument("train.model: unknown model \"" + config.name + "\" (known: mlp, cnn)");
  }
  RETURN_IF_ERROR(Validate(config));
  auto layers = config.name == "mlp" ? BuildMlp(config) : BuildCnn(config);
  return std::unique_ptr<Model>(std::make_unique<Sequential>(
      std::move(layers), config, Loss::kSoftmaxCrossEntropy, config.classes));
}

StatusOr<std::unique_ptr<Model>> Model::Create(const ModelSpec& spec, const ModelConfig& config) {
  if (config.max_batch < 1) {
    return InvalidArgument("model max_batch must be positive, got " +
                           std::to_string(config.max_batch));
  }
  // The plan folds what computes nothing (a softmax under cross-entropy, a dropout of rate 0),
  // splits Keras' padding and numbers the dropout streams: what the CUDA model builds too.
  ASSIGN_OR_RETURN(const LayerPlan plan, PlanLayers(spec));
  std::vector<std::unique_ptr<Layer>> layers;
  for (const CpuStage& stage : CpuStages(plan)) {
    layers.push_back(MakeLayer(stage, spec.init, config));
  }
  return std::unique_ptr<Model>(
      std::make_unique<Sequential>(std::move(layers), config, spec.loss, plan.outputs));
}

StatusOr<std::uint64_t> ActivationBytes(const ModelSpec& spec, const ModelConfig& config) {
  if (config.max_batch < 1) {
    return InvalidArgument("model max_batch must be positive, got " +
                           std::to_string(config.max_batch));
  }
  ASSIGN_OR_RETURN(const LayerPlan plan, PlanLayers(spec));
  const std::vector<CpuStage> stages = CpuStages(plan);
  std::vector<std::size_t> out_sizes;
  std::uint64_t bytes = 0;
  for (const CpuStage& stage : stages) {
    out_sizes.push_back(stage.out.size());
    bytes += StageBufferBytes(stage, config.max_batch);
  }
  const SequentialBuffers sizes = SequentialBufferSizes(out_sizes, plan.outputs, config.max_batch);
  std::uint64_t floats = 2 * std::uint64_t{sizes.gradient};
  for (const std::size_t size : sizes.activations) floats += size;
  return bytes + floats * sizeof(float);
}

StatusOr<std::uint64_t> GradRangeCount(const ModelSpec& spec, const ModelConfig& config) {
  ASSIGN_OR_RETURN(const LayerPlan plan, PlanLayers(spec));
  std::uint64_t ranges = 0;
  for (const CpuStage& stage : CpuStages(plan)) {
    const PlannedLayer& p = *stage.p;
    if (p.num_params == 0) continue;
    // Layer::GradSlices: the whole layer, but a dense one's row blocks (Linear::GradSlices).
    ranges += stage.type == CpuLayerType::kLinear
                  ? Linear::SliceCount(p.in.c, p.out.c, config.max_grad_slice)
                  : 1;
  }
  return ranges;
}

}  // namespace ringtrain::model
