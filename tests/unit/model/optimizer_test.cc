#include "runner/model/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace ringtrain::model {
namespace {

std::unique_ptr<Optimizer> MustCreate(const OptimizerConfig& config, std::size_t n) {
  auto optimizer = Optimizer::Create(config, n);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status().ToString();
  return std::move(optimizer).value();
}

OptimizerConfig Sgd(double momentum, double weight_decay = 0.0) {
  OptimizerConfig c;
  c.name = "sgd";
  c.momentum = momentum;
  c.weight_decay = weight_decay;
  return c;
}

TEST(SgdTest, MomentumMatchesHandComputedSteps) {
  auto opt = MustCreate(Sgd(0.9), 2);
  std::vector<float> p = {1.0f, -2.0f};
  // buf = 0.9·buf + g; p −= 0.1·buf.
  const std::vector<std::vector<float>> grads = {{0.5f, 0.25f}, {0.5f, -0.5f}, {0.5f, 1.0f}};
  const std::vector<std::vector<float>> want_p = {
      {0.95f, -2.025f}, {0.855f, -1.9975f}, {0.7195f, -2.07275f}};
  const std::vector<std::vector<float>> want_buf = {
      {0.5f, 0.25f}, {0.95f, -0.275f}, {1.355f, 0.7525f}};
  for (std::size_t step = 0; step < grads.size(); ++step) {
    opt->Step(p, grads[step], 0.1);
    for (int i = 0; i < 2; ++i) {
      EXPECT_NEAR(p[i], want_p[step][i], 1e-6) << "step " << step << " param " << i;
      EXPECT_NEAR(opt->state()[i], want_buf[step][i], 1e-6) << "step " << step << " buf " << i;
    }
  }
  EXPECT_EQ(opt->steps(), 3);
}

TEST(SgdTest, WeightDecayIsAddedToTheGradient) {
  auto opt = MustCreate(Sgd(0.9, 0.1), 1);
  std::vector<float> p = {1.0f};
  const std::vector<float> g = {0.5f};
  // Step 1: g' = 0.5 + 0.1·1 = 0.6, p = 0.94. Step 2: g' = 0.594, buf = 1.134, p = 0.8266.
  opt->Step(p, g, 0.1);
  EXPECT_NEAR(p[0], 0.94f, 1e-6);
  opt->Step(p, g, 0.1);
  EXPECT_NEAR(p[0], 0.8266f, 1e-6);
  EXPECT_NEAR(opt->state()[0], 1.134f, 1e-6);
}

TEST(AdamTest, MatchesHandComputedStepsWithBiasCorrection) {
  OptimizerConfig config;  // adam, β = (0.9, 0.999), ε = 1e-8
  auto opt = MustCreate(config, 1);
  ASSERT_EQ(opt->state().size(), 2u);
  std::vector<float> p = {1.0f};
  // Step 1 moves by lr·sign(g) exactly: m̂ = g, v̂ = g². Step 2: m = 0.02, v = 3.1225e-4,
  // p −= 0.1 · (0.02/0.19) / √(3.1225e-4/0.001999). Step 3 likewise with g = 0.1.
  const float grads[] = {0.5f, -0.25f, 0.1f};
  const float want_p[] = {0.9f, 0.873366299f, 0.841841943f};
  const float want_m[] = {0.05f, 0.02f, 0.028f};
  const float want_v[] = {2.5e-4f, 3.1225e-4f, 3.2193775e-4f};
  for (int step = 0; step < 3; ++step) {
    opt->Step(p, std::span<const float>(&grads[step], 1), 0.1);
    EXPECT_NEAR(p[0], want_p[step], 2e-6) << "step " << step;
    EXPECT_NEAR(opt->state()[0], want_m[step], 1e-7) << "step " << step;
    EXPECT_NEAR(opt->state()[1], want_v[step], 1e-9) << "step " << step;
  }
}

TEST(AdamTest, WeightDecayIsAddedToTheGradient) {
  OptimizerConfig config;
  config.weight_decay = 0.1;
  auto opt = MustCreate(config, 1);
  std::vector<float> p = {1.0f};
  for (const float g : {0.5f, -0.25f, 0.1f}) opt->Step(p, std::span<const float>(&g, 1), 0.1);
  EXPECT_NEAR(p[0], 0.802403794f, 2e-6);
}

// A resumed run restores state() and steps(); the bias correction must then continue from there.
TEST(AdamTest, ResumeFromStateAndStepsContinuesIdentically) {
  OptimizerConfig config;
  auto original = MustCreate(config, 3);
  std::vector<float> p = {0.5f, -1.0f, 2.0f};
  const std::vector<float> g1 = {0.3f, -0.2f, 0.1f};
  const std::vector<float> g2 = {-0.1f, 0.4f, 0.2f};
  original->Step(p, g1, 0.01);
  original->Step(p, g2, 0.01);

  auto resumed = MustCreate(config, 3);
  std::ranges::copy(original->state(), resumed->state().begin());
  resumed->set_steps(original->steps());
  std::vector<float> q = p;
  original->Step(p, g1, 0.01);
  resumed->Step(q, g1, 0.01);
  EXPECT_EQ(p, q);
  EXPECT_EQ(resumed->steps(), 3);
}

TEST(OptimizerTest, UnknownOrInvalidConfigIsInvalidArgument) {
  OptimizerConfig config;
  config.name = "lamb";
  auto opt = Optimizer::Create(config, 4);
  ASSERT_FALSE(opt.ok());
  EXPECT_EQ(opt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opt.status().message().find("train.optimizer"), std::string::npos);
  EXPECT_NE(opt.status().message().find("lamb"), std::string::npos);

  EXPECT_EQ(Optimizer::Create(Sgd(1.5), 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Optimizer::Create(Sgd(0.9, -1.0), 4).status().code(), StatusCode::kInvalidArgument);
  config = OptimizerConfig{};
  config.eps = 0;
  EXPECT_EQ(Optimizer::Create(config, 4).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringtrain::model
