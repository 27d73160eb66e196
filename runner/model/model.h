// The trainable model seam used by the trainer: a stack of layers whose parameters and
// gradients live in two flat float buffers with the same layout (so gradient buckets are plain
// contiguous ranges, like DDP's bucket views). CPU kernels use OpenBLAS for every GEMM.
// Must not know about communicators, data loading or metrics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringtrain::model {

struct ModelConfig {
  std::string name = "mlp";  // "mlp" (784-256-10) or "cnn" (2× conv-relu-pool, then dense)
  int channels = 1;          // input shape: channels × height × width
  int height = 28;
  int width = 28;
  int classes = 10;
  int hidden = 256;         // mlp hidden width
  int max_batch = 256;      // activations are allocated once for this many samples
  std::uint64_t seed = 42;  // initial weights (rank 0's are broadcast anyway)
  // Backward reports a weight gradient bigger than this many floats in slices of at most this
  // size (rows of the weight matrix), so its all-reduce can start before the layer is done;
  // 0 = a layer at a time. Only the step engine's bucketing depends on it, never the math.
  std::size_t max_grad_slice = 0;
  // Dropout masks (Create(ModelSpec, ...) only): give each rank its own, or replicas drop the
  // same units. Never affects the initial weights.
  std::uint64_t dropout_seed = 0;
};

struct ModelSpec;

// [offset, offset+count) of one layer's parameters in the flat buffers.
struct ParamRange {
  std::size_t offset = 0;
  std::size_t count = 0;
};

struct EvalResult {
  double loss_sum = 0;  // summed over the batch, not averaged
  std::int64_t correct = 0;
};

// Called during backward once the gradients of one of grad_ranges() are final, last layer first.
using GradReadyFn = std::function<void(const ParamRange&)>;

class Model {
 public:
  virtual ~Model() = default;
  static StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config);
  // A model from a layer list (model_spec.h). Of `config` only max_batch, seed, max_grad_slice
  // and dropout_seed are used; the input shape and outputs are the spec's. The presets'
  // specs give exactly Create(config)'s models.
  static StatusOr<std::unique_ptr<Model>> Create(const ModelSpec& spec, const ModelConfig& config);

  virtual std::span<float> params() = 0;
  virtual std::span<float> grads() = 0;
  // One entry per parameterized layer, in forward order; together they tile params().
  virtual const std::vector<ParamRange>& layer_ranges() const = 0;
  // What ForwardBackward reports to on_ready, each exactly once per call, in offset order;
  // together they tile params(). Whole layers, or slices of them (ModelConfig::max_grad_slice).
  virtual const std::vector<ParamRange>& grad_ranges() const = 0;
  // The bytes of every buffer the model holds besides params() and grads(), as allocated: each
  // layer's output for max_batch samples, the two gradient buffers backward alternates
  // between, and the layers' own (Layer::buffer_bytes). For a spec, ActivationBytes's figure.
  virtual std::uint64_t buffer_bytes() const = 0;

  // x: n×C×H×W floats, y: n labels in [0, classes). Overwrites grads() with the gradient of the
  // mean loss over the n samples and returns that mean loss. n ≤ max_batch.
  virtual float ForwardBackward(const float* x, const std::int32_t* y, int n,
                                const GradReadyFn& on_ready) = 0;
  virtual EvalResult Evaluate(const float* x, const std::int32_t* y, int n) = 0;

  // The regression path, for a model whose loss is mse: targets are n × outputs floats (the
  // width of the last layer). Same contract as above otherwise; Evaluate's correct stays 0.
  // Calling the label path on an mse model, or this one on a classifier, is a fatal error.
  virtual float ForwardBackward(const float* x, const float* targets, int n,
                                const GradReadyFn& on_ready) = 0;
  virtual EvalResult Evaluate(const float* x, const float* targets, int n) = 0;

  // Restarts the dropout masks' streams as Create would with ModelConfig::dropout_seed = seed:
  // a trainer reseeds before each step from (seed, rank, position), so the masks of a step do
  // not depend on how the process got there (a resume, an in-place recovery). No-op without
  // dropout.
  virtual void SeedDropout(std::uint64_t seed) { (void)seed; }
};

// The bytes Model::Create(spec, config) allocates besides the parameters and their gradients,
// for batches of up to config.max_batch samples (Model::buffer_bytes of the model it builds):
// each layer's output, kept for backward; the two gradient buffers backward alternates between;
// the max pools' argmax, the dropout masks and the fused conv-relu-pool's ReLU outputs, all per
// batch; a convolution's im2col columns, per sample. Computed from the layer plan and the layers'
// own sizing, without allocating. InvalidArgument as Create(spec, config).
StatusOr<std::uint64_t> ActivationBytes(const ModelSpec& spec, const ModelConfig& config);

// How many ranges Model::Create(spec, config)'s grad_ranges() holds: one per parameterized layer,
// a dense layer's in slices of config.max_grad_slice. Computed from the layer plan without
// allocating; what a step engine's gradient buckets are planned from. InvalidArgument as
// Create(spec, config).
StatusOr<std::uint64_t> GradRangeCount(const ModelSpec& spec, const ModelConfig& config);

}  // namespace ringtrain::model
