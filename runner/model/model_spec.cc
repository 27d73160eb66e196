#include "runner/model/model_spec.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "common/fnv.h"

namespace ringtrain::model {
namespace {

using Json = nlohmann::json;

constexpr int kMaxUnits = 65536;
constexpr int kMaxFilters = 4096;
constexpr int kMaxWindow = 15;
constexpr int kMaxInputDim = 1 << 16;

struct KindName {
  LayerKind kind;
  std::string_view name;
};

constexpr std::array<KindName, 11> kKinds = {{
    {LayerKind::kDense, "dense"},
    {LayerKind::kConv2d, "conv2d"},
    {LayerKind::kMaxPool2d, "max_pool2d"},
    {LayerKind::kAvgPool2d, "avg_pool2d"},
    {LayerKind::kFlatten, "flatten"},
    {LayerKind::kDropout, "dropout"},
    {LayerKind::kRelu, "relu"},
    {LayerKind::kTanh, "tanh"},
    {LayerKind::kSigmoid, "sigmoid"},
    {LayerKind::kGelu, "gelu"},
    {LayerKind::kSoftmax, "softmax"},
}};

std::string KnownKinds() {
  std::string out;
  for (const KindName& k : kKinds) {
    if (!out.empty()) out += ", ";
    out += k.name;
  }
  return out;
}

std::string ShapeText(const Shape& s) {
  if (s.h == 1 && s.w == 1) return std::to_string(s.c) + " features";
  return std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w);
}

// An integer option of a layer: absent gives `fallback`, otherwise an integer in [lo, hi].
StatusOr<int> IntOption(const Json& options, const std::string& path, const char* key,
                        std::optional<int> fallback, int lo, int hi) {
  const std::string at = path + "." + key;
  const auto it = options.find(key);
  if (it == options.end()) {
    if (fallback) return *fallback;
    return InvalidArgument(at + ": required");
  }
  if (!it->is_number_integer()) {
    return InvalidArgument(at + ": must be an integer, got " + it->dump().substr(0, 40));
  }
  const auto value = it->get<std::int64_t>();
  if (value < lo || value > hi) {
    return InvalidArgument(at + ": must be " + std::to_string(lo) + ".." + std::to_string(hi) +
                           ", got " + std::to_string(value));
  }
  return static_cast<int>(value);
}

Status OnlyKeys(const Json& options, const std::string& path,
                std::initializer_list<std::string_view> keys) {
  for (const auto& [key, value] : options.items()) {
    bool known = false;
    std::string list;
    for (const std::string_view k : keys) {
      known = known || key == k;
      if (!list.empty()) list += ", ";
      list += k;
    }
    if (!known) {
      return InvalidArgument(
          path + "." + key + ": unknown option" +
          (list.empty() ? std::string(" (this layer takes none)") : " (known: " + list + ")"));
    }
  }
  return Status::Ok();
}

StatusOr<LayerSpec> ParseLayer(const Json& entry, const std::string& path) {
  std::string name;
  Json options = Json::object();
  if (entry.is_string()) {
    name = entry.get<std::string>();
  } else if (entry.is_object() && entry.size() == 1) {
    name = entry.begin().key();
    options = entry.begin().value();
    if (options.is_null()) options = Json::object();
    if (!options.is_object()) {
      return InvalidArgument(path + "." + name + ": options must be an object");
    }
  } else {
    return InvalidArgument(path +
                           ": must be a layer name or an object with exactly one key, the layer "
                           "name (known: " +
                           KnownKinds() + ")");
  }
  std::optional<LayerKind> kind;
  for (const KindName& k : kKinds) {
    if (k.name == name) kind = k.kind;
  }
  if (!kind) {
    return InvalidArgument(path + ": unknown layer \"" + name + "\" (known: " + KnownKinds() + ")");
  }
  const std::string at = path + "." + name;
  LayerSpec layer;
  layer.kind = *kind;
  switch (*kind) {
    case LayerKind::kDense: {
      RETURN_IF_ERROR(OnlyKeys(options, at, {"units"}));
      ASSIGN_OR_RETURN(layer.units, IntOption(options, at, "units", std::nullopt, 1, kMaxUnits));
      break;
    }
    case LayerKind::kConv2d: {
      RETURN_IF_ERROR(OnlyKeys(options, at, {"filters", "kernel", "stride", "padding"}));
      ASSIGN_OR_RETURN(layer.filters,
                       IntOption(options, at, "filters", std::nullopt, 1, kMaxFilters));
      ASSIGN_OR_RETURN(layer.kernel, IntOption(options, at, "kernel", std::nullopt, 1, kMaxWindow));
      ASSIGN_OR_RETURN(layer.stride, IntOption(options, at, "stride", 1, 1, kMaxWindow));
      if (const auto it = options.find("padding"); it != options.end()) {
        if (*it == "same") {
          layer.padding = Padding::kSame;
        } else if (*it == "valid") {
          layer.padding = Padding::kValid;
        } else {
          return InvalidArgument(at + ".padding: must be \"same\" or \"valid\", got " + it->dump());
        }
      }
      break;
    }
    case LayerKind::kMaxPool2d:
    case LayerKind::kAvgPool2d: {
      RETURN_IF_ERROR(OnlyKeys(options, at, {"pool", "stride"}));
      ASSIGN_OR_RETURN(layer.pool, IntOption(options, at, "pool", 2, 1, kMaxWindow));
      ASSIGN_OR_RETURN(layer.stride, IntOption(options, at, "stride", layer.pool, 1, kMaxWindow));
      break;
    }
    case LayerKind::kDropout: {
      RETURN_IF_ERROR(OnlyKeys(options, at, {"rate"}));
      const auto it = options.find("rate");
      if (it == options.end()) return InvalidArgument(at + ".rate: required");
      if (!it->is_number()) return InvalidArgument(at + ".rate: must be a number");
      layer.rate = it->get<double>();
      if (!(layer.rate >= 0.0 && layer.rate < 1.0)) {
        return InvalidArgument(at + ".rate: must be in [0, 1), got " + it->dump());
      }
      break;
    }
    default:
      RETURN_IF_ERROR(OnlyKeys(options, at, {}));
      break;
  }
  return layer;
}

// Output size of a window sliding over `in` pixels; 0 when the window does not fit.
int Slide(int in, int window, int stride) { return in < window ? 0 : (in - window) / stride + 1; }

}  // namespace

std::string_view NameOf(LayerKind kind) {
  for (const KindName& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "?";
}

std::string_view NameOf(Loss loss) { return loss == Loss::kMse ? "mse" : "softmax_cross_entropy"; }

std::string_view NameOf(Task task) {
  return task == Task::kRegression ? "regression" : "classification";
}

StatusOr<ModelSpec> ParseModelSpec(std::string_view text, std::string_view where) {
  const std::string root(where);
  const Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(root + ": not valid JSON");
  if (!doc.is_object()) return InvalidArgument(root + ": must be an object");
  RETURN_IF_ERROR(OnlyKeys(doc, root, {"input", "layers", "loss"}));
  ModelSpec spec;

  const auto input = doc.find("input");
  if (input == doc.end()) return InvalidArgument(root + ".input: required");
  if (!input->is_array() || (input->size() != 1 && input->size() != 3)) {
    return InvalidArgument(root + ".input: must be [channels, height, width] or [features]");
  }
  std::array<int, 3> dims = {1, 1, 1};
  for (std::size_t i = 0; i < input->size(); ++i) {
    const Json& d = (*input)[i];
    const std::string at = root + ".input[" + std::to_string(i) + "]";
    if (!d.is_number_integer()) {
      return InvalidArgument(at + ": must be an integer, got " + d.dump().substr(0, 40));
    }
    const auto v = d.get<std::int64_t>();
    // [features] of a table as wide as the data has (a CSV of 70,000 columns trains), each of
    // [c, h, w] at most kMaxInputDim; the product is bounded in InferShapes.
    const std::int64_t most =
        input->size() == 1 ? std::numeric_limits<int>::max() : std::int64_t{kMaxInputDim};
    if (v < 1 || v > most) {
      return InvalidArgument(at + ": must be 1.." + std::to_string(most) + ", got " +
                             std::to_string(v));
    }
    dims[i] = static_cast<int>(v);
  }
  spec.input = Shape{dims[0], dims[1], dims[2]};

  const auto layers = doc.find("layers");
  if (layers == doc.end()) return InvalidArgument(root + ".layers: required");
  if (!layers->is_array() || layers->empty()) {
    return InvalidArgument(root + ".layers: must be a non-empty list");
  }
  for (std::size_t i = 0; i < layers->size(); ++i) {
    ASSIGN_OR_RETURN(LayerSpec layer,
                     ParseLayer((*layers)[i], root + ".layers[" + std::to_string(i) + "]"));
    spec.layers.push_back(layer);
  }

  if (const auto loss = doc.find("loss"); loss != doc.end()) {
    if (*loss == "softmax_cross_entropy") {
      spec.loss = Loss::kSoftmaxCrossEntropy;
    } else if (*loss == "mse") {
      spec.loss = Loss::kMse;
    } else {
      return InvalidArgument(root + ".loss: must be \"softmax_cross_entropy\" or \"mse\", got " +
                             loss->dump());
    }
  }
  if (auto shapes = InferShapes(spec); !shapes.ok()) {
    return InvalidArgument(root + "." + shapes.status().message());
  }
  return spec;
}

StatusOr<ShapeReport> InferShapes(const ModelSpec& spec) {
  ShapeReport report;
  Shape shape = spec.input;
  if (shape.c < 1 || shape.h < 1 || shape.w < 1) {
    return InvalidArgument("input: every dimension must be positive, got " + ShapeText(shape));
  }
  // Every shape from here on holds at most INT_MAX values (a flatten's width is an int).
  if (shape.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    return InvalidArgument("input: " + ShapeText(shape) + " is too large (" +
                           std::to_string(shape.size()) + " values a sample, at most " +
                           std::to_string(std::numeric_limits<int>::max()) + ")");
  }
  for (std::size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    LayerInfo info;
    info.label = "layers[" + std::to_string(i) + "] " + std::string(NameOf(l.kind));
    auto fail = [&](const std::string& what) { return InvalidArgument(info.label + ": " + what); };
    const bool flat = shape.h == 1 && shape.w == 1;
    switch (l.kind) {
      case LayerKind::kDense:
        if (!flat) {
          return fail("input is " + ShapeText(shape) +
                      ", needs a flat input (add a flatten before it)");
        }
        if (l.units < 1) return fail("units must be positive");
        info.out = Shape{l.units, 1, 1};
        info.params = static_cast<std::size_t>(l.units) * (shape.c + 1);
        break;
      case LayerKind::kConv2d: {
        if (l.filters < 1 || l.kernel < 1 || l.stride < 1) {
          return fail("filters, kernel and stride must be positive");
        }
        int oh = 0;
        int ow = 0;
        if (l.padding == Padding::kSame) {
          oh = (shape.h + l.stride - 1) / l.stride;
          ow = (shape.w + l.stride - 1) / l.stride;
        } else {
          oh = Slide(shape.h, l.kernel, l.stride);
          ow = Slide(shape.w, l.kernel, l.stride);
        }
        if (oh < 1 || ow < 1) {
          return fail("input " + ShapeText(shape) + " is smaller than the kernel " +
                      std::to_string(l.kernel) + "x" + std::to_string(l.kernel) +
                      " (padding valid)");
        }
        info.out = Shape{l.filters, oh, ow};
        info.params = static_cast<std::size_t>(l.filters) *
                      (static_cast<std::size_t>(shape.c) * l.kernel * l.kernel + 1);
        break;
      }
      case LayerKind::kMaxPool2d:
      case LayerKind::kAvgPool2d: {
        if (l.pool < 1 || l.stride < 1) return fail("pool and stride must be positive");
        const int oh = Slide(shape.h, l.pool, l.stride);
        const int ow = Slide(shape.w, l.pool, l.stride);
        if (oh < 1 || ow < 1) {
          return fail("input " + ShapeText(shape) + " is smaller than the pool " +
                      std::to_string(l.pool) + "x" + std::to_string(l.pool));
        }
        info.out = Shape{shape.c, oh, ow};
        break;
      }
      case LayerKind::kFlatten:
        info.out = Shape{static_cast<int>(shape.size()), 1, 1};
        break;
      case LayerKind::kDropout:
        if (!(l.rate >= 0.0 && l.rate < 1.0)) return fail("rate must be in [0, 1)");
        info.out = shape;
        break;
      case LayerKind::kSoftmax:
        if (i + 1 != spec.layers.size() || spec.loss != Loss::kSoftmaxCrossEntropy) {
          return fail(
              "softmax is only allowed as the last layer with loss softmax_cross_entropy, "
              "where it is folded into the loss");
        }
        if (!flat) return fail("input is " + ShapeText(shape) + ", needs a flat input");
        info.out = shape;
        break;
      default:  // elementwise activations
        info.out = shape;
        break;
    }
    if (info.out.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      return fail("output " + ShapeText(info.out) + " is too large");
    }
    shape = info.out;
    report.params += info.params;
    report.layers.push_back(std::move(info));
  }
  report.output = shape;
  return report;
}

Shape InputShapeOf(const std::vector<std::size_t>& dims, std::size_t values) {
  const Shape flat{static_cast<int>(values), 1, 1};
  Shape s = flat;
  if (dims.size() == 2) s = Shape{1, static_cast<int>(dims[0]), static_cast<int>(dims[1])};
  if (dims.size() == 3) {
    s = Shape{static_cast<int>(dims[0]), static_cast<int>(dims[1]), static_cast<int>(dims[2])};
  }
  return s.size() == values ? s : flat;
}

StatusOr<ShapeReport> CheckAgainstDataset(const ModelSpec& spec, Shape data, Task task, int outputs,
                                          std::string_view outputs_from) {
  const bool classes = task == Task::kClassification;
  if ((spec.loss == Loss::kSoftmaxCrossEntropy) != classes) {
    // Or the dataset's task is not the one meant: a regression that left `task` out is read
    // as classification (review).
    return InvalidArgument("loss: " + std::string(NameOf(spec.loss)) + " does not fit a " +
                           std::string(NameOf(task)) + " dataset (use \"" +
                           std::string(NameOf(classes ? Loss::kSoftmaxCrossEntropy : Loss::kMse)) +
                           (classes ? "\"; a CSV or NPY dataset of numbers to predict says "
                                      "spec.train.dataset.task: regression)"
                                    : "\"; a dataset of classes to predict says "
                                      "spec.train.dataset.task: classification)"));
  }
  ASSIGN_OR_RETURN(ShapeReport report, InferShapes(spec));
  if (data.size() != spec.input.size() ||
      (!(data.h == 1 && data.w == 1) && !(data == spec.input))) {
    return InvalidArgument("input: the model takes " + ShapeText(spec.input) +
                           " per sample but the dataset has " + ShapeText(data));
  }
  const std::string label =
      report.layers.empty() ? std::string("input") : report.layers.back().label;
  const Shape& out = report.output;
  if (!(out.h == 1 && out.w == 1)) {
    return InvalidArgument(label + ": output is " + ShapeText(out) +
                           ", the loss needs a flat output (a flatten and a dense at the end)");
  }
  if (out.c != outputs) {
    // Name the layer that sets the width: the last one with parameters (a dense), or the last.
    std::string setter = label;
    for (std::size_t i = spec.layers.size(); i-- > 0;) {
      if (spec.layers[i].kind == LayerKind::kDense) {
        setter = report.layers[i].label;
        break;
      }
    }
    // Classes the labels said: which label said so, and what says it otherwise.
    const std::string from =
        classes && !outputs_from.empty()
            ? " (" + std::string(outputs_from) +
                  "; the dataset's classes, spec.train.dataset.classes, says how many)"
            : "";
    return InvalidArgument(setter + ": output " + std::to_string(out.c) +
                           " units but the dataset has " + std::to_string(outputs) +
                           (classes ? " classes" : " target values") + from);
  }
  if (classes && outputs < 2) {
    return InvalidArgument(
        "loss: softmax_cross_entropy needs at least 2 classes, the dataset has " +
        std::to_string(outputs));
  }
  return report;
}

std::string CanonicalString(const ModelSpec& spec) {
  std::string out = "input=" + std::to_string(spec.input.c) + "x" + std::to_string(spec.input.h) +
                    "x" + std::to_string(spec.input.w);
  for (const LayerSpec& l : spec.layers) {
    out += ";";
    out += NameOf(l.kind);
    switch (l.kind) {
      case LayerKind::kDense:
        out += "(units=" + std::to_string(l.units) + ")";
        break;
      case LayerKind::kConv2d:
        out += "(filters=" + std::to_string(l.filters) + ",kernel=" + std::to_string(l.kernel) +
               ",stride=" + std::to_string(l.stride) +
               ",padding=" + (l.padding == Padding::kSame ? "same" : "valid") + ")";
        break;
      case LayerKind::kMaxPool2d:
      case LayerKind::kAvgPool2d:
        out += "(pool=" + std::to_string(l.pool) + ",stride=" + std::to_string(l.stride) + ")";
        break;
      case LayerKind::kDropout: {
        // Shortest round-trip text of the rate, so 0.5 and 0.50 are the same architecture.
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.17g", l.rate);
        out += std::string("(rate=") + buf + ")";
        break;
      }
      default:
        break;
    }
  }
  out += ";loss=";
  out += NameOf(spec.loss);
  return out;
}

std::uint64_t ArchitectureHash(const ModelSpec& spec) {
  return ringtrain::Fnv1a(CanonicalString(spec));
}

StatusOr<ModelSpec> PresetSpec(std::string_view name, Shape input, int classes, int hidden) {
  ModelSpec spec;
  spec.input = input;
  spec.loss = Loss::kSoftmaxCrossEntropy;
  spec.init = Initializer::kTorch;
  auto dense = [](int units) {
    LayerSpec l;
    l.kind = LayerKind::kDense;
    l.units = units;
    return l;
  };
  auto plain = [](LayerKind kind) {
    LayerSpec l;
    l.kind = kind;
    return l;
  };
  if (name == "mlp") {
    spec.layers = {plain(LayerKind::kFlatten), dense(hidden), plain(LayerKind::kRelu),
                   dense(classes)};
  } else if (name == "cnn") {
    for (const int filters : {32, 64}) {
      LayerSpec conv;
      conv.kind = LayerKind::kConv2d;
      conv.filters = filters;
      conv.kernel = 3;
      conv.padding = Padding::kSame;
      LayerSpec pool;
      pool.kind = LayerKind::kMaxPool2d;
      pool.pool = 2;
      pool.stride = 2;
      spec.layers.push_back(conv);
      spec.layers.push_back(plain(LayerKind::kRelu));
      spec.layers.push_back(pool);
    }
    spec.layers.push_back(plain(LayerKind::kFlatten));
    spec.layers.push_back(dense(128));
    spec.layers.push_back(plain(LayerKind::kRelu));
    spec.layers.push_back(dense(classes));
  } else {
    return InvalidArgument("model: unknown preset \"" + std::string(name) + "\" (known: mlp, cnn)");
  }
  RETURN_IF_ERROR(InferShapes(spec).status());
  return spec;
}

}  // namespace ringtrain::model
