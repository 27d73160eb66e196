// CPU layer kernels behind Model: forward/backward math and per-batch scratch, all allocated at
// construction. Must not own parameter memory (the model's flat buffers do) or know the trainer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "runner/model/model.h"
#include "runner/model/model_spec.h"

namespace ringtrain::model {

class Layer {
 public:
  explicit Layer(Shape in, Shape out) : in_(in), out_(out) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const Shape& in_shape() const { return in_; }
  const Shape& out_shape() const { return out_; }

  // Parameters are weights then bias, contiguous, in the slices handed over by Bind.
  virtual std::size_t num_params() const { return 0; }
  virtual void Bind(float* /*params*/, float* /*grads*/) {}
  virtual void Init(std::mt19937_64& /*rng*/) {}
  // Training (ForwardBackward) or evaluation (Evaluate); only Dropout behaves differently.
  virtual void SetTraining(bool /*training*/) {}
  // Whether the layer draws random numbers in training (dropout), and restarting its stream
  // at `seed`; other layers ignore it.
  virtual bool random() const { return false; }
  virtual void Reseed(std::uint64_t /*seed*/) {}
  // The bytes of the buffers this layer holds for its batches (argmax indices, dropout masks,
  // the fused layer's ReLU outputs) and for one sample (a convolution's im2col columns), as
  // allocated: what each class's static BufferBytes computes without building the layer.
  virtual std::size_t buffer_bytes() const { return 0; }

  virtual void Forward(const float* x, float* y, int n) = 0;
  // Overwrites this layer's gradients from the batch; dx may be null when nobody needs it (the
  // first layer), which skips that half of the work. x is the input Forward last saw.
  virtual void Backward(const float* x, const float* dy, float* dx, int n) = 0;

  // [offset, offset+count) of this layer's parameters whose gradients are final.
  using SliceReadyFn = std::function<void(const ParamRange&)>;
  // The ranges BackwardSliced reports for `max_slice` (0 = no limit), in offset order; they
  // tile [0, num_params()). By default the whole layer.
  virtual std::vector<ParamRange> GradSlices(std::size_t max_slice) const;
  // Backward that calls `ready` for each of GradSlices(max_slice) as soon as it is final. The
  // math is Backward's; by default it is Backward, then the whole layer.
  virtual void BackwardSliced(const float* x, const float* dy, float* dx, int n,
                              std::size_t max_slice, const SliceReadyFn& ready);

 private:
  Shape in_;
  Shape out_;
};

// y = x·Wᵀ + b with W stored [out][in] like torch.nn.Linear, so checkpoints map one to one.
class Linear final : public Layer {
 public:
  Linear(int in_features, int out_features, Initializer init = Initializer::kTorch);
  std::size_t num_params() const override;
  void Bind(float* params, float* grads) override;
  void Init(std::mt19937_64& rng) override;
  void Forward(const float* x, float* y, int n) override;
  void Backward(const float* x, const float* dy, float* dx, int n) override;
  // Slices are blocks of whole rows of W (output features), evenly sized; the block holding the
  // last rows also holds the bias. Reported from the last block to the first.
  std::vector<ParamRange> GradSlices(std::size_t max_slice) const override;
  void BackwardSliced(const float* x, const float* dy, float* dx, int n, std::size_t max_slice,
                      const SliceReadyFn& ready) override;
  // GradSlices(max_slice).size() of a Linear(in_features, out_features), without building one.
  static std::size_t SliceCount(int in_features, int out_features, std::size_t max_slice);

 private:
  static int RowsPerSlice(int in_features, int out_features, std::size_t max_slice);

  int in_;
  int out_;
  Initializer init_;
  float* w_ = nullptr;
  float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
};

class ReLU final : public Layer {
 public:
  explicit ReLU(Shape shape) : Layer(shape, shape) {}
  void Forward(const float* x, float* y, int n) override;
  void Backward(const float* x, const float* dy, float* dx, int n) override;
};

// Convolution as im2col + one GEMM per sample; W is [out][in][k][k] like torch. The first
// constructor is torch's symmetric padding with stride 1; the second takes a stride, the
// top/left padding and the output shape (Keras' "same" pads the odd pixel at the bottom/right).
// The column buffer is recomputed in backward rather than kept for the whole batch: it is
// C·k²× the input, which would dominate memory at max_batch.
class Conv2d final : public Layer {
 public:
  Conv2d(Shape in, int out_channels, int kernel, int padding,
         Initializer init = Initializer::kTorch);
  Conv2d(Shape in, Shape out, int kernel, int stride, int pad_top, int pad_left, Initializer init);
  std::size_t num_params() const override;
  void Bind(float* params, float* grads) override;
  void Init(std::mt19937_64& rng) override;
  void Forward(const float* x, float* y, int n) override;
  void Backward(const float* x, const float* dy, float* dx, int n) override;

  // One sample of Forward / Backward. Backward's per-sample calls must run for samples 0..n-1
  // in order, `first` on sample 0: they accumulate dW and db (and dx may be null).
  void ForwardSample(const float* x, float* y);
  void BackwardSample(const float* x, const float* dy, float* dx, bool first);

  // The output of the first constructor (stride 1, `padding` on every side).
  static Shape OutShape(Shape in, int out_channels, int kernel, int padding) {
    return Shape{out_channels, in.h + 2 * padding - kernel + 1, in.w + 2 * padding - kernel + 1};
  }
  // The column buffer: one sample's im2col, in.c·k² × out.h·out.w floats.
  static std::size_t ColumnFloats(Shape in, Shape out, int kernel);
  static std::size_t BufferBytes(Shape in, Shape out, int kernel) {
    return ColumnFloats(in, out, kernel) * sizeof(float);
  }
  std::size_t buffer_bytes() const override { return col_.size() * sizeof(float); }

 private:
  void Im2Col(const float* x);
  void Col2Im(float* dx) const;

  int kernel_;
  int stride_ = 1;
  int pad_top_;
  int padding_;  // left
  int patch_;    // in.c · k²: the GEMM's inner dimension
  Initializer init_;
  std::vector<float> col_;
  float* w_ = nullptr;
  float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
};

// 2×2 window, stride 2, odd edges dropped (torch's floor mode). The argmax of each window is
// kept from forward so backward routes the gradient without comparing floats again.
class MaxPool2d final : public Layer {
 public:
  MaxPool2d(Shape in, int max_batch);
  void Forward(const float* x, float* y, int n) override;
  void Backward(const float* x, const float* dy, float* dx, int n) override;

  // Sample i of Forward / Backward (Backward's dx for the sample: zeroed, then routed).
  void ForwardSample(int i, const float* x, float* y);
  void BackwardSample(int i, const float* dy, float* dx) const;

  static Shape OutShape(Shape in) { return Shape{in.c, in.h / 2, in.w / 2}; }
  // The argmax of a batch: one index per output element.
  static std::size_t ArgmaxSize(Shape in, int max_batch) {
    return OutShape(in).size() * static_cast<std::size_t>(max_batch);
  }
  static std::size_t BufferBytes(Shape in, int max_batch) {
    return ArgmaxSize(in, max_batch) * sizeof(std::int32_t);
  }
  std::size_t buffer_bytes() const override { return argmax_.size() * sizeof(std::int32_t); }

 private:
  std::vector<std::int32_t> argmax_;  // per output element: offset within the sample's input
};

// Conv2d → ReLU → MaxPool2d run one sample at a time, so a sample's activations are still in
// the core's cache when the next stage reads them (the batch-wide stages streamed 6 MB tensors
// through memory three times each way). Every element goes through exactly the operations, in
// the order, of the three layers run one after the other, so outputs and gradients are
// bit-identical to them, and the parameters are the convolution's (same checkpoint layout).
class ConvReluPool final : public Layer {
 public:
  ConvReluPool(Shape in, int out_channels, int kernel, int padding, int max_batch,
               Initializer init = Initializer::kTorch);
  std::size_t num_params() const override { return conv_.num_params(); }
  void Bind(float* params, float* grads) override { conv_.Bind(params, grads); }
  void Init(std::mt19937_64& rng) override { conv_.Init(rng); }
  void Forward(const float* x, float* y, int n) override;
  void Backward(const float* x, const float* dy, float* dx, int n) override;

  static std::size_t BufferBytes(Shape in, int out_channels, int kernel, int padding,
                                 int max_batch);
  std::size_t buffer_bytes() const override;

 private:
  Conv2d conv_;
  MaxPool2d pool_;
  std::vector<float> relu_out_;  // per sample, the ReLU's output, kept for backward
  std::vector<float> grad_;      // one sample's gradient at the convolution's output
};

// Any pool × pool window and stride, floor mode, max (first maximum wins, NaN propagates,
// like MaxPool2d) or average (over the whole window, which always lies inside the image).
// Windows may overlap, so backward accumulates.
class Pool2d final : public Layer {
 public:
  Pool2d(Shape in, Shape out, int pool, int stride, bool max, int max_batch);
  void Forward(const float* x, float* y, int n) override;
  void Backward(const float* x, const float* dy, float* dx, int n) override;

  // A max pool's argmax of a batch, one index per output element; an average pool keeps none.
  static std::size_t ArgmaxSize(Shape out, bool max, int max_batch) {
    return max ? out.size() * static_cast<std::size_t>(max_batch) : 0;
  }
  static std::size_t BufferBytes(Shape out, bool max, int max_batch) {
    return ArgmaxSize(out, max, max_batch) * sizeof(std::int32_t);
  }
  std::size_t buffer_bytes() const override { return argmax_.size() * sizeof(std::int32_t); }

 private:
  int pool_;
  int stride_;
  bool max_;
  std::vector<std::int32_t> argmax_;  // max only: per output element, offset within the sample
};

enum class Activation { kTanh, kSigmoid, kGelu };

// tanh, the logistic sigmoid, or GELU in its exact erf form x·Φ(x) (torch.nn.GELU's default,
// not the tanh approximation). Backward recomputes from the input.
class Elementwise final : public Layer {
 public:
  Elementwise(Shape shape, Activation kind) : Layer(shape, shape), kind_(kind) {}
  void Forward(const float* x, float* y, int n) override;
  void Backward(const float* x, const float* dy, float* dx, int n) override;

 private:
  Activation kind_;
};

// Inverted dropout: in training each element is kept with probability 1 − rate and scaled by
// 1 / (1 − rate), so evaluation is the identity. The mask is dropout_mask.h's hash of the seed
// (give each rank its own: replicas must not drop the same units), the number of training
// forwards since it was set, and the element's index in the batch: the CUDA kernel's mask.
class Dropout final : public Layer {
 public:
  Dropout(Shape shape, double rate, std::uint64_t seed, int max_batch);
  void SetTraining(bool training) override { training_ = training; }
  bool random() const override { return true; }
  void Reseed(std::uint64_t seed) override {
    seed_ = seed;
    calls_ = 0;
  }
  void Forward(const float* x, float* y, int n) override;
  void Backward(const float* x, const float* dy, float* dx, int n) override;

  // The mask of a batch: one float per element.
  static std::size_t MaskSize(Shape shape, int max_batch) {
    return shape.size() * static_cast<std::size_t>(max_batch);
  }
  static std::size_t BufferBytes(Shape shape, int max_batch) {
    return MaskSize(shape, max_batch) * sizeof(float);
  }
  std::size_t buffer_bytes() const override { return mask_.size() * sizeof(float); }

 private:
  double rate_;
  float scale_;
  bool training_ = true;
  std::uint64_t seed_;
  std::uint64_t calls_ = 0;  // training forwards since the seed was set
  std::vector<float> mask_;  // 0 or scale_, per element of the last training batch
};

class Flatten final : public Layer {
 public:
  explicit Flatten(Shape in) : Layer(in, Shape{static_cast<int>(in.size()), 1, 1}) {}
  void Forward(const float* x, float* y, int n) override;
  void Backward(const float* x, const float* dy, float* dx, int n) override;
};

// Softmax cross-entropy over n rows of `classes` logits, via log-sum-exp in double. Labels must
// be in [0, classes). If dlogits is not null it receives the gradient of the *mean* loss.
// correct counts rows whose first maximal logit is the label.
EvalResult SoftmaxCrossEntropy(const float* logits, const std::int32_t* labels, int n, int classes,
                               float* dlogits);

// Mean squared error over n rows of `width` outputs, torch's MSELoss(reduction="mean") and
// Keras' "mse": the mean over all n·width elements. loss_sum is the sum over rows of each row's
// mean, so loss_sum / n is the loss. dout, if not null, gets the gradient of the loss.
EvalResult MeanSquaredError(const float* out, const float* targets, int n, int width, float* dout);

}  // namespace ringtrain::model
