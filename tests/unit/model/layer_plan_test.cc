// PlanLayers, what the CUDA model builds from a spec: its parameter layout must be the CPU
// model's (checkpoints and gradient buckets are shared), its padding must give each
// convolution the spec's output, and its dropout offsets must be the CPU streams'.
#include "runner/model/layer_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runner/model/dropout_mask.h"
#include "runner/model/gemm.h"
#include "runner/model/model.h"
#include "runner/model/model_spec.h"

namespace ringtrain::model {
namespace {

ModelSpec MustParse(const std::string& json) {
  auto spec = ParseModelSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : ModelSpec{};
}

LayerPlan MustPlan(const ModelSpec& spec) {
  auto plan = PlanLayers(spec);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : LayerPlan{};
}

std::unique_ptr<Model> MustCreate(const ModelSpec& spec, std::uint64_t dropout_seed = 0) {
  ModelConfig config;
  config.max_batch = 4;
  config.dropout_seed = dropout_seed;
  auto model = Model::Create(spec, config);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return model.ok() ? std::move(model).value() : nullptr;
}

class LayerPlanTest : public ::testing::Test {
 protected:
  void SetUp() override { SetKernelThreads(1); }
};

const char* const kSpecs[] = {
    // Keras' Fashion-MNIST CNN with dropout and a softmax output.
    R"({"input": [1, 28, 28], "layers": [
        {"conv2d": {"filters": 32, "kernel": 3, "padding": "same"}}, "relu",
        {"max_pool2d": {"pool": 2}}, {"dropout": {"rate": 0.25}},
        {"conv2d": {"filters": 64, "kernel": 3}}, "relu", {"max_pool2d": {"pool": 2}},
        {"dropout": {"rate": 0.25}}, "flatten", {"dense": {"units": 128}}, "relu",
        {"dropout": {"rate": 0.5}}, {"dense": {"units": 10}}, "softmax"]})",
    // Strided "same" convolutions with odd padding, average and overlapping max pools.
    R"({"input": [3, 13, 10], "layers": [
        {"conv2d": {"filters": 4, "kernel": 4, "stride": 2, "padding": "same"}}, "gelu",
        {"conv2d": {"filters": 5, "kernel": 2, "stride": 1, "padding": "same"}}, "tanh",
        {"avg_pool2d": {"pool": 2, "stride": 1}}, {"max_pool2d": {"pool": 3, "stride": 1}},
        "flatten", {"dropout": {"rate": 0}}, {"dense": {"units": 3}}, "sigmoid"],
        "loss": "mse"})",
    // A table: dense layers only.
    R"({"input": [30], "layers": [{"dense": {"units": 16}}, "relu", {"dense": {"units": 2}}]})",
};

TEST_F(LayerPlanTest, TheParameterLayoutIsTheCpuModels) {
  for (const char* json : kSpecs) {
    SCOPED_TRACE(json);
    const ModelSpec spec = MustParse(json);
    const LayerPlan plan = MustPlan(spec);
    auto cpu = MustCreate(spec);
    ASSERT_NE(cpu, nullptr);
    EXPECT_EQ(plan.num_params, cpu->params().size());
    ASSERT_EQ(plan.ranges.size(), cpu->layer_ranges().size());
    for (std::size_t i = 0; i < plan.ranges.size(); ++i) {
      EXPECT_EQ(plan.ranges[i].offset, cpu->layer_ranges()[i].offset) << i;
      EXPECT_EQ(plan.ranges[i].count, cpu->layer_ranges()[i].count) << i;
    }
    // The layers chain, and each parameterized layer owns its range.
    Shape shape = spec.input;
    for (const PlannedLayer& layer : plan.layers) {
      EXPECT_EQ(layer.in, shape);
      EXPECT_NE(layer.kind, LayerKind::kSoftmax);
      shape = layer.out;
      if (layer.range >= 0) {
        EXPECT_EQ(plan.ranges[layer.range].count, layer.num_params);
      }
    }
    const ShapeReport report = *InferShapes(spec);
    EXPECT_EQ(shape, report.output);
    EXPECT_EQ(plan.outputs, report.output.c);
    EXPECT_EQ(plan.loss, spec.loss);
  }
}

TEST_F(LayerPlanTest, PresetsPlanLikeTheirModels) {
  for (const char* name : {"mlp", "cnn"}) {
    auto spec = PresetSpec(name, Shape{1, 28, 28}, 10);
    ASSERT_TRUE(spec.ok());
    const LayerPlan plan = MustPlan(*spec);
    ModelConfig config;
    config.name = name;
    config.max_batch = 1;
    auto cpu = Model::Create(config);
    ASSERT_TRUE(cpu.ok());
    EXPECT_EQ(plan.num_params, (*cpu)->params().size()) << name;
    ASSERT_EQ(plan.ranges.size(), (*cpu)->layer_ranges().size()) << name;
  }
}

TEST_F(LayerPlanTest, SamePaddingPutsTheOddPixelLastAndGivesTheSpecsOutput) {
  const LayerPlan plan = MustPlan(MustParse(kSpecs[1]));
  ASSERT_GE(plan.layers.size(), 3u);
  const PlannedLayer& strided = plan.layers[0];
  // 13 rows, kernel 4, stride 2: out 7, total (7 − 1)·2 + 4 − 13 = 3 → 1 above, 2 below;
  // 10 columns: out 5, total 4·2 + 4 − 10 = 2 → 1 and 1.
  EXPECT_EQ(strided.out, (Shape{4, 7, 5}));
  EXPECT_EQ(strided.pad_top, 1);
  EXPECT_EQ(strided.pad_bottom, 2);
  EXPECT_EQ(strided.pad_left, 1);
  EXPECT_EQ(strided.pad_right, 1);
  EXPECT_FALSE(strided.symmetric());
  const PlannedLayer& even = plan.layers[2];  // kernel 2, stride 1: one zero, below and right
  EXPECT_EQ(even.pad_top + even.pad_bottom, 1);
  EXPECT_EQ(even.pad_bottom, 1);
  EXPECT_EQ(even.pad_right, 1);
  for (const PlannedLayer& layer : plan.layers) {
    if (layer.kind != LayerKind::kConv2d) continue;
    const Shape p = layer.padded_in();
    EXPECT_EQ((p.h - layer.kernel) / layer.stride + 1, layer.out.h);
    EXPECT_EQ((p.w - layer.kernel) / layer.stride + 1, layer.out.w);
  }
  // The presets' kernel-3 "same" convolutions are symmetric: cuDNN pads them itself.
  const LayerPlan cnn = MustPlan(*PresetSpec("cnn", Shape{1, 28, 28}, 10));
  for (const PlannedLayer& layer : cnn.layers) {
    if (layer.kind == LayerKind::kConv2d) {
      EXPECT_TRUE(layer.symmetric());
    }
  }
  for (const int in : {1, 2, 5, 13, 28}) {
    for (const int k : {1, 2, 3, 4, 7}) {
      for (const int s : {1, 2, 3}) {
        const int out = (in + s - 1) / s;
        const Pads pads = SamePadding(in, out, k, s);
        EXPECT_GE(pads.after, pads.before);
        EXPECT_LE(pads.after - pads.before, 1);
        if (in + pads.before + pads.after >= k) {
          EXPECT_EQ((in + pads.before + pads.after - k) / s + 1, out) << in << " " << k << " " << s;
        }
      }
    }
  }
}

// The offsets are the CPU model's streams: with x = 1 and targets 0, an mse model made of two
// dropouts outputs the product of their masks, which must be the hash of (seed + offset, call 0).
TEST_F(LayerPlanTest, DropoutOffsetsAreTheCpuModelsStreams) {
  const ModelSpec spec = MustParse(R"({"input": [40], "layers": [{"dropout": {"rate": 0.5}},
      {"dropout": {"rate": 0}}, {"dropout": {"rate": 0.3}}], "loss": "mse"})");
  const LayerPlan plan = MustPlan(spec);
  ASSERT_EQ(plan.layers.size(), 2u);  // the rate-0 dropout is the identity
  EXPECT_EQ(plan.layers[0].dropout_offset, kDropoutStreamStride);
  EXPECT_EQ(plan.layers[1].dropout_offset, 2 * kDropoutStreamStride);
  const std::uint64_t seed = 0xC0FFEE;
  auto cpu = MustCreate(spec, seed);
  ASSERT_NE(cpu, nullptr);
  const int n = 3;
  const std::vector<float> x(40 * n, 1.0f);
  const std::vector<float> targets(40 * n, 0.0f);
  double want = 0;
  for (int i = 0; i < 40 * n; ++i) {
    double y = 1.0;
    for (const PlannedLayer& layer : plan.layers) {
      const bool drop = DropoutUniform(seed + layer.dropout_offset, 0,
                                       static_cast<std::uint64_t>(i)) < layer.rate;
      y *= drop ? 0.0 : static_cast<double>(static_cast<float>(1.0 / (1.0 - layer.rate)));
    }
    want += y * y;
  }
  want /= 40.0 * n;
  EXPECT_NEAR(cpu->ForwardBackward(x.data(), targets.data(), n, {}), want, 1e-5);
}

TEST_F(LayerPlanTest, RefusesWhatTheCpuModelRefuses) {
  auto spec = ParseModelSpec(R"({"input": [1, 8, 8], "layers": [{"conv2d": {"filters": 2,
      "kernel": 3}}], "loss": "mse"})");
  ASSERT_TRUE(spec.ok());
  auto plan = PlanLayers(*spec);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("flat output"), std::string::npos);
}

}  // namespace
}  // namespace ringtrain::model
