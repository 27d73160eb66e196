// GpuModel built from a layer list against the CPU model built from the same list: every layer
// kind (strided and asymmetric "same" convolutions, average and overlapping max pools, tanh,
// sigmoid, GELU, dropout, both losses), the same initial weights, and the same dropout masks
// (both seeded alike before each step). FP32, small continuous-random cases (see
// model_test_data.h for why near-ties at a ReLU or a pool are rare there). Needs a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "runner/model/cuda/gpu_model.h"
#include "runner/model/gemm.h"
#include "runner/model/model.h"
#include "runner/model/model_spec.h"
#include "tests/unit/gpu/gpu_test_util.h"
#include "tests/unit/gpu/model_test_data.h"

namespace ringtrain::gpu {
namespace {

using model::ModelSpec;
using model::ParamRange;
using testing::Download;
using testing::RelErr;
using testing::Rng;
using testing::TestStream;
using testing::Upload;

// Transcendental activations (CUDA's tanhf/erff/expf against glibc's) differ by an ulp or two,
// and GEMM/convolution sums are ordered differently: a relative error of 1e-5 in the loss and
// 1e-4 in each gradient array is rounding, a wrong mask or index is > 1e-2.
constexpr double kLossTolerance = 1e-5;
constexpr double kGradTolerance = 1e-4;

struct SpecCase {
  std::string label;
  std::string json;
  std::vector<int> batches;  // successive steps (batch sizes change in between)
};

std::vector<SpecCase> Cases() {
  return {
      {"keras cnn with dropout",
       R"({"input": [1, 12, 12], "layers": [
          {"conv2d": {"filters": 8, "kernel": 3, "padding": "same"}}, "relu",
          {"max_pool2d": {"pool": 2}}, {"dropout": {"rate": 0.25}},
          {"conv2d": {"filters": 6, "kernel": 3}}, "relu", {"max_pool2d": {"pool": 2}},
          {"dropout": {"rate": 0.25}}, "flatten", {"dense": {"units": 16}}, "relu",
          {"dropout": {"rate": 0.5}}, {"dense": {"units": 5}}, "softmax"]})",
       {6, 2, 6}},
      {"strided asymmetric same conv, gelu, tanh, avg and overlapping max pools, mse",
       R"({"input": [3, 13, 10], "layers": [
          {"conv2d": {"filters": 4, "kernel": 4, "stride": 2, "padding": "same"}}, "gelu",
          {"conv2d": {"filters": 5, "kernel": 2, "padding": "same"}}, "tanh",
          {"avg_pool2d": {"pool": 2, "stride": 1}}, {"max_pool2d": {"pool": 3, "stride": 1}},
          "flatten", {"dense": {"units": 3}}, "sigmoid"], "loss": "mse"})",
       {4, 3}},
      {"table: dense, tanh, sigmoid, dropout",
       R"({"input": [30], "layers": [
          {"dense": {"units": 24}}, "tanh", {"dropout": {"rate": 0.3}}, {"dense": {"units": 12}},
          "sigmoid", {"dense": {"units": 3}}]})",
       {16, 5}},
  };
}

ModelSpec Parse(const std::string& json) {
  auto spec = model::ParseModelSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : ModelSpec{};
}

class GpuSpecModelTest : public ::testing::Test {
 protected:
  void SetUp() override { model::SetKernelThreads(1); }
};

void RunCase(const SpecCase& c, std::uint64_t seed) {
  SCOPED_TRACE(c.label);
  const ModelSpec spec = Parse(c.json);
  const auto report = model::InferShapes(spec);
  RT_ASSERT_OK(report.status());
  const bool regression = spec.loss == model::Loss::kMse;
  const int outputs = report->output.c;
  const std::size_t sample = spec.input.size();
  int max_n = 0;
  for (const int n : c.batches) max_n = std::max(max_n, n);
  model::ModelConfig config;
  config.max_batch = max_n;
  config.seed = seed;
  config.dropout_seed = seed ^ 0x5EED;

  TestStream stream;
  RT_ASSERT_OK(stream.status());
  auto gpu_or = GpuModel::Create(spec, config, MathMode::kFp32, stream.get());
  RT_ASSERT_OK(gpu_or.status());
  GpuModel& gpu = **gpu_or;
  auto cpu_or = model::Model::Create(spec, config);
  RT_ASSERT_OK(cpu_or.status());
  model::Model& cpu = **cpu_or;
  EXPECT_EQ(gpu.regression(), regression);
  EXPECT_EQ(gpu.outputs(), outputs);
  ASSERT_EQ(gpu.num_params(), cpu.params().size());
  std::vector<float> initial;
  RT_ASSERT_OK(Download(gpu.params(), gpu.num_params(), initial));
  EXPECT_TRUE(testing::BitwiseEqual(initial, cpu.params())) << "initial weights differ";

  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  DeviceBuffer<float> t;
  DeviceBuffer<double> acc;
  RT_ASSERT_OK(x.Allocate(sample * max_n));
  RT_ASSERT_OK(y.Allocate(max_n));
  RT_ASSERT_OK(t.Allocate(static_cast<std::size_t>(outputs) * max_n));
  RT_ASSERT_OK(acc.Allocate(1));
  Rng rng(seed);
  std::uint64_t step_seed = seed;
  for (const int n : c.batches) {
    SCOPED_TRACE("batch " + std::to_string(n));
    std::vector<float> hx(sample * n);
    for (float& v : hx) v = rng.Uniform(-1.0f, 2.0f);
    std::vector<std::int32_t> hy(n);
    for (auto& v : hy) v = rng.Int(0, outputs - 1);
    std::vector<float> ht(static_cast<std::size_t>(outputs) * n);
    for (float& v : ht) v = rng.Uniform(0.0f, 1.0f);
    RT_ASSERT_OK(Upload(hx, x.data()));
    RT_ASSERT_OK(Upload(hy, y.data()));
    RT_ASSERT_OK(Upload(ht, t.data()));
    RT_ASSERT_OK(Upload(std::vector<double>{0.0}, acc.data()));
    RT_ASSERT_OK(testing::PoisonFloats(gpu.grads(), gpu.num_params()));
    step_seed = step_seed * 6364136223846793005ULL + 1442695040888963407ULL;
    RT_ASSERT_OK(gpu.SeedDropout(step_seed));
    cpu.SeedDropout(step_seed);

    std::vector<ParamRange> gpu_ready;
    const auto on_ready = [&](const ParamRange& r) { gpu_ready.push_back(r); };
    float cpu_loss = 0;
    if (regression) {
      RT_ASSERT_OK(gpu.ForwardBackward(x.data(), t.data(), n, acc.data(), on_ready));
      cpu_loss = cpu.ForwardBackward(hx.data(), ht.data(), n, {});
    } else {
      RT_ASSERT_OK(gpu.ForwardBackward(x.data(), y.data(), n, acc.data(), on_ready));
      cpu_loss = cpu.ForwardBackward(hx.data(), hy.data(), n, {});
    }
    RT_ASSERT_OK(stream.Sync());
    std::vector<float> grads;
    std::vector<double> loss;
    RT_ASSERT_OK(Download(gpu.grads(), gpu.num_params(), grads));
    RT_ASSERT_OK(Download(acc.data(), 1, loss));
    ASSERT_TRUE(testing::AllFinite(grads)) << "a gradient was not written (or is not finite)";
    const double loss_err = std::fabs(loss[0] - cpu_loss) / std::fabs(cpu_loss);
    std::printf("[ measured ] %s, n=%d: loss %.7f vs cpu %.7f, rel err %.3g\n", c.label.c_str(), n,
                loss[0], static_cast<double>(cpu_loss), loss_err);
    EXPECT_LE(loss_err, kLossTolerance);
    const auto& ranges = cpu.layer_ranges();
    for (std::size_t l = 0; l < ranges.size(); ++l) {
      const std::span<const float> g(grads.data() + ranges[l].offset, ranges[l].count);
      const double err = RelErr(g, cpu.grads().subspan(ranges[l].offset, ranges[l].count));
      std::printf("[ measured ]   layer %zu: grad rel err %.3g\n", l, err);
      EXPECT_LE(err, kGradTolerance) << "layer " << l;
    }
    ASSERT_EQ(gpu_ready.size(), ranges.size());
    for (std::size_t i = 0; i < gpu_ready.size(); ++i) {
      EXPECT_EQ(gpu_ready[i].offset, ranges[ranges.size() - 1 - i].offset);
    }

    // Evaluation: dropout is the identity on both sides.
    DeviceBuffer<double> sums;
    RT_ASSERT_OK(sums.Allocate(2));
    RT_ASSERT_OK(Upload(std::vector<double>{0.0, 0.0}, sums.data()));
    model::EvalResult want;
    if (regression) {
      RT_ASSERT_OK(gpu.Evaluate(x.data(), t.data(), n, sums.data()));
      want = cpu.Evaluate(hx.data(), ht.data(), n);
    } else {
      RT_ASSERT_OK(gpu.Evaluate(x.data(), y.data(), n, sums.data()));
      want = cpu.Evaluate(hx.data(), hy.data(), n);
    }
    RT_ASSERT_OK(stream.Sync());
    std::vector<double> got;
    RT_ASSERT_OK(Download(sums.data(), 2, got));
    EXPECT_LE(std::fabs(got[0] - want.loss_sum) / std::fabs(want.loss_sum), kLossTolerance);
    EXPECT_EQ(got[1], static_cast<double>(want.correct));
  }
}

TEST_F(GpuSpecModelTest, EveryLayerKindMatchesTheCpuModel) {
  RT_REQUIRE_GPU();
  std::random_device seeds;
  for (const SpecCase& c : Cases()) {
    const std::uint64_t seed = (std::uint64_t{seeds()} << 32) | seeds();
    std::printf("[ seed     ] %s: %llu\n", c.label.c_str(), static_cast<unsigned long long>(seed));
    RunCase(c, seed);
  }
}

// The labels path on a regression model and the targets path on a classifier are refused.
TEST_F(GpuSpecModelTest, TheWrongTargetKindIsRefused) {
  RT_REQUIRE_GPU();
  TestStream stream;
  RT_ASSERT_OK(stream.status());
  model::ModelConfig config;
  config.max_batch = 2;
  auto mse = GpuModel::Create(Parse(Cases()[1].json), config, MathMode::kFp32, stream.get());
  RT_ASSERT_OK(mse.status());
  auto ce = GpuModel::Create(Parse(Cases()[2].json), config, MathMode::kFp32, stream.get());
  RT_ASSERT_OK(ce.status());
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  DeviceBuffer<double> acc;
  RT_ASSERT_OK(x.Allocate(2 * 3 * 13 * 10));
  RT_ASSERT_OK(y.Allocate(2));
  RT_ASSERT_OK(acc.Allocate(2));
  EXPECT_EQ((*mse)->ForwardBackward(x.data(), y.data(), 2, acc.data(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*ce)->ForwardBackward(x.data(), x.data(), 2, acc.data(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*mse)->Evaluate(x.data(), y.data(), 2, acc.data()).code(),
            StatusCode::kInvalidArgument);
}

// A spec that does not fit is refused before the device is touched (this runs everywhere).
TEST(GpuSpecModelConfig, RefusesASpecThatDoesNotFitWithoutTouchingTheDevice) {
  model::ModelConfig config;
  config.max_batch = 4;
  auto spec = model::ParseModelSpec(
      R"({"input": [1, 8, 8], "layers": [{"conv2d": {"filters": 2, "kernel": 3}}]})");
  ASSERT_TRUE(spec.ok());
  auto gpu = GpuModel::Create(*spec, config, MathMode::kFp32, nullptr);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gpu.status().message().find("flat output"), std::string::npos)
      << gpu.status().message();
}

}  // namespace
}  // namespace ringtrain::gpu
