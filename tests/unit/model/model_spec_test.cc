#include "runner/model/model_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runner/model/dropout_mask.h"
#include "runner/model/gemm.h"
#include "runner/model/layers.h"
#include "runner/model/model.h"
#include "tests/unit/model/alloc_counter.h"
#include "tests/unit/model/grad_check.h"

namespace ringtrain::model {
namespace {

using ::testing::HasSubstr;

ModelSpec MustParse(const std::string& json) {
  auto spec = ParseModelSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : ModelSpec{};
}

std::string ParseError(const std::string& json) {
  auto spec = ParseModelSpec(json);
  EXPECT_FALSE(spec.ok()) << json;
  return spec.ok() ? std::string() : spec.status().message();
}

std::unique_ptr<Model> MustCreate(const ModelSpec& spec, int max_batch = 8,
                                  std::uint64_t seed = 42) {
  ModelConfig config;
  config.max_batch = max_batch;
  config.seed = seed;
  config.dropout_seed = 5;
  auto model = Model::Create(spec, config);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(model).value();
}

std::vector<float> RandomFloats(std::size_t count, std::uint64_t seed, float lo = -1.0f,
                                float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

class ModelSpecTest : public ::testing::Test {
 protected:
  void SetUp() override { SetKernelThreads(1); }
};

// ---- parsing ----

TEST_F(ModelSpecTest, ParsesKerasStyleListWithDefaults) {
  const ModelSpec spec = MustParse(R"({
    "input": [1, 28, 28],
    "layers": [
      {"conv2d": {"filters": 32, "kernel": 3, "padding": "same"}}, "relu",
      {"max_pool2d": {}}, {"avg_pool2d": {"pool": 3, "stride": 1}}, "flatten",
      {"dropout": {"rate": 0.25}}, {"dense": {"units": 10}}, {"softmax": {}}
    ]})");
  ASSERT_EQ(spec.layers.size(), 8u);
  EXPECT_EQ(spec.input, (Shape{1, 28, 28}));
  EXPECT_EQ(spec.loss, Loss::kSoftmaxCrossEntropy);
  EXPECT_EQ(spec.init, Initializer::kGlorot);
  EXPECT_EQ(spec.layers[0].stride, 1);
  EXPECT_EQ(spec.layers[0].padding, Padding::kSame);
  EXPECT_EQ(spec.layers[1].kind, LayerKind::kRelu);
  EXPECT_EQ(spec.layers[2].pool, 2);
  EXPECT_EQ(spec.layers[2].stride, 2);  // defaults to pool
  EXPECT_EQ(spec.layers[3].pool, 3);
  EXPECT_EQ(spec.layers[3].stride, 1);
  EXPECT_DOUBLE_EQ(spec.layers[5].rate, 0.25);
  EXPECT_EQ(spec.layers[6].units, 10);
  EXPECT_EQ(spec.layers[7].kind, LayerKind::kSoftmax);
}

TEST_F(ModelSpecTest, ParseErrorsNameThePath) {
  const std::string dense = R"({"dense": {"units": 4}})";
  EXPECT_EQ(ParseError(R"({"input": [1, 28, 28], "layers": ["flatten", )" + dense +
                       R"(, "relu", {"conv2d": {"filters": 8, "kernel": 0}}]})"),
            "model.layers[3].conv2d.kernel: must be 1..15, got 0");
  EXPECT_EQ(ParseError(R"({"input": [4], "layers": [{"dense": {}}]})"),
            "model.layers[0].dense.units: required");
  EXPECT_EQ(ParseError(R"({"input": [4], "layers": [{"dense": {"units": 2.5}}]})"),
            "model.layers[0].dense.units: must be an integer, got 2.5");
  EXPECT_THAT(ParseError(R"({"input": [4], "layers": [{"dense": {"units": 2, "bias": 0}}]})"),
              HasSubstr("model.layers[0].dense.bias: unknown option (known: units)"));
  EXPECT_THAT(ParseError(R"({"input": [4], "layers": ["lstm"]})"),
              HasSubstr("model.layers[0]: unknown layer \"lstm\" (known: dense, conv2d"));
  EXPECT_THAT(ParseError(R"({"input": [4], "layers": [{"relu": {}, "tanh": {}}]})"),
              HasSubstr("model.layers[0]: must be a layer name or an object with exactly one key"));
  EXPECT_EQ(ParseError(R"({"input": [4], "layers": [{"relu": {"alpha": 1}}]})"),
            "model.layers[0].relu.alpha: unknown option (this layer takes none)");
  EXPECT_EQ(ParseError(R"({"input": [1, 8, 8], "layers": [{"conv2d": {"filters": 2, "kernel": 3,
                    "padding": "full"}}]})"),
            "model.layers[0].conv2d.padding: must be \"same\" or \"valid\", got \"full\"");
  EXPECT_EQ(ParseError(R"({"input": [4], "layers": [{"dropout": {"rate": 1.0}}]})"),
            "model.layers[0].dropout.rate: must be in [0, 1), got 1.0");
  EXPECT_EQ(ParseError(R"({"input": [1, 0, 4], "layers": ["relu"]})"),
            "model.input[1]: must be 1..65536, got 0");
  // [features] as wide as a table may be (a CSV of 70,000 columns), each of [c, h, w] at most
  // 65536.
  EXPECT_EQ(MustParse(R"({"input": [70000], "layers": [{"dense": {"units": 2}}]})").input,
            (Shape{70000, 1, 1}));
  EXPECT_EQ(ParseError(R"({"input": [2147483648], "layers": ["relu"]})"),
            "model.input[0]: must be 1..2147483647, got 2147483648");
  EXPECT_EQ(ParseError(R"({"input": [1, 70000, 1], "layers": ["relu"]})"),
            "model.input[1]: must be 1..65536, got 70000");
  EXPECT_EQ(ParseError(R"({"input": [1, 4], "layers": ["relu"]})"),
            "model.input: must be [channels, height, width] or [features]");
  EXPECT_EQ(ParseError(R"({"input": [4], "layers": []})"),
            "model.layers: must be a non-empty list");
  EXPECT_EQ(ParseError(R"({"input": [4], "layers": ["relu"], "loss": "hinge"})"),
            "model.loss: must be \"softmax_cross_entropy\" or \"mse\", got \"hinge\"");
  EXPECT_EQ(ParseError(R"({"input": [4], "layers": ["relu"], "optimizer": "sgd"})"),
            "model.optimizer: unknown option (known: input, layers, loss)");
  EXPECT_EQ(ParseError("{\"input\": [4], "), "model: not valid JSON");
  // Shape errors found while parsing carry the same prefix.
  EXPECT_EQ(
      ParseError(R"({"input": [1, 28, 28], "layers": [{"dense": {"units": 4}}]})"),
      "model.layers[0] dense: input is 1x28x28, needs a flat input (add a flatten before it)");
  EXPECT_THAT(ParseError(R"({"input": [4], "layers": ["softmax", {"dense": {"units": 2}}]})"),
              HasSubstr("model.layers[0] softmax: softmax is only allowed as the last layer"));
  EXPECT_THAT(
      ParseError(
          R"({"input": [4], "layers": [{"dense": {"units": 2}}, "softmax"], "loss": "mse"})"),
      HasSubstr("model.layers[1] softmax: softmax is only allowed as the last layer with loss "
                "softmax_cross_entropy"));
  EXPECT_EQ(ParseError(R"({"input": [1, 4, 4], "layers": [{"max_pool2d": {"pool": 5}}]})"),
            "model.layers[0] max_pool2d: input 1x4x4 is smaller than the pool 5x5");
  // A sample of more values than an int holds: refused, never a flatten that wraps around to a
  // small width (131072 and 1,310,730 parameters for [2, 65536, 32769], 0 for [1, 65536,
  // 65536]).
  EXPECT_EQ(ParseError(R"({"input": [2, 65536, 32769], "layers": ["flatten", {"dense":
                    {"units": 10}}, "softmax"]})"),
            "model.input: 2x65536x32769 is too large (4295098368 values a sample, at most "
            "2147483647)");
  EXPECT_THAT(ParseError(R"({"input": [1, 65536, 65536], "layers": ["flatten"]})"),
              HasSubstr("model.input: 1x65536x65536 is too large"));
}

// ---- shape inference ----

TEST_F(ModelSpecTest, ShapeInferenceForKerasStyleCnn) {
  const ModelSpec spec = MustParse(R"({
    "input": [1, 28, 28],
    "layers": [
      {"conv2d": {"filters": 32, "kernel": 3, "padding": "same"}}, "relu", {"max_pool2d": {}},
      {"conv2d": {"filters": 64, "kernel": 3}}, "relu", {"max_pool2d": {}},
      {"conv2d": {"filters": 16, "kernel": 3, "stride": 2, "padding": "same"}}, "gelu",
      "flatten", {"dropout": {"rate": 0.5}}, {"dense": {"units": 10}}, "softmax"
    ]})");
  auto report = InferShapes(spec);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const std::vector<Shape> want = {{32, 28, 28}, {32, 28, 28}, {32, 14, 14}, {64, 12, 12},
                                   {64, 12, 12}, {64, 6, 6},   {16, 3, 3},   {16, 3, 3},
                                   {144, 1, 1},  {144, 1, 1},  {10, 1, 1},   {10, 1, 1}};
  const std::vector<std::size_t> params = {
      32 * 10, 0, 0, 64 * (32 * 9 + 1), 0, 0, 16 * (64 * 9 + 1), 0, 0, 0, 10 * 145, 0};
  ASSERT_EQ(report->layers.size(), want.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(report->layers[i].out, want[i]) << report->layers[i].label;
    EXPECT_EQ(report->layers[i].params, params[i]) << report->layers[i].label;
    total += params[i];
  }
  EXPECT_EQ(report->layers[3].label, "layers[3] conv2d");
  EXPECT_EQ(report->params, total);
  EXPECT_EQ(report->output, (Shape{10, 1, 1}));
  // The built model holds exactly the inferred parameters.
  EXPECT_EQ(MustCreate(spec, 2)->params().size(), total);
}

constexpr Task kClasses = Task::kClassification;

TEST_F(ModelSpecTest, DatasetCheckNamesTheLayerThatDoesNotFit) {
  const ModelSpec spec = MustParse(R"({"input": [1, 28, 28], "layers": [
      "flatten", {"dense": {"units": 64}}, "relu", {"dense": {"units": 12}}, "softmax"]})");
  EXPECT_TRUE(CheckAgainstDataset(spec, Shape{1, 28, 28}, kClasses, 12).ok());
  EXPECT_TRUE(
      CheckAgainstDataset(spec, Shape{784, 1, 1}, kClasses, 12).ok());  // flat CSV rows fit too
  auto classes = CheckAgainstDataset(spec, Shape{1, 28, 28}, kClasses, 10);
  ASSERT_FALSE(classes.ok());
  EXPECT_EQ(classes.status().message(),
            "layers[3] dense: output 12 units but the dataset has 10 classes");
  auto input = CheckAgainstDataset(spec, Shape{3, 32, 32}, kClasses, 12);
  ASSERT_FALSE(input.ok());
  EXPECT_EQ(input.status().message(),
            "input: the model takes 1x28x28 per sample but the dataset has 3x32x32");
  ModelSpec regression = MustParse(R"({"input": [13], "layers": [
      {"dense": {"units": 8}}, "tanh", {"dense": {"units": 2}}], "loss": "mse"})");
  auto targets = CheckAgainstDataset(regression, Shape{13, 1, 1}, Task::kRegression, 1);
  ASSERT_FALSE(targets.ok());
  EXPECT_EQ(targets.status().message(),
            "layers[2] dense: output 2 units but the dataset has 1 target values");
  ModelSpec image_out = MustParse(R"({"input": [1, 8, 8], "layers": ["relu"]})");
  auto flat = CheckAgainstDataset(image_out, Shape{1, 8, 8}, kClasses, 10);
  ASSERT_FALSE(flat.ok());
  EXPECT_THAT(flat.status().message(), HasSubstr("layers[0] relu: output is 1x8x8"));
}

// The loss must fit the dataset's task, and is checked first: a units mismatch is then worded
// from the task ("classes" or "target values"), never from a loss that does not fit it.
TEST_F(ModelSpecTest, DatasetCheckRefusesALossThatDoesNotFitTheTaskFirst) {
  for (const int units : {10, 1}) {
    const ModelSpec mse = MustParse(R"({"input": [1, 28, 28], "layers": ["flatten", {"dense": {)"
                                    R"("units": )" +
                                    std::to_string(units) + R"(}}], "loss": "mse"})");
    auto refused = CheckAgainstDataset(mse, Shape{1, 28, 28}, kClasses, 10);
    ASSERT_FALSE(refused.ok()) << units;
    EXPECT_EQ(refused.status().message(),
              "loss: mse does not fit a classification dataset (use \"softmax_cross_entropy\"; "
              "a CSV or NPY dataset of numbers to predict says spec.train.dataset.task: "
              "regression)");
    EXPECT_TRUE(CheckAgainstDataset(mse, Shape{1, 28, 28}, Task::kRegression, units).ok());
  }
  const ModelSpec classifier = MustParse(R"({"input": [13], "layers": [{"dense": {"units": 2}}]})");
  auto refused = CheckAgainstDataset(classifier, Shape{13, 1, 1}, Task::kRegression, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "loss: softmax_cross_entropy does not fit a regression dataset (use \"mse\"; a "
            "dataset of classes to predict says spec.train.dataset.task: classification)");
  // Before the input too: the first thing to fix is the loss.
  refused = CheckAgainstDataset(classifier, Shape{7, 1, 1}, Task::kRegression, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("loss: softmax_cross_entropy"));
  EXPECT_EQ(NameOf(Task::kClassification), "classification");
  EXPECT_EQ(NameOf(Task::kRegression), "regression");
}

// ---- canonical architecture ----

TEST_F(ModelSpecTest, CanonicalStringIgnoresSpellingAndSeesEveryOption) {
  const ModelSpec a = MustParse(R"({"input": [1, 8, 8], "layers": [
      {"conv2d": {"filters": 4, "kernel": 3}}, "relu", "flatten", {"dropout": {"rate": 0.5}},
      {"dense": {"units": 3}}]})");
  const ModelSpec b = MustParse(R"({"loss": "softmax_cross_entropy", "layers": [
      {"conv2d": {"padding": "valid", "kernel": 3, "stride": 1, "filters": 4}}, {"relu": {}},
      {"flatten": null}, {"dropout": {"rate": 0.50}}, {"dense": {"units": 3}}],
      "input": [1, 8, 8]})");
  EXPECT_EQ(CanonicalString(a),
            "input=1x8x8;conv2d(filters=4,kernel=3,stride=1,padding=valid);relu;flatten;"
            "dropout(rate=0.5);dense(units=3);loss=softmax_cross_entropy");
  EXPECT_EQ(CanonicalString(a), CanonicalString(b));
  EXPECT_EQ(ArchitectureHash(a), ArchitectureHash(b));
  ModelSpec c = a;
  c.layers[0].kernel = 5;
  EXPECT_NE(CanonicalString(a), CanonicalString(c));
  EXPECT_NE(ArchitectureHash(a), ArchitectureHash(c));
  ModelSpec d = a;
  d.init = Initializer::kTorch;  // same architecture, same checkpoint layout
  EXPECT_EQ(ArchitectureHash(a), ArchitectureHash(d));
  ModelSpec e = a;
  e.loss = Loss::kMse;
  EXPECT_NE(ArchitectureHash(a), ArchitectureHash(e));
}

// ---- presets: today's models, bit for bit ----

void ExpectPresetIsTodaysModel(const std::string& name, std::size_t max_grad_slice) {
  ModelConfig config;
  config.name = name;
  config.max_batch = 4;
  config.seed = 7;
  config.max_grad_slice = max_grad_slice;
  auto old_model = Model::Create(config);
  ASSERT_TRUE(old_model.ok()) << old_model.status().ToString();
  auto spec = PresetSpec(name, Shape{config.channels, config.height, config.width}, config.classes,
                         config.hidden);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto new_model = Model::Create(*spec, config);
  ASSERT_TRUE(new_model.ok()) << new_model.status().ToString();
  Model& a = **old_model;
  Model& b = **new_model;

  ASSERT_EQ(a.params().size(), b.params().size()) << name;
  EXPECT_EQ(std::memcmp(a.params().data(), b.params().data(), a.params().size_bytes()), 0)
      << name << ": initial parameters differ";
  ASSERT_EQ(a.layer_ranges().size(), b.layer_ranges().size()) << name;
  for (std::size_t i = 0; i < a.layer_ranges().size(); ++i) {
    EXPECT_EQ(a.layer_ranges()[i].offset, b.layer_ranges()[i].offset) << name << " layer " << i;
    EXPECT_EQ(a.layer_ranges()[i].count, b.layer_ranges()[i].count) << name << " layer " << i;
  }
  ASSERT_EQ(a.grad_ranges().size(), b.grad_ranges().size()) << name;
  for (std::size_t i = 0; i < a.grad_ranges().size(); ++i) {
    EXPECT_EQ(a.grad_ranges()[i].offset, b.grad_ranges()[i].offset) << name << " slice " << i;
    EXPECT_EQ(a.grad_ranges()[i].count, b.grad_ranges()[i].count) << name << " slice " << i;
  }

  const int n = 4;
  const std::vector<float> x = RandomFloats(static_cast<std::size_t>(n) * 784, 3, 0.0f, 1.0f);
  const std::vector<std::int32_t> y = {3, 0, 9, 5};
  std::vector<ParamRange> reported_a;
  std::vector<ParamRange> reported_b;
  const float loss_a = a.ForwardBackward(x.data(), y.data(), n,
                                         [&](const ParamRange& r) { reported_a.push_back(r); });
  const float loss_b = b.ForwardBackward(x.data(), y.data(), n,
                                         [&](const ParamRange& r) { reported_b.push_back(r); });
  EXPECT_EQ(std::memcmp(&loss_a, &loss_b, sizeof(float)), 0)
      << name << ": " << loss_a << " vs " << loss_b;
  EXPECT_EQ(std::memcmp(a.grads().data(), b.grads().data(), a.grads().size_bytes()), 0)
      << name << ": gradients differ";
  ASSERT_EQ(reported_a.size(), reported_b.size()) << name;
  for (std::size_t i = 0; i < reported_a.size(); ++i) {
    EXPECT_EQ(reported_a[i].offset, reported_b[i].offset) << name << " report " << i;
  }
  const EvalResult eval_a = a.Evaluate(x.data(), y.data(), n);
  const EvalResult eval_b = b.Evaluate(x.data(), y.data(), n);
  EXPECT_EQ(eval_a.loss_sum, eval_b.loss_sum) << name;
  EXPECT_EQ(eval_a.correct, eval_b.correct) << name;
}

TEST_F(ModelSpecTest, PresetMlpIsTodaysMlpBitForBit) { ExpectPresetIsTodaysModel("mlp", 0); }
TEST_F(ModelSpecTest, PresetCnnIsTodaysCnnBitForBit) { ExpectPresetIsTodaysModel("cnn", 0); }
TEST_F(ModelSpecTest, PresetsMatchWithSlicedGradients) {
  ExpectPresetIsTodaysModel("mlp", 10000);
  ExpectPresetIsTodaysModel("cnn", 10000);
}

TEST_F(ModelSpecTest, UnknownPresetIsInvalidArgument) {
  auto spec = PresetSpec("resnet", Shape{1, 28, 28}, 10);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("unknown preset \"resnet\" (known: mlp, cnn)"));
}

// ---- Keras initialisers ----

TEST_F(ModelSpecTest, UserListsStartGlorotUniformWithZeroBiases) {
  const ModelSpec spec = MustParse(R"({"input": [2, 6, 6], "layers": [
      {"conv2d": {"filters": 5, "kernel": 3}}, "flatten", {"dense": {"units": 7}}]})");
  auto model = MustCreate(spec);
  const auto ranges = model->layer_ranges();
  ASSERT_EQ(ranges.size(), 2u);
  struct Expect {
    std::size_t weights;
    std::size_t biases;
    double bound;
  };
  const Expect expect[] = {{5 * 18, 5, std::sqrt(6.0 / (18 + 45))},
                           {7 * 80, 7, std::sqrt(6.0 / (80 + 7))}};
  for (std::size_t l = 0; l < 2; ++l) {
    const float* p = model->params().data() + ranges[l].offset;
    double max_abs = 0;
    for (std::size_t i = 0; i < expect[l].weights; ++i)
      max_abs = std::max(max_abs, double{std::abs(p[i])});
    EXPECT_LE(max_abs, expect[l].bound) << "layer " << l;
    EXPECT_GT(max_abs, 0.8 * expect[l].bound) << "layer " << l << ": not using the full range";
    for (std::size_t i = 0; i < expect[l].biases; ++i) EXPECT_EQ(p[expect[l].weights + i], 0.0f);
  }
}

// ---- gradient checks for the new layers, through whole models ----

// Finite differences on every parameter of a small model, and on its input-facing layers via
// the first layer's parameters (the activation or pooling under test sits between two layers
// with parameters, so a wrong backward there shows in the first one's gradient).
void CheckSpecGradients(const std::string& json, bool regression, double tolerance = 1e-2) {
  SCOPED_TRACE(json);
  const ModelSpec spec = MustParse(json);
  auto model = MustCreate(spec, 4);
  const int n = 3;
  auto shapes = InferShapes(spec);
  ASSERT_TRUE(shapes.ok());
  const int outputs = shapes->output.c;
  const std::vector<float> x = RandomFloats(spec.input.size() * n, 21);
  const std::vector<float> targets = RandomFloats(static_cast<std::size_t>(outputs) * n, 22);
  std::vector<std::int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = i % outputs;
  if (regression) {
    model->ForwardBackward(x.data(), targets.data(), n, {});
  } else {
    model->ForwardBackward(x.data(), labels.data(), n, {});
  }
  const std::vector<float> analytic(model->grads().begin(), model->grads().end());
  auto mean_loss = [&] {
    return (regression ? model->Evaluate(x.data(), targets.data(), n)
                       : model->Evaluate(x.data(), labels.data(), n))
               .loss_sum /
           n;
  };
  GradCheckOptions options{.eps = 2e-3f, .floor_fraction = 3e-2, .skip_kinks = true};
  const GradCheck check =
      CompareWithFiniteDifferences(model->params(), analytic, mean_loss, options);
  EXPECT_LT(check.worst, tolerance) << check;
  EXPECT_LE(4 * check.skipped, check.checked + check.skipped) << check;
}

TEST_F(ModelSpecTest, TanhSigmoidGeluGradientsMatchFiniteDifferences) {
  for (const char* act : {"tanh", "sigmoid", "gelu"}) {
    CheckSpecGradients(std::string(R"({"input": [5], "layers": [{"dense": {"units": 6}}, ")") +
                           act + R"(", {"dense": {"units": 3}}]})",
                       false);
  }
}

TEST_F(ModelSpecTest, MseGradientsMatchFiniteDifferences) {
  CheckSpecGradients(R"({"input": [5], "layers": [{"dense": {"units": 6}}, "tanh",
      {"dense": {"units": 2}}], "loss": "mse"})",
                     true);
}

TEST_F(ModelSpecTest, StridedAndAsymmetricSameConvGradientsMatchFiniteDifferences) {
  // 6x6, kernel 3, stride 2, same: 3x3 out, Keras pads 0 on top/left and 1 on bottom/right.
  CheckSpecGradients(R"({"input": [2, 6, 6], "layers": [
      {"conv2d": {"filters": 3, "kernel": 3, "stride": 2, "padding": "same"}}, "tanh",
      {"conv2d": {"filters": 2, "kernel": 2, "stride": 1, "padding": "same"}}, "flatten",
      {"dense": {"units": 3}}]})",
                     false);
  CheckSpecGradients(R"({"input": [1, 7, 7], "layers": [
      {"conv2d": {"filters": 2, "kernel": 3, "stride": 2}}, "sigmoid", "flatten",
      {"dense": {"units": 2}}], "loss": "mse"})",
                     true);
}

TEST_F(ModelSpecTest, AvgAndGenericMaxPoolGradientsMatchFiniteDifferences) {
  // Overlapping windows (pool 3, stride 1 and 2) exercise the accumulating backward.
  CheckSpecGradients(R"({"input": [2, 7, 7], "layers": [
      {"conv2d": {"filters": 2, "kernel": 3, "padding": "same"}},
      {"avg_pool2d": {"pool": 3, "stride": 2}}, "flatten", {"dense": {"units": 3}}]})",
                     false);
  CheckSpecGradients(R"({"input": [2, 7, 7], "layers": [
      {"conv2d": {"filters": 2, "kernel": 3, "padding": "same"}},
      {"max_pool2d": {"pool": 3, "stride": 1}}, "flatten", {"dense": {"units": 3}}]})",
                     false);
}

TEST_F(ModelSpecTest, ValidConvReluPoolIsFusedAndItsGradientsMatch) {
  // "valid" padding with stride 1 and pool 2/2 is fused too; a gelu in between is not.
  CheckSpecGradients(R"({"input": [1, 8, 8], "layers": [
      {"conv2d": {"filters": 3, "kernel": 3}}, "relu", {"max_pool2d": {}}, "flatten",
      {"dense": {"units": 3}}]})",
                     false);
}

// ---- forward values of the new kernels ----

TEST_F(ModelSpecTest, StridedConvForwardPicksTheStridedPixels) {
  // 1x1 kernel, stride 2, weight 2, bias 1: y = 2·x[2i][2j] + 1.
  Conv2d conv(Shape{1, 5, 5}, Shape{1, 3, 3}, 1, 2, 0, 0, Initializer::kGlorot);
  std::vector<float> params = {2.0f, 1.0f};
  std::vector<float> grads(2);
  conv.Bind(params.data(), grads.data());
  std::vector<float> x(25);
  for (int i = 0; i < 25; ++i) x[i] = static_cast<float>(i);
  std::vector<float> y(9);
  conv.Forward(x.data(), y.data(), 1);
  EXPECT_EQ(y, (std::vector<float>{1, 5, 9, 21, 25, 29, 41, 45, 49}));
}

TEST_F(ModelSpecTest, PoolAndActivationForwardValues) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // 1x3x3
  Pool2d avg(Shape{1, 3, 3}, Shape{1, 2, 2}, 2, 1, false, 1);
  Pool2d max(Shape{1, 3, 3}, Shape{1, 2, 2}, 2, 1, true, 1);
  std::vector<float> y(4);
  avg.Forward(x.data(), y.data(), 1);
  EXPECT_EQ(y, (std::vector<float>{3, 4, 6, 7}));
  max.Forward(x.data(), y.data(), 1);
  EXPECT_EQ(y, (std::vector<float>{5, 6, 8, 9}));
  // Overlapping windows: pixel 5 is the max of all four, so it gets the whole gradient.
  std::vector<float> x2 = {0, 0, 0, 0, 9, 0, 0, 0, 0};
  max.Forward(x2.data(), y.data(), 1);
  const std::vector<float> dy = {1, 2, 3, 4};
  std::vector<float> dx(9);
  max.Backward(x2.data(), dy.data(), dx.data(), 1);
  EXPECT_EQ(dx, (std::vector<float>{0, 0, 0, 0, 10, 0, 0, 0, 0}));

  const std::vector<float> v = {-2.0f, 0.0f, 1.5f};
  std::vector<float> out(3);
  Elementwise gelu(Shape{3, 1, 1}, Activation::kGelu);
  gelu.Forward(v.data(), out.data(), 1);
  // torch.nn.GELU()(tensor([-2., 0., 1.5])) = [-0.0455, 0.0000, 1.3998] (erf form)
  EXPECT_NEAR(out[0], -0.04550026, 1e-6);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_NEAR(out[2], 1.39978, 1e-5);
  Elementwise sigmoid(Shape{3, 1, 1}, Activation::kSigmoid);
  sigmoid.Forward(v.data(), out.data(), 1);
  EXPECT_NEAR(out[0], 0.11920292, 1e-6);
  EXPECT_EQ(out[1], 0.5f);
}

TEST_F(ModelSpecTest, MeanSquaredErrorIsTorchsMean) {
  const std::vector<float> out = {1, 2, 3, 4};
  const std::vector<float> t = {0, 2, 5, 4};  // squared errors 1, 0, 4, 0
  std::vector<float> d(4);
  const EvalResult r = MeanSquaredError(out.data(), t.data(), 2, 2, d.data());
  EXPECT_DOUBLE_EQ(r.loss_sum / 2, 5.0 / 4);                    // torch.nn.MSELoss()(out, t) = 1.25
  EXPECT_EQ(d, (std::vector<float>{0.5f, 0.0f, -1.0f, 0.0f}));  // 2·(o−t)/4
  EXPECT_EQ(r.correct, 0);
}

// ---- dropout ----

TEST_F(ModelSpecTest, DropoutIsScaledInTrainingAndIdentityInEvaluation) {
  const int n = 64;
  const Shape shape{50, 1, 1};
  Dropout dropout(shape, 0.25, 9, n);
  const std::vector<float> x = RandomFloats(shape.size() * n, 4, 1.0f, 2.0f);
  std::vector<float> y(x.size());
  dropout.SetTraining(true);
  dropout.Forward(x.data(), y.data(), n);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0.0f) {
      ++dropped;
    } else {
      EXPECT_EQ(y[i], x[i] * (1.0f / 0.75f)) << i;
    }
  }
  // 3200 draws at p = 0.25: 800 expected, σ ≈ 24.5; the seed is fixed, so this is exact.
  EXPECT_GT(dropped, 700u);
  EXPECT_LT(dropped, 900u);
  // Backward routes through the same mask.
  const std::vector<float> dy(x.size(), 1.0f);
  std::vector<float> dx(x.size());
  dropout.Backward(x.data(), dy.data(), dx.data(), n);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(dx[i] == 0.0f, y[i] == 0.0f) << i;
  // A second batch draws a fresh mask.
  std::vector<float> y2(x.size());
  dropout.Forward(x.data(), y2.data(), n);
  EXPECT_NE(y, y2);
  dropout.SetTraining(false);
  dropout.Forward(x.data(), y.data(), n);
  EXPECT_EQ(y, x);
}

// The mask is dropout_mask.h's hash of (seed, training call, element), the contract the CUDA
// kernel shares: pinned here element by element, and restarted by Reseed.
TEST_F(ModelSpecTest, DropoutMaskIsTheSharedCounterHashOfSeedCallAndElement) {
  const int n = 8;
  const Shape shape{33, 1, 1};
  Dropout dropout(shape, 0.4, 1234, n);
  const std::vector<float> x(shape.size() * n, 1.0f);
  std::vector<float> y(x.size());
  dropout.SetTraining(true);
  std::vector<std::vector<float>> calls;
  for (std::uint64_t call = 0; call < 3; ++call) {
    dropout.Forward(x.data(), y.data(), n);
    for (std::size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y[i] == 0.0f, DropoutUniform(1234, call, i) < 0.4) << "call " << call << " " << i;
    }
    calls.push_back(y);
  }
  EXPECT_NE(calls[0], calls[1]);
  // An evaluation pass does not advance the stream.
  dropout.SetTraining(false);
  dropout.Forward(x.data(), y.data(), n);
  dropout.SetTraining(true);
  dropout.Reseed(1234);
  dropout.Forward(x.data(), y.data(), n);
  EXPECT_EQ(y, calls[0]);
  dropout.Forward(x.data(), y.data(), n);
  EXPECT_EQ(y, calls[1]);
}

TEST_F(ModelSpecTest, ModelWithDropoutEvaluatesDeterministicallyAndTrainsStochastically) {
  const ModelSpec spec = MustParse(R"({"input": [6], "layers": [{"dense": {"units": 16}},
      "relu", {"dropout": {"rate": 0.5}}, {"dense": {"units": 3}}]})");
  auto model = MustCreate(spec, 4);
  const std::vector<float> x = RandomFloats(6 * 4, 8);
  const std::vector<std::int32_t> y = {0, 1, 2, 0};
  const EvalResult e1 = model->Evaluate(x.data(), y.data(), 4);
  const float l1 = model->ForwardBackward(x.data(), y.data(), 4, {});
  const float l2 = model->ForwardBackward(x.data(), y.data(), 4, {});
  const EvalResult e2 = model->Evaluate(x.data(), y.data(), 4);
  EXPECT_EQ(e1.loss_sum, e2.loss_sum);  // no update in between: evaluation is the identity path
  EXPECT_NE(l1, l2);                    // two training passes drop different units
  // Same dropout seed, same masks.
  auto twin = MustCreate(spec, 4);
  EXPECT_EQ(twin->ForwardBackward(x.data(), y.data(), 4, {}), l1);
}

// ActivationBytes is what Create(spec) allocates besides the parameters and gradients, for every
// CPU layer (the fused conv-relu-pool, convolutions with and without a stride, both pools, max
// and average, dropout, the activations) at batch 1 and 64: the model's own account of the
// buffers it holds, and the bytes operator new handed Create, which grow with the batch by
// exactly what ActivationBytes grows by (the parameters, per-sample buffers and bookkeeping do
// not depend on the batch).
TEST_F(ModelSpecTest, ActivationBytesAreWhatCreateAllocates) {
  const char* const specs[] = {
      // An MLP.
      R"({"input": [1, 28, 28], "layers": ["flatten", {"dense": {"units": 256}}, "relu",
          {"dense": {"units": 10}}]})",
      // The Keras CNN of manifests/examples: two fused conv-relu-pools, dropout.
      R"({"input": [1, 28, 28], "layers": [{"conv2d": {"filters": 32, "kernel": 3,
          "padding": "same"}}, "relu", {"max_pool2d": {"pool": 2}}, {"conv2d": {"filters": 64,
          "kernel": 3, "padding": "same"}}, "relu", {"max_pool2d": {"pool": 2}}, "flatten",
          {"dropout": {"rate": 0.25}}, {"dense": {"units": 128}}, "relu",
          {"dropout": {"rate": 0.5}}, {"dense": {"units": 10}}, "softmax"]})",
      // Everything else: a strided "same" conv, an unfused symmetric one, a 2x2 max pool after
      // a tanh, overlapping max and average pools, sigmoid, gelu, dropout, a regression loss.
      R"({"input": [3, 13, 11], "layers": [{"conv2d": {"filters": 4, "kernel": 4, "stride": 2,
          "padding": "same"}}, "gelu", {"conv2d": {"filters": 5, "kernel": 3}}, "tanh",
          {"max_pool2d": {"pool": 2}}, {"conv2d": {"filters": 6, "kernel": 1}}, "relu",
          {"avg_pool2d": {"pool": 2, "stride": 1}}, "sigmoid", {"dropout": {"rate": 0.3}},
          "flatten", {"dense": {"units": 7}}, "relu", {"dropout": {"rate": 0.1}},
          {"dense": {"units": 3}}], "loss": "mse"})",
      R"({"input": [2, 9, 9], "layers": [{"max_pool2d": {"pool": 3, "stride": 1}},
          {"conv2d": {"filters": 3, "kernel": 3, "padding": "same"}}, "relu",
          {"max_pool2d": {"pool": 2}}, "flatten", {"dense": {"units": 4}}]})",
  };
  for (const char* json : specs) {
    const ModelSpec spec = MustParse(json);
    std::uint64_t expected[2] = {0, 0};
    std::size_t allocated[2] = {0, 0};
    for (const int i : {0, 1}) {
      ModelConfig config;
      config.max_batch = i == 0 ? 1 : 64;
      auto bytes = ActivationBytes(spec, config);
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      expected[i] = *bytes;
      StartCountingAllocations();
      auto model = Model::Create(spec, config);
      StopCountingAllocations();
      allocated[i] = CountedAllocationBytes();
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      EXPECT_EQ((*model)->buffer_bytes(), *bytes) << json << " at batch " << config.max_batch;
      // Nothing else Create allocates comes near them: the parameters, their gradients and
      // the layers' bookkeeping.
      EXPECT_GE(allocated[i], *bytes + 2 * (*model)->params().size_bytes()) << json;
    }
    EXPECT_GT(expected[1], expected[0]) << json;
    EXPECT_EQ(allocated[1] - allocated[0], expected[1] - expected[0]) << json;
  }
}

// The Keras CNN's buffers counted by hand, per sample: outputs 6272 + 3136 + 3136 (dropout) + 128
// + 128 + 128 (dropout) + 10; the two gradient buffers at the widest output, 2 × 6272; the fused
// layers' argmax 6272 + 3136 and ReLU outputs 32·28·28 + 64·14·14; the dropout masks 3136 + 128.
// Once, whatever the batch: the columns 1·9·28·28 + 32·9·14·14 and a sample's gradients at the
// convolutions' outputs, 32·28·28 + 64·14·14. Four bytes each.
TEST_F(ModelSpecTest, ActivationBytesOfTheKerasCnnCountedByHand) {
  const ModelSpec spec = MustParse(
      R"({"input": [1, 28, 28], "layers": [{"conv2d": {"filters": 32, "kernel": 3,
          "padding": "same"}}, "relu", {"max_pool2d": {"pool": 2}}, {"conv2d": {"filters": 64,
          "kernel": 3, "padding": "same"}}, "relu", {"max_pool2d": {"pool": 2}}, "flatten",
          {"dropout": {"rate": 0.25}}, {"dense": {"units": 128}}, "relu",
          {"dropout": {"rate": 0.5}}, {"dense": {"units": 10}}, "softmax"]})");
  const std::uint64_t per_sample = (6272 + 3136 + 3136 + 128 + 128 + 128 + 10) + 2 * 6272 +
                                   (6272 + 3136) + (25088 + 12544) + (3136 + 128);
  const std::uint64_t once = (7056 + 56448) + (25088 + 12544);
  for (const int batch : {1, 64, 4096}) {
    ModelConfig config;
    config.max_batch = batch;
    auto bytes = ActivationBytes(spec, config);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(*bytes, (per_sample * batch + once) * 4) << batch;
  }
  ModelConfig config;
  config.max_batch = 0;
  EXPECT_FALSE(ActivationBytes(spec, config).ok());
}

TEST_F(ModelSpecTest, CreateRefusesWhatTheLossCannotTake) {
  ModelConfig config;
  const ModelSpec spec = MustParse(R"({"input": [1, 4, 4], "layers": ["relu"]})");
  auto model = Model::Create(spec, config);
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(model.status().message(), HasSubstr("the loss needs a flat output"));
  config.max_batch = 0;
  auto batch = Model::Create(MustParse(R"({"input": [4], "layers": ["relu"]})"), config);
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(), HasSubstr("max_batch must be positive"));
}

}  // namespace
}  // namespace ringtrain::model
