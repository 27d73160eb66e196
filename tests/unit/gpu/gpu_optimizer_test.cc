// GpuOptimizer against model::Optimizer: the same random parameters, state and gradients, five
// steps with changing learning rates and fresh gradients, weight decay on. The kernels round
// each operation like the CPU loop, so the results should be bit-identical; the check is the
// brief's ‖gpu − cpu‖ / ‖cpu‖ ≤ 1e-5 (and the measured error and bitwise equality are printed).
#include "runner/model/cuda/gpu_optimizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "runner/model/optimizer.h"
#include "tests/unit/gpu/gpu_test_util.h"

namespace ringtrain::gpu {
namespace {

using testing::Download;
using testing::RelErr;
using testing::TestStream;
using testing::Upload;

std::vector<float> RandomVector(std::size_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

void RunOptimizer(const model::OptimizerConfig& config, std::size_t n, std::size_t misalign) {
  SCOPED_TRACE(config.name + " n=" + std::to_string(n) + " offset=" + std::to_string(misalign));
  TestStream stream;
  RT_ASSERT_OK(stream.status());
  auto gpu = GpuOptimizer::Create(config, n, stream.get());
  RT_ASSERT_OK(gpu.status());
  auto cpu = model::Optimizer::Create(config, n);
  RT_ASSERT_OK(cpu.status());
  ASSERT_EQ((*gpu)->state_size(), (*cpu)->state().size());

  std::random_device seeds;
  std::mt19937_64 rng((std::uint64_t{seeds()} << 32) | seeds());
  std::vector<float> params = RandomVector(n, -1.0f, 1.0f, rng);
  // A resumed optimizer: non-zero state (v ≥ 0 for Adam).
  std::vector<float> state = RandomVector((*cpu)->state().size(), 0.0f, 0.01f, rng);
  std::copy(state.begin(), state.end(), (*cpu)->state().begin());
  (*cpu)->set_steps(3);
  (*gpu)->set_steps(3);

  // Parameters and gradients at an offset of `misalign` floats exercise the scalar kernel.
  DeviceBuffer<float> p;
  DeviceBuffer<float> g;
  RT_ASSERT_OK(p.Allocate(n + misalign));
  RT_ASSERT_OK(g.Allocate(n + misalign));
  RT_ASSERT_OK(Upload(params, p.data() + misalign));
  RT_ASSERT_OK(Upload(state, (*gpu)->state()));

  const double lrs[] = {1e-3, 5e-3, 2e-2, 1e-2, 3e-3};
  for (const double lr : lrs) {
    const std::vector<float> grads = RandomVector(n, -0.5f, 0.5f, rng);
    RT_ASSERT_OK(Upload(grads, g.data() + misalign));
    RT_ASSERT_OK((*gpu)->SetStep(lr));
    RT_ASSERT_OK((*gpu)->Step(p.data() + misalign, g.data() + misalign));
    (*cpu)->Step(params, grads, lr);
  }
  RT_ASSERT_OK(stream.Sync());
  EXPECT_EQ((*gpu)->steps(), (*cpu)->steps());

  std::vector<float> got_params;
  std::vector<float> got_state;
  RT_ASSERT_OK(Download(p.data() + misalign, n, got_params));
  RT_ASSERT_OK(Download((*gpu)->state(), (*gpu)->state_size(), got_state));
  const double p_err = RelErr(got_params, params);
  const double s_err = RelErr(got_state, (*cpu)->state());
  std::printf(
      "[ measured ] %s n=%zu offset=%zu: params rel err %.3g (bitwise %s), state rel "
      "err %.3g (bitwise %s)\n",
      config.name.c_str(), n, misalign, p_err,
      testing::BitwiseEqual(got_params, params) ? "equal" : "different", s_err,
      testing::BitwiseEqual(got_state, (*cpu)->state()) ? "equal" : "different");
  EXPECT_LE(p_err, 1e-5);
  EXPECT_LE(s_err, 1e-5);
}

TEST(GpuOptimizer, MatchesCpuOverFiveSteps) {
  RT_REQUIRE_GPU();
  model::OptimizerConfig sgd;
  sgd.name = "sgd";
  sgd.momentum = 0.9;
  sgd.weight_decay = 5e-4;
  model::OptimizerConfig adam;
  adam.name = "adam";
  adam.beta1 = 0.85;
  adam.beta2 = 0.995;
  adam.eps = 1e-7;
  adam.weight_decay = 1e-2;
  for (const auto& config : {sgd, adam}) {
    // 203530 is the mlp's parameter count (not a multiple of 4: Adam's v is misaligned, so the
    // scalar kernel runs); 4096 takes the float4 path; an offset of one float forces scalar.
    RunOptimizer(config, 203530, 0);
    RunOptimizer(config, 4096 + 3, 0);
    RunOptimizer(config, 4096, 0);
    RunOptimizer(config, 4096, 1);
    RunOptimizer(config, 1, 0);
  }
}

TEST(GpuOptimizer, RejectsBadConfigWithoutTouchingTheDevice) {
  model::OptimizerConfig bad;
  bad.name = "lamb";
  EXPECT_EQ(GpuOptimizer::Create(bad, 10, nullptr).status().code(), StatusCode::kInvalidArgument);
  bad.name = "adam";
  bad.beta1 = 1.0;
  EXPECT_EQ(GpuOptimizer::Create(bad, 10, nullptr).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringtrain::gpu
