// GpuModel against the CPU model (the reference): the same parameters uploaded, fresh random
// inputs for every check, gradients poisoned before each step, ‖gpu − cpu‖ / ‖cpu‖ per weight
// and bias array, printed and checked against the bounds in model_test_data.h (which also
// explains the two kinds of random data used).
#include "runner/model/cuda/gpu_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "runner/model/gemm.h"
#include "runner/model/model.h"
#include "tests/unit/gpu/gpu_test_util.h"
#include "tests/unit/gpu/model_test_data.h"

namespace ringtrain::gpu {
namespace {

using model::ModelConfig;
using model::ParamRange;
using testing::Batch;
using testing::Config;
using testing::Data;
using testing::Download;
using testing::kFp32Tolerance;
using testing::kTf32GradTolerance;
using testing::kTf32LossTolerance;
using testing::OutFeatures;
using testing::RandomBatch;
using testing::RandomParams;
using testing::RelErr;
using testing::Rng;
using testing::TestStream;
using testing::Upload;

struct Case {
  std::string label;
  ModelConfig config;
  MathMode math;
  Data data;
  std::vector<int> batches;  // successive steps on one model (batch sizes change in between)
  double loss_tol;
  double grad_tol;
};

std::vector<Case> ForwardBackwardCases() {
  ModelConfig small_mlp = Config("mlp", 7, 7, 8);
  small_mlp.hidden = 32;
  const auto fp32 = [](std::string label, ModelConfig c, Data d, std::vector<int> batches) {
    return Case{"fp32 " + label, c, MathMode::kFp32, d, batches, kFp32Tolerance, kFp32Tolerance};
  };
  const auto tf32 = [](std::string label, ModelConfig c, std::vector<int> batches) {
    return Case{"tf32 " + label,     c,       MathMode::kTf32,
                Data::kExactForward, batches, kTf32LossTolerance,
                kTf32GradTolerance};
  };
  return {
      fp32("mlp 784-256-10 exact-forward", Config("mlp", 28, 28, 64), Data::kExactForward, {64, 7}),
      fp32("cnn 28x28 exact-forward", Config("cnn", 28, 28, 16), Data::kExactForward, {8, 3}),
      fp32("cnn 11x13 (odd edges) exact-forward", Config("cnn", 11, 13, 4), Data::kExactForward,
           {4, 1}),
      fp32("mlp 49-32-10 continuous", small_mlp, Data::kContinuous, {5}),
      fp32("cnn 9x9 continuous", Config("cnn", 9, 9, 2), Data::kContinuous, {2}),
      fp32("cnn 10x7 (odd edges) continuous", Config("cnn", 10, 7, 2), Data::kContinuous, {2}),
      tf32("mlp 784-256-10 exact-forward", Config("mlp", 28, 28, 64), {64, 7}),
      tf32("cnn 28x28 exact-forward", Config("cnn", 28, 28, 16), {8, 3}),
      tf32("cnn 11x13 (odd edges) exact-forward", Config("cnn", 11, 13, 4), {4}),
  };
}

class GpuModelTest : public ::testing::Test {
 protected:
  void SetUp() override { model::SetKernelThreads(1); }
};

void RunForwardBackward(const Case& c, std::uint64_t seed) {
  SCOPED_TRACE(c.label);
  TestStream stream;
  RT_ASSERT_OK(stream.status());
  auto gpu_or = GpuModel::Create(c.config, c.math, stream.get());
  RT_ASSERT_OK(gpu_or.status());
  GpuModel& gpu = **gpu_or;
  auto cpu_or = model::Model::Create(c.config);
  RT_ASSERT_OK(cpu_or.status());
  model::Model& cpu = **cpu_or;
  const std::vector<ParamRange> ranges = cpu.layer_ranges();
  ASSERT_EQ(gpu.num_params(), cpu.params().size());
  ASSERT_EQ(gpu.layer_ranges().size(), ranges.size());

  Rng rng(seed);
  const std::vector<float> params = RandomParams(c.config, ranges, c.data, rng);
  std::copy(params.begin(), params.end(), cpu.params().begin());
  RT_ASSERT_OK(Upload(params, gpu.params()));

  const int max_n = *std::max_element(c.batches.begin(), c.batches.end());
  const std::size_t sample =
      static_cast<std::size_t>(c.config.channels) * c.config.height * c.config.width;
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  DeviceBuffer<double> acc;
  RT_ASSERT_OK(x.Allocate(sample * max_n));
  RT_ASSERT_OK(y.Allocate(max_n));
  RT_ASSERT_OK(acc.Allocate(1));
  const std::vector<double> acc_start = {0.25};

  for (const int n : c.batches) {
    SCOPED_TRACE("batch " + std::to_string(n));
    const Batch batch = RandomBatch(c.config, n, c.data, rng);
    RT_ASSERT_OK(Upload(batch.x, x.data()));
    RT_ASSERT_OK(Upload(batch.y, y.data()));
    RT_ASSERT_OK(Upload(acc_start, acc.data()));
    RT_ASSERT_OK(testing::PoisonFloats(gpu.grads(), gpu.num_params()));

    std::vector<ParamRange> gpu_ready;
    RT_ASSERT_OK(gpu.ForwardBackward(x.data(), y.data(), n, acc.data(),
                                     [&](const ParamRange& r) { gpu_ready.push_back(r); }));
    RT_ASSERT_OK(stream.Sync());
    std::vector<ParamRange> cpu_ready;
    const float cpu_loss = cpu.ForwardBackward(
        batch.x.data(), batch.y.data(), n, [&](const ParamRange& r) { cpu_ready.push_back(r); });

    std::vector<float> grads;
    std::vector<double> acc_after;
    RT_ASSERT_OK(Download(gpu.grads(), gpu.num_params(), grads));
    RT_ASSERT_OK(Download(acc.data(), 1, acc_after));
    ASSERT_TRUE(testing::AllFinite(grads)) << "a gradient was not written (or is not finite)";

    const double gpu_loss = acc_after[0] - acc_start[0];
    const double loss_err = std::fabs(gpu_loss - cpu_loss) / std::fabs(cpu_loss);
    std::printf("[ measured ] %s, n=%d: loss %.7f vs cpu %.7f, rel err %.3g\n", c.label.c_str(), n,
                gpu_loss, static_cast<double>(cpu_loss), loss_err);
    EXPECT_LE(loss_err, c.loss_tol);

    const std::vector<int> outs = OutFeatures(c.config);
    const std::span<const float> cpu_grads = cpu.grads();
    for (std::size_t l = 0; l < ranges.size(); ++l) {
      const std::size_t w_count = ranges[l].count - static_cast<std::size_t>(outs[l]);
      const std::span<const float> g(grads.data() + ranges[l].offset, ranges[l].count);
      const std::span<const float> r = cpu_grads.subspan(ranges[l].offset, ranges[l].count);
      const double w_err = RelErr(g.first(w_count), r.first(w_count));
      const double b_err = RelErr(g.subspan(w_count), r.subspan(w_count));
      std::printf("[ measured ]   layer %zu: dW rel err %.3g, db rel err %.3g\n", l, w_err, b_err);
      EXPECT_LE(w_err, c.grad_tol) << "layer " << l << " weights";
      EXPECT_LE(b_err, c.grad_tol) << "layer " << l << " bias";
    }

    // Last layer first, each range once, like the CPU model.
    ASSERT_EQ(gpu_ready.size(), cpu_ready.size());
    for (std::size_t i = 0; i < gpu_ready.size(); ++i) {
      EXPECT_EQ(gpu_ready[i].offset, cpu_ready[i].offset);
      EXPECT_EQ(gpu_ready[i].count, cpu_ready[i].count);
      EXPECT_EQ(gpu_ready[i].offset, ranges[ranges.size() - 1 - i].offset);
    }
  }
}

TEST_F(GpuModelTest, ForwardBackwardMatchesCpu) {
  RT_REQUIRE_GPU();
  std::printf("[ device   ] %s\n", DeviceDescription(0).c_str());
  std::random_device seeds;
  for (const Case& c : ForwardBackwardCases()) {
    const std::uint64_t seed = (std::uint64_t{seeds()} << 32) | seeds();
    std::printf("[ seed     ] %s: %llu\n", c.label.c_str(), static_cast<unsigned long long>(seed));
    RunForwardBackward(c, seed);
  }
}

TEST_F(GpuModelTest, InitialWeightsAndLayoutEqualCpu) {
  RT_REQUIRE_GPU();
  for (const char* name : {"mlp", "cnn"}) {
    SCOPED_TRACE(name);
    ModelConfig c = Config(name, 28, 28, 32);
    c.seed = 1234;
    TestStream stream;
    RT_ASSERT_OK(stream.status());
    auto gpu = GpuModel::Create(c, MathMode::kFp32, stream.get());
    RT_ASSERT_OK(gpu.status());
    auto cpu = model::Model::Create(c);
    RT_ASSERT_OK(cpu.status());
    ASSERT_EQ((*gpu)->num_params(), (*cpu)->params().size());
    const auto& gr = (*gpu)->layer_ranges();
    const auto& cr = (*cpu)->layer_ranges();
    ASSERT_EQ(gr.size(), cr.size());
    for (std::size_t i = 0; i < gr.size(); ++i) {
      EXPECT_EQ(gr[i].offset, cr[i].offset);
      EXPECT_EQ(gr[i].count, cr[i].count);
    }
    std::vector<float> params;
    RT_ASSERT_OK(Download((*gpu)->params(), (*gpu)->num_params(), params));
    EXPECT_TRUE(testing::BitwiseEqual(params, (*cpu)->params()));
  }
}

// Evaluate: summed loss and correct count added to the device sums, against the CPU.
TEST_F(GpuModelTest, EvaluateMatchesCpu) {
  RT_REQUIRE_GPU();
  struct EvalCase {
    std::string label;
    ModelConfig config;
    MathMode math;
    Data data;
    int n;
    double tol;
    int correct_slack;  // argmax near-ties may flip under TF32's rounding of the logits
  };
  const std::vector<EvalCase> cases = {
      {"fp32 cnn 9x9 continuous", Config("cnn", 9, 9, 4), MathMode::kFp32, Data::kContinuous, 3,
       kFp32Tolerance, 0},
      {"fp32 mlp exact-forward", Config("mlp", 28, 28, 200), MathMode::kFp32, Data::kExactForward,
       200, kFp32Tolerance, 0},
      {"fp32 cnn exact-forward", Config("cnn", 28, 28, 64), MathMode::kFp32, Data::kExactForward,
       64, kFp32Tolerance, 0},
      {"tf32 cnn exact-forward", Config("cnn", 28, 28, 64), MathMode::kTf32, Data::kExactForward,
       64, kTf32LossTolerance, 1},
  };
  std::random_device seeds;
  for (const EvalCase& c : cases) {
    SCOPED_TRACE(c.label);
    TestStream stream;
    RT_ASSERT_OK(stream.status());
    auto gpu = GpuModel::Create(c.config, c.math, stream.get());
    RT_ASSERT_OK(gpu.status());
    auto cpu = model::Model::Create(c.config);
    RT_ASSERT_OK(cpu.status());
    Rng rng((std::uint64_t{seeds()} << 32) | seeds());
    const auto params = RandomParams(c.config, (*cpu)->layer_ranges(), c.data, rng);
    std::copy(params.begin(), params.end(), (*cpu)->params().begin());
    RT_ASSERT_OK(Upload(params, (*gpu)->params()));

    for (const bool tie : {false, true}) {
      SCOPED_TRACE(tie ? "all logits tied" : "random");
      std::vector<float> p = params;
      if (tie) {  // zero last layer: every logit is 0 and the first class wins the argmax
        const ParamRange& last = (*cpu)->layer_ranges().back();
        std::fill(p.begin() + static_cast<std::ptrdiff_t>(last.offset),
                  p.begin() + static_cast<std::ptrdiff_t>(last.offset + last.count), 0.0f);
      }
      std::copy(p.begin(), p.end(), (*cpu)->params().begin());
      RT_ASSERT_OK(Upload(p, (*gpu)->params()));
      const Batch batch = RandomBatch(c.config, c.n, c.data, rng);
      DeviceBuffer<float> x;
      DeviceBuffer<std::int32_t> y;
      DeviceBuffer<double> sums;
      RT_ASSERT_OK(x.Allocate(batch.x.size()));
      RT_ASSERT_OK(y.Allocate(batch.y.size()));
      RT_ASSERT_OK(sums.Allocate(2));
      RT_ASSERT_OK(Upload(batch.x, x.data()));
      RT_ASSERT_OK(Upload(batch.y, y.data()));
      const std::vector<double> start = {10.0, 3.0};
      RT_ASSERT_OK(Upload(start, sums.data()));
      RT_ASSERT_OK((*gpu)->Evaluate(x.data(), y.data(), c.n, sums.data()));
      RT_ASSERT_OK((*gpu)->Evaluate(x.data(), y.data(), 0, sums.data()));  // no-op
      RT_ASSERT_OK(stream.Sync());
      std::vector<double> got;
      RT_ASSERT_OK(Download(sums.data(), 2, got));
      const model::EvalResult want = (*cpu)->Evaluate(batch.x.data(), batch.y.data(), c.n);
      const double loss = got[0] - start[0];
      const double correct = got[1] - start[1];
      const double err = std::fabs(loss - want.loss_sum) / std::fabs(want.loss_sum);
      std::printf(
          "[ measured ] eval %s%s: loss_sum %.6f vs %.6f (rel %.3g), correct %.0f vs %lld\n",
          c.label.c_str(), tie ? " (tied)" : "", loss, want.loss_sum, err, correct,
          static_cast<long long>(want.correct));
      EXPECT_LE(err, c.tol);
      EXPECT_LE(std::fabs(correct - static_cast<double>(want.correct)),
                tie ? 0.0 : static_cast<double>(c.correct_slack));
      if (tie) {
        const auto zeros = std::count(batch.y.begin(), batch.y.end(), 0);
        EXPECT_EQ(correct, static_cast<double>(zeros));
        EXPECT_NEAR(loss, c.n * std::log(static_cast<double>(c.config.classes)), 1e-9 * c.n);
      }
    }
  }
}

TEST_F(GpuModelTest, RejectsBadBatches) {
  RT_REQUIRE_GPU();
  TestStream stream;
  RT_ASSERT_OK(stream.status());
  auto gpu = GpuModel::Create(Config("cnn", 28, 28, 4), MathMode::kFp32, stream.get());
  RT_ASSERT_OK(gpu.status());
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  DeviceBuffer<double> acc;
  RT_ASSERT_OK(x.Allocate(5 * 784));
  RT_ASSERT_OK(y.Allocate(5));
  RT_ASSERT_OK(acc.Allocate(2));
  EXPECT_EQ((*gpu)->ForwardBackward(x.data(), y.data(), 0, acc.data(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*gpu)->ForwardBackward(x.data(), y.data(), 5, acc.data(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*gpu)->ForwardBackward(x.data(), y.data(), 2, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*gpu)->Evaluate(x.data(), y.data(), 5, acc.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*gpu)->Evaluate(x.data(), y.data(), -1, acc.data()).code(),
            StatusCode::kInvalidArgument);
}

// Config errors are caught before the device is touched, so this runs everywhere.
TEST(GpuModelConfig, RejectsBadConfigsWithoutTouchingTheDevice) {
  ModelConfig bad_name = Config("resnet", 28, 28, 8);
  EXPECT_EQ(GpuModel::Create(bad_name, MathMode::kFp32, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  ModelConfig no_batch = Config("mlp", 28, 28, 0);
  EXPECT_EQ(GpuModel::Create(no_batch, MathMode::kFp32, nullptr).status().code(),
            StatusCode::kInvalidArgument);
  ModelConfig tiny_cnn = Config("cnn", 3, 3, 8);
  EXPECT_EQ(GpuModel::Create(tiny_cnn, MathMode::kTf32, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringtrain::gpu
