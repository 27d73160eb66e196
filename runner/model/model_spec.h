// A model as data: an input shape, an ordered list of layers and a loss (a Keras Sequential).
// Parsed from JSON (the manifest's YAML converts to it one to one), shape-checked before
// anything is allocated, and turned into a Model by Model::Create(spec, config). The presets
// "mlp" and "cnn" are ModelSpecs too. Light header: no JSON library, no layer kernels.
//
// JSON shape (every key other than "layers" has a default; unknown keys are errors):
//
//   {
//     "input": [1, 28, 28],            // [channels, height, width], or [features]
//     "layers": [
//       {"conv2d": {"filters": 32, "kernel": 3, "stride": 1, "padding": "same"}},
//       "relu",                        // a layer without options: its name, or {"relu": {}}
//       {"max_pool2d": {"pool": 2, "stride": 2}},
//       {"avg_pool2d": {"pool": 2}},   // stride defaults to pool, as in Keras
//       "flatten",
//       {"dense": {"units": 128}},
//       {"dropout": {"rate": 0.5}},
//       {"dense": {"units": 10}},
//       "softmax"                      // optional, last layer only, folded into the loss
//     ],
//     "loss": "softmax_cross_entropy"  // or "mse"
//   }
//
// Layers and their options (defaults as Keras'):
//   dense        units 1..65536
//   conv2d       filters 1..4096, kernel 1..15, stride 1..15 (1), padding "valid"|"same" ("valid")
//   max_pool2d   pool 1..15 (2), stride 1..15 (= pool)          floor mode, like torch and Keras
//   avg_pool2d   pool 1..15 (2), stride 1..15 (= pool)
//   flatten      —
//   dropout      rate in [0, 1)
//   relu, tanh, sigmoid, gelu (erf form, torch.nn.GELU's default), softmax
// "same" padding is Keras': output ceil(in / stride), the odd pixel of padding at the bottom/right.
// dense needs a flat input (a flatten before it when the input is an image).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ringtrain::model {

// Per-sample tensor shape; a batch is n contiguous samples in C×H×W order (NCHW). A vector of
// features is {features, 1, 1}.
struct Shape {
  int c = 1;
  int h = 1;
  int w = 1;
  std::size_t size() const { return static_cast<std::size_t>(c) * h * w; }
  bool operator==(const Shape&) const = default;
};

enum class LayerKind {
  kDense,
  kConv2d,
  kMaxPool2d,
  kAvgPool2d,
  kFlatten,
  kDropout,
  kRelu,
  kTanh,
  kSigmoid,
  kGelu,
  kSoftmax,
};

enum class Padding { kValid, kSame };
enum class Loss { kSoftmaxCrossEntropy, kMse };
// What a dataset's labels are: classes (softmax_cross_entropy fits them) or target values (mse).
enum class Task { kClassification, kRegression };
// kGlorot: Keras' defaults (Glorot uniform weights, zero biases), for user-defined lists.
// kTorch: torch's Linear/Conv2d defaults (uniform ±1/√fan_in for weights and biases), the
// presets' initialisation since before they were lists, kept so their weights do not change.
enum class Initializer { kGlorot, kTorch };

struct LayerSpec {
  LayerKind kind = LayerKind::kRelu;
  int units = 0;                      // dense
  int filters = 0;                    // conv2d
  int kernel = 0;                     // conv2d
  int pool = 0;                       // max_pool2d, avg_pool2d
  int stride = 1;                     // conv2d, max_pool2d, avg_pool2d
  Padding padding = Padding::kValid;  // conv2d
  double rate = 0;                    // dropout
};

struct ModelSpec {
  Shape input;
  std::vector<LayerSpec> layers;
  Loss loss = Loss::kSoftmaxCrossEntropy;
  Initializer init =
      Initializer::kGlorot;  // not part of the architecture (CanonicalString ignores it)
};

// What shape inference says about one layer.
struct LayerInfo {
  std::string label;  // "layers[3] conv2d"
  Shape out;
  std::size_t params = 0;
};

struct ShapeReport {
  std::vector<LayerInfo> layers;  // one per spec layer, in order
  Shape output;                   // the last layer's output (the spec's input when no layers)
  std::size_t params = 0;         // total
};

std::string_view NameOf(LayerKind kind);
std::string_view NameOf(Loss loss);
std::string_view NameOf(Task task);  // "classification", "regression"

// Parses the JSON above. Errors name the path from `where` down, e.g.
// "model.layers[3].conv2d.kernel: must be 1..15, got 0". Runs InferShapes too, so a returned
// spec always fits together (it is not yet checked against a dataset).
StatusOr<ModelSpec> ParseModelSpec(std::string_view json, std::string_view where = "model");

// Every layer's output shape and parameter count; an error names the layer that does not fit
// its input ("layers[5] dense: input is 64x7x7, needs a flat input (add a flatten before it)"),
// a softmax that is not last or not under softmax_cross_entropy, an empty output.
StatusOr<ShapeReport> InferShapes(const ModelSpec& spec);

// The model input a sample of shape `dims` is: {features} flat, {h, w} as [1, h, w], {c, h, w};
// any other number of dimensions, or dims that do not hold `values`, as `values` flat values.
// The one rule of the runner (train::ShapeOf) and of `ringtrain validate`/`run`.
Shape InputShapeOf(const std::vector<std::size_t>& dims, std::size_t values);

// Whether the spec fits a dataset of `task`: first the loss (softmax_cross_entropy for a
// classification, mse for a regression: "loss: mse does not fit a classification dataset ..."),
// then InferShapes, then the per-sample shape must be the spec's input and the output must be
// `outputs` features: the number of classes of a classification, the width of a regression's
// targets ("layers[7] dense: output 12 units but the dataset has 10 classes"). The one check of
// the runner (train::ResolveModelSpec) and of `ringtrain validate`/`run` (api::ResolveModel).
// `outputs_from`, when the labels said the classes, is where from (data::Table::classes_from).
StatusOr<ShapeReport> CheckAgainstDataset(const ModelSpec& spec, Shape data, Task task, int outputs,
                                          std::string_view outputs_from = {});

// The architecture as one line, identical for identical architectures and different otherwise
// (init excluded: it does not change what a checkpoint holds), e.g.
// "input=1x28x28;conv2d(filters=32,kernel=3,stride=1,padding=same);relu;...;loss=mse".
// For checkpoints: resuming with another architecture is refused naming both.
std::string CanonicalString(const ModelSpec& spec);
// 64-bit FNV-1a of CanonicalString.
std::uint64_t ArchitectureHash(const ModelSpec& spec);

// The built-in models as lists, for an input of channels × height × width and `classes`:
//   mlp: flatten, dense(hidden), relu, dense(classes)
//   cnn: 2× [conv2d(32|64, kernel 3, same), relu, max_pool2d(2)], flatten, dense(128), relu,
//        dense(classes)
// with softmax_cross_entropy and Initializer::kTorch: Model::Create(PresetSpec(...)) is today's
// model bit for bit (same flat layout, same initial values for the same seed).
StatusOr<ModelSpec> PresetSpec(std::string_view name, Shape input, int classes, int hidden = 256);

}  // namespace ringtrain::model
