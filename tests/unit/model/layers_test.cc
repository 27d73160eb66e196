#include "runner/model/layers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "runner/model/gemm.h"
#include "tests/unit/model/grad_check.h"

namespace ringtrain::model {
namespace {

constexpr double kTolerance = 1e-2;

class LayerGradientTest : public ::testing::Test {
 protected:
  void SetUp() override { model::SetKernelThreads(1); }

  std::vector<float> Uniform(std::size_t count, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> out(count);
    for (float& v : out) v = dist(rng_);
    return out;
  }

  // Values at least `gap` away from zero, so a ±eps step never crosses ReLU's kink.
  std::vector<float> AwayFromZero(std::size_t count, float gap) {
    std::vector<float> out = Uniform(count, gap, 1.0f);
    std::bernoulli_distribution negative(0.5);
    for (float& v : out) v = negative(rng_) ? -v : v;
    return out;
  }

  // Distinct values spaced `gap` apart in random order, so no max-pool window has a near tie.
  std::vector<float> DistinctShuffled(std::size_t count, float gap) {
    std::vector<float> out(count);
    for (std::size_t i = 0; i < count; ++i) out[i] = gap * static_cast<float>(i) - 1.0f;
    std::shuffle(out.begin(), out.end(), rng_);
    return out;
  }

  // Checks the layer's parameter and input gradients against L(x, θ) = Σ r ⊙ layer(x; θ) for a
  // fixed random r, whose gradient with respect to the output is exactly r.
  void CheckLayer(Layer& layer, std::vector<float> x, int n, float eps) {
    std::vector<float> params = Uniform(layer.num_params(), -1.0f, 1.0f);
    std::vector<float> grads(layer.num_params(), std::nanf(""));
    layer.Bind(params.data(), grads.data());
    const std::vector<float> r = Uniform(layer.out_shape().size() * n, -1.0f, 1.0f);
    std::vector<float> y(r.size());
    auto objective = [&] {
      layer.Forward(x.data(), y.data(), n);
      return std::inner_product(r.begin(), r.end(), y.begin(), 0.0, std::plus<>(),
                                [](float a, float b) { return double{a} * b; });
    };
    std::vector<float> dx(x.size(), std::nanf(""));
    objective();
    layer.Backward(x.data(), r.data(), dx.data(), n);
    const std::vector<float> analytic_params = grads;

    const GradCheck param =
        CompareWithFiniteDifferences(params, analytic_params, objective, {.eps = eps});
    EXPECT_LT(param.worst, kTolerance) << "parameters: " << param;
    const GradCheck input = CompareWithFiniteDifferences(x, dx, objective, {.eps = eps});
    EXPECT_LT(input.worst, kTolerance) << "input: " << input;

    // The first layer skips dx; its parameter gradients must not depend on that.
    objective();
    layer.Backward(x.data(), r.data(), nullptr, n);
    EXPECT_EQ(grads, analytic_params);
  }

  std::mt19937_64 rng_{7};
};

TEST_F(LayerGradientTest, Linear) {
  Linear layer(5, 4);
  CheckLayer(layer, Uniform(3 * 5, -1.0f, 1.0f), 3, 0.05f);
}

TEST_F(LayerGradientTest, ReLU) {
  ReLU layer(Shape{2, 3, 3});
  CheckLayer(layer, AwayFromZero(2 * 2 * 3 * 3, 0.1f), 2, 0.01f);
}

TEST_F(LayerGradientTest, Conv2dSamePadding3x3) {
  Conv2d layer(Shape{2, 5, 6}, 3, 3, 1);
  ASSERT_EQ(layer.out_shape().h, 5);
  ASSERT_EQ(layer.out_shape().w, 6);
  CheckLayer(layer, Uniform(2 * layer.in_shape().size(), -1.0f, 1.0f), 2, 0.05f);
}

TEST_F(LayerGradientTest, Conv2dSamePadding5x5) {
  Conv2d layer(Shape{2, 6, 5}, 3, 5, 2);
  CheckLayer(layer, Uniform(2 * layer.in_shape().size(), -1.0f, 1.0f), 2, 0.05f);
}

TEST_F(LayerGradientTest, Conv2dNoPadding) {
  Conv2d layer(Shape{3, 5, 4}, 2, 3, 0);
  ASSERT_EQ(layer.out_shape().h, 3);
  ASSERT_EQ(layer.out_shape().w, 2);
  CheckLayer(layer, Uniform(2 * layer.in_shape().size(), -1.0f, 1.0f), 2, 0.05f);
}

TEST_F(LayerGradientTest, MaxPoolWithOddEdgesDropped) {
  MaxPool2d layer(Shape{2, 5, 4}, 3);
  ASSERT_EQ(layer.out_shape().h, 2);
  ASSERT_EQ(layer.out_shape().w, 2);
  CheckLayer(layer, DistinctShuffled(3 * layer.in_shape().size(), 0.05f), 3, 0.01f);
}

TEST_F(LayerGradientTest, Flatten) {
  Flatten layer(Shape{2, 2, 3});
  EXPECT_EQ(layer.out_shape().c, 12);
  CheckLayer(layer, Uniform(2 * 12, -1.0f, 1.0f), 2, 0.05f);
}

TEST_F(LayerGradientTest, SoftmaxCrossEntropy) {
  constexpr int kN = 4;
  constexpr int kClasses = 5;
  std::vector<float> logits = Uniform(kN * kClasses, -3.0f, 3.0f);
  const std::vector<std::int32_t> labels = {0, 4, 2, 2};
  std::vector<float> dlogits(logits.size());
  SoftmaxCrossEntropy(logits.data(), labels.data(), kN, kClasses, dlogits.data());
  auto mean_loss = [&] {
    return SoftmaxCrossEntropy(logits.data(), labels.data(), kN, kClasses, nullptr).loss_sum / kN;
  };
  const GradCheck check = CompareWithFiniteDifferences(logits, dlogits, mean_loss, {.eps = 1e-3f});
  EXPECT_LT(check.worst, kTolerance) << check;
}

// The checker itself must notice a gradient that is off by a few percent.
TEST_F(LayerGradientTest, CheckerRejectsSlightlyWrongGradient) {
  Linear layer(5, 4);
  std::vector<float> params = Uniform(layer.num_params(), -1.0f, 1.0f);
  std::vector<float> grads(layer.num_params());
  layer.Bind(params.data(), grads.data());
  std::vector<float> x = Uniform(3 * 5, -1.0f, 1.0f);
  const std::vector<float> r = Uniform(3 * 4, -1.0f, 1.0f);
  std::vector<float> y(r.size());
  auto objective = [&] {
    layer.Forward(x.data(), y.data(), 3);
    return std::inner_product(r.begin(), r.end(), y.begin(), 0.0);
  };
  objective();
  layer.Backward(x.data(), r.data(), nullptr, 3);
  ASSERT_LT(CompareWithFiniteDifferences(params, grads, objective, {.eps = 0.05f}).worst,
            kTolerance);
  grads[7] *= 1.03f;
  EXPECT_GT(CompareWithFiniteDifferences(params, grads, objective, {.eps = 0.05f}).worst,
            kTolerance);
}

// torch semantics: within a tied window the first maximum (row-major) takes the gradient.
TEST(MaxPoolTest, TiedWindowRoutesGradientToFirstMaximum) {
  MaxPool2d layer(Shape{1, 2, 2}, 1);
  const std::vector<float> x = {0.0f, 0.5f, 0.5f, 0.5f};
  float y = 0;
  layer.Forward(x.data(), &y, 1);
  EXPECT_EQ(y, 0.5f);
  const float dy = 2.0f;
  std::vector<float> dx(4, -1.0f);
  layer.Backward(x.data(), &dy, dx.data(), 1);
  EXPECT_EQ(dx, (std::vector<float>{0.0f, 2.0f, 0.0f, 0.0f}));
}

// Values drawn from {0, 1, 2, NaN}, so most windows tie or hold a NaN: output and gradient
// routing must equal a scalar scan in row-major order (first maximum wins; a NaN wins and the
// last NaN wins), whichever code path (AVX-512, AVX2, scalar) the row width takes.
void CheckMaxPoolAgainstScan(const Shape& in, int batch) {
  MaxPool2d layer(in, batch);
  const Shape out = layer.out_shape();
  std::mt19937 rng(5);
  std::vector<float> x(in.size() * batch);
  for (float& v : x) {
    const unsigned pick = rng() % 4;
    v = pick == 3 ? std::nanf("") : static_cast<float>(pick);
  }
  std::vector<float> y(out.size() * batch);
  layer.Forward(x.data(), y.data(), batch);
  std::vector<float> dy(y.size());
  for (std::size_t j = 0; j < dy.size(); ++j) dy[j] = static_cast<float>(j + 1);
  std::vector<float> dx(x.size(), -1.0f);
  layer.Backward(x.data(), dy.data(), dx.data(), batch);

  std::vector<float> want_dx(x.size(), 0.0f);
  std::size_t j = 0;
  for (int i = 0; i < batch; ++i) {
    for (int c = 0; c < in.c; ++c) {
      for (int oh = 0; oh < out.h; ++oh) {
        for (int ow = 0; ow < out.w; ++ow, ++j) {
          const std::size_t top = ((static_cast<std::size_t>(i) * in.c + c) * in.h + 2 * oh) * in.w;
          std::size_t best = top + 2 * ow;
          for (const std::size_t at :
               {top + 2 * ow + 1, top + in.w + 2 * ow, top + in.w + 2 * ow + 1}) {
            if (x[at] > x[best] || std::isnan(x[at])) best = at;
          }
          if (std::isnan(x[best])) {
            EXPECT_TRUE(std::isnan(y[j])) << "output " << j;
          } else {
            EXPECT_EQ(y[j], x[best]) << "output " << j;
          }
          want_dx[best] = dy[j];
        }
      }
    }
  }
  EXPECT_EQ(dx, want_dx);
}

TEST(MaxPoolTest, RowsOfEveryWidthMatchARowMajorScanWithTiesAndNaN) {
  // 1, 7 and 14 windows (the CNN's), 16 (one full vector), 35 (two and a tail), 71 → 35 with
  // the odd last column dropped.
  for (const int width : {2, 14, 28, 32, 70, 71}) {
    SCOPED_TRACE("input width " + std::to_string(width));
    CheckMaxPoolAgainstScan(Shape{3, 6, width}, 2);
  }
}

TEST(ReLUTest, WideBuffersZeroNegativesAndNaNAndGateTheGradient) {
  ReLU layer(Shape{1000, 1, 1});
  std::vector<float> x(1000);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = i % 7 == 0 ? std::nanf("") : static_cast<float>(static_cast<int>(i % 5) - 2);
  }
  std::vector<float> y(x.size(), -9.0f);
  layer.Forward(x.data(), y.data(), 1);
  std::vector<float> dy(x.size(), 3.0f);
  std::vector<float> dx(x.size(), -9.0f);
  layer.Backward(x.data(), dy.data(), dx.data(), 1);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool pass = x[i] > 0.0f;
    EXPECT_EQ(y[i], pass ? x[i] : 0.0f) << i;
    EXPECT_EQ(dx[i], pass ? 3.0f : 0.0f) << i;
  }
}

// The fused block must be the three layers it replaces, bit for bit: outputs, input gradient
// and parameter gradients (including the odd edges the pool drops, and a NaN in the input).
TEST(ConvReluPoolTest, IsBitIdenticalToConvThenReLUThenMaxPool) {
  struct Case {
    Shape in;
    int out_c, kernel, padding, batch;
  };
  for (const Case& k : {Case{{1, 28, 28}, 8, 3, 1, 3}, Case{{3, 7, 9}, 5, 3, 1, 4},
                        Case{{2, 10, 11}, 4, 5, 2, 2}, Case{{4, 9, 8}, 6, 3, 0, 3}}) {
    Conv2d conv(k.in, k.out_c, k.kernel, k.padding);
    ReLU relu(conv.out_shape());
    MaxPool2d pool(conv.out_shape(), k.batch);
    ConvReluPool fused(k.in, k.out_c, k.kernel, k.padding, k.batch);
    ASSERT_EQ(fused.out_shape().size(), pool.out_shape().size());
    ASSERT_EQ(fused.num_params(), conv.num_params());

    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> params(conv.num_params());
    for (float& v : params) v = dist(rng);
    std::vector<float> params2 = params;
    std::vector<float> grads(params.size(), -1.0f);
    std::vector<float> grads2(params.size(), -2.0f);
    conv.Bind(params.data(), grads.data());
    fused.Bind(params2.data(), grads2.data());

    std::vector<float> x(k.in.size() * k.batch);
    for (float& v : x) v = dist(rng);
    x[5] = std::nanf("");
    std::vector<float> c_out(conv.out_shape().size() * k.batch);
    std::vector<float> r_out(c_out.size());
    std::vector<float> y(pool.out_shape().size() * k.batch);
    conv.Forward(x.data(), c_out.data(), k.batch);
    relu.Forward(c_out.data(), r_out.data(), k.batch);
    pool.Forward(r_out.data(), y.data(), k.batch);
    std::vector<float> y2(y.size());
    fused.Forward(x.data(), y2.data(), k.batch);

    std::vector<float> dy(y.size());
    for (float& v : dy) v = dist(rng);
    std::vector<float> d_pool(r_out.size()), d_relu(c_out.size()), dx(x.size());
    pool.Backward(r_out.data(), dy.data(), d_pool.data(), k.batch);
    relu.Backward(c_out.data(), d_pool.data(), d_relu.data(), k.batch);
    conv.Backward(x.data(), d_relu.data(), dx.data(), k.batch);
    std::vector<float> dx2(x.size(), 7.0f);
    fused.Backward(x.data(), dy.data(), dx2.data(), k.batch);

    auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    };
    EXPECT_TRUE(same_bits(y, y2)) << "outputs, in " << k.in.c << "x" << k.in.h << "x" << k.in.w;
    EXPECT_TRUE(same_bits(dx, dx2)) << "dx, in " << k.in.c << "x" << k.in.h << "x" << k.in.w;
    EXPECT_TRUE(same_bits(grads, grads2))
        << "grads, in " << k.in.c << "x" << k.in.h << "x" << k.in.w;
  }
}

TEST(SoftmaxCrossEntropyTest, MatchesHandComputedLossAndAccuracy) {
  // Row 0: logits (2, 0), label 0 → loss log(1 + e⁻²), correct.
  // Row 1: logits (0, 3), label 0 → loss log(1 + e³), wrong.
  const std::vector<float> logits = {2.0f, 0.0f, 0.0f, 3.0f};
  const std::vector<std::int32_t> labels = {0, 0};
  std::vector<float> dlogits(4);
  const EvalResult r = SoftmaxCrossEntropy(logits.data(), labels.data(), 2, 2, dlogits.data());
  EXPECT_NEAR(r.loss_sum, std::log1p(std::exp(-2.0)) + std::log1p(std::exp(3.0)), 1e-12);
  EXPECT_EQ(r.correct, 1);
  // Gradient of the mean: (softmax − onehot) / n.
  const double p0 = 1.0 / (1.0 + std::exp(-2.0));
  EXPECT_NEAR(dlogits[0], (p0 - 1.0) / 2, 1e-7);
  EXPECT_NEAR(dlogits[1], (1.0 - p0) / 2, 1e-7);
}

TEST(SoftmaxCrossEntropyTest, StableForHugeLogits) {
  const std::vector<float> logits = {1000.0f, -1000.0f, 0.0f};
  const std::vector<std::int32_t> labels = {1};
  std::vector<float> dlogits(3);
  const EvalResult r = SoftmaxCrossEntropy(logits.data(), labels.data(), 1, 3, dlogits.data());
  EXPECT_DOUBLE_EQ(r.loss_sum, 2000.0);
  for (const float g : dlogits) EXPECT_TRUE(std::isfinite(g));
  EXPECT_FLOAT_EQ(dlogits[0], 1.0f);
  EXPECT_FLOAT_EQ(dlogits[1], -1.0f);
}

}  // namespace
}  // namespace ringtrain::model
