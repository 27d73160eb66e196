#include "runner/model/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "runner/model/gemm.h"
#include "runner/model/optimizer.h"
#include "tests/unit/model/alloc_counter.h"
#include "tests/unit/model/grad_check.h"

namespace ringtrain::model {
namespace {

constexpr double kTolerance = 1e-2;

std::unique_ptr<Model> MustCreate(const ModelConfig& config) {
  auto model = Model::Create(config);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(model).value();
}

// Tiny shapes keep finite differences over many parameters fast.
ModelConfig TinyMlp() {
  ModelConfig c;
  c.name = "mlp";
  c.height = 4;
  c.width = 4;
  c.hidden = 8;
  c.classes = 3;
  c.max_batch = 8;
  return c;
}

ModelConfig TinyCnn() {
  ModelConfig c;
  c.name = "cnn";
  c.height = 8;
  c.width = 8;
  c.classes = 3;
  c.max_batch = 8;
  return c;
}

struct Batch {
  std::vector<float> x;
  std::vector<std::int32_t> y;
};

Batch RandomBatch(const ModelConfig& c, int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<std::int32_t> label(0, c.classes - 1);
  Batch b;
  b.x.resize(static_cast<std::size_t>(n) * c.channels * c.height * c.width);
  for (float& v : b.x) v = pixel(rng);
  for (int i = 0; i < n; ++i) b.y.push_back(label(rng));
  return b;
}

double RelativeL2(std::span<const float> a, std::span<const float> b) {
  double diff = 0;
  double norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{a[i]} * a[i];
  }
  return std::sqrt(diff / norm);
}

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override { model::SetKernelThreads(1); }
};

// Checks every parameter of small layers and a random sample (always including the bias tail)
// of large ones, so the cnn check stays well under a second. A whole network is only piecewise
// smooth and its cnn gradients are ~1e-4 at init, so this skips kinks and raises the noise
// floor; the tight per-kernel checks are in layers_test.cc, and any wiring mistake here is off
// by far more than the tolerance.
void CheckModelGradients(const ModelConfig& config, int n, std::size_t per_layer) {
  auto model = MustCreate(config);
  const Batch batch = RandomBatch(config, n, 11);
  model->ForwardBackward(batch.x.data(), batch.y.data(), n, {});
  const std::vector<float> analytic(model->grads().begin(), model->grads().end());
  auto mean_loss = [&] { return model->Evaluate(batch.x.data(), batch.y.data(), n).loss_sum / n; };
  std::mt19937_64 rng(3);
  for (std::size_t layer = 0; layer < model->layer_ranges().size(); ++layer) {
    const ParamRange range = model->layer_ranges()[layer];
    GradCheckOptions options{.eps = 2e-3f, .floor_fraction = 3e-2, .skip_kinks = true};
    if (range.count <= per_layer) {
      for (std::size_t i = 0; i < range.count; ++i) options.indices.push_back(range.offset + i);
    } else {
      std::uniform_int_distribution<std::size_t> pick(0, range.count - 1);
      for (std::size_t i = 0; i < per_layer; ++i)
        options.indices.push_back(range.offset + pick(rng));
      for (std::size_t i = range.count - 10; i < range.count; ++i) {
        options.indices.push_back(range.offset + i);
      }
    }
    const GradCheck check =
        CompareWithFiniteDifferences(model->params(), analytic, mean_loss, options);
    EXPECT_LT(check.worst, kTolerance) << config.name << " layer " << layer << ": " << check;
    EXPECT_LE(3 * check.skipped, options.indices.size())
        << config.name << " layer " << layer << ": " << check;
  }
}

TEST_F(ModelTest, MlpGradientsMatchFiniteDifferences) { CheckModelGradients(TinyMlp(), 3, 1000); }

TEST_F(ModelTest, CnnGradientsMatchFiniteDifferences) { CheckModelGradients(TinyCnn(), 2, 400); }

TEST_F(ModelTest, LayerRangesTileParamsWeightsThenBias) {
  ModelConfig mlp;
  auto model = MustCreate(mlp);
  ASSERT_EQ(model->layer_ranges().size(), 2u);
  EXPECT_EQ(model->layer_ranges()[0].offset, 0u);
  EXPECT_EQ(model->layer_ranges()[0].count, 784u * 256 + 256);
  EXPECT_EQ(model->layer_ranges()[1].offset, 784u * 256 + 256);
  EXPECT_EQ(model->layer_ranges()[1].count, 256u * 10 + 10);
  EXPECT_EQ(model->params().size(), model->grads().size());

  ModelConfig cnn;
  cnn.name = "cnn";
  model = MustCreate(cnn);
  const std::vector<std::size_t> expected = {32 * 9 + 32, 64 * 32 * 9 + 64, 64 * 7 * 7 * 128 + 128,
                                             128 * 10 + 10};
  ASSERT_EQ(model->layer_ranges().size(), expected.size());
  std::size_t next = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(model->layer_ranges()[i].offset, next);
    EXPECT_EQ(model->layer_ranges()[i].count, expected[i]);
    next += expected[i];
  }
  EXPECT_EQ(next, model->params().size());
  EXPECT_EQ(model->grads().size(), model->params().size());
}

TEST_F(ModelTest, InitializationIsTorchDefaultUniform) {
  ModelConfig mlp;
  auto model = MustCreate(mlp);
  const ParamRange first = model->layer_ranges()[0];
  const std::span<float> w = model->params().subspan(first.offset, 784 * 256);
  const float bound = 1.0f / std::sqrt(784.0f);
  double sum_sq = 0;
  for (const float v : w) {
    ASSERT_LE(std::abs(v), bound);
    sum_sq += double{v} * v;
  }
  // Uniform(−b, b) has standard deviation b/√3.
  EXPECT_NEAR(std::sqrt(sum_sq / w.size()), bound / std::sqrt(3.0), 0.01 * bound);
}

TEST_F(ModelTest, OnReadyReportsEachRangeOnceLastLayerFirstWithFinalGradients) {
  for (const ModelConfig& config : {TinyMlp(), TinyCnn()}) {
    auto model = MustCreate(config);
    const Batch batch = RandomBatch(config, 4, 5);
    std::vector<std::size_t> offsets;
    std::vector<std::vector<float>> at_ready;
    model->ForwardBackward(batch.x.data(), batch.y.data(), 4, [&](const ParamRange& r) {
      offsets.push_back(r.offset);
      const auto g = model->grads().subspan(r.offset, r.count);
      at_ready.emplace_back(g.begin(), g.end());
    });
    const auto& ranges = model->layer_ranges();
    ASSERT_EQ(offsets.size(), ranges.size()) << config.name;
    for (std::size_t k = 0; k < ranges.size(); ++k) {
      const ParamRange& r = ranges[ranges.size() - 1 - k];
      EXPECT_EQ(offsets[k], r.offset) << config.name << " callback " << k;
      // Nothing later in backward may touch a range already handed to the all-reduce.
      const auto final_grads = model->grads().subspan(r.offset, r.count);
      EXPECT_TRUE(std::equal(final_grads.begin(), final_grads.end(), at_ready[k].begin()))
          << config.name << " range " << k;
    }
  }
}

TEST_F(ModelTest, SameSeedSameParamsAndBitIdenticalGradients) {
  for (ModelConfig config : {TinyMlp(), TinyCnn()}) {
    auto a = MustCreate(config);
    auto b = MustCreate(config);
    EXPECT_TRUE(std::ranges::equal(a->params(), b->params())) << config.name;
    config.seed += 1;
    auto c = MustCreate(config);
    EXPECT_FALSE(std::ranges::equal(a->params(), c->params())) << config.name;

    const Batch batch = RandomBatch(config, 8, 9);
    const float loss_a = a->ForwardBackward(batch.x.data(), batch.y.data(), 8, {});
    const std::vector<float> grads_a(a->grads().begin(), a->grads().end());
    // Again on the same model: gradients are overwritten, not accumulated.
    EXPECT_EQ(a->ForwardBackward(batch.x.data(), batch.y.data(), 8, {}), loss_a);
    EXPECT_TRUE(std::ranges::equal(a->grads(), grads_a)) << config.name;
    EXPECT_EQ(b->ForwardBackward(batch.x.data(), batch.y.data(), 8, {}), loss_a);
    EXPECT_TRUE(std::ranges::equal(b->grads(), grads_a)) << config.name;
  }
}

// The data-parallel invariant: the mean gradient over B samples is the average of the mean
// gradients of the two halves, up to float summation order.
TEST_F(ModelTest, BatchGradientIsAverageOfHalfBatchGradients) {
  for (const ModelConfig& config : {TinyMlp(), TinyCnn()}) {
    auto model = MustCreate(config);
    const Batch batch = RandomBatch(config, 8, 13);
    const std::size_t sample = batch.x.size() / 8;
    const float loss = model->ForwardBackward(batch.x.data(), batch.y.data(), 8, {});
    const std::vector<float> whole(model->grads().begin(), model->grads().end());
    const float loss_first = model->ForwardBackward(batch.x.data(), batch.y.data(), 4, {});
    std::vector<float> average(model->grads().begin(), model->grads().end());
    const float loss_second =
        model->ForwardBackward(batch.x.data() + 4 * sample, batch.y.data() + 4, 4, {});
    for (std::size_t i = 0; i < average.size(); ++i) {
      average[i] = (average[i] + model->grads()[i]) / 2;
    }
    EXPECT_LE(RelativeL2(whole, average), 1e-5) << config.name;
    EXPECT_NEAR(loss, (loss_first + loss_second) / 2, 1e-6 * loss) << config.name;
  }
}

TEST_F(ModelTest, EvaluateOnHandBuiltWeights) {
  // 2 inputs → Linear(identity) → ReLU → Linear(identity): the logits are relu(x).
  ModelConfig config;
  config.height = 1;
  config.width = 2;
  config.hidden = 2;
  config.classes = 2;
  config.max_batch = 4;
  auto model = MustCreate(config);
  const std::vector<float> identity_layer = {1, 0, 0, 1, 0, 0};  // W (2×2) then b (2)
  std::copy(identity_layer.begin(), identity_layer.end(), model->params().begin());
  std::copy(identity_layer.begin(), identity_layer.end(), model->params().begin() + 6);

  const std::vector<float> x = {2, 0, -1, 3, 0, -5};  // logits (2, 0), (0, 3), (0, 0)
  const std::vector<std::int32_t> y = {0, 0, 1};
  const EvalResult r = model->Evaluate(x.data(), y.data(), 3);
  EXPECT_NEAR(r.loss_sum, std::log1p(std::exp(-2.0)) + std::log1p(std::exp(3.0)) + std::log(2.0),
              1e-6);
  // Sample 0 is right, sample 1 wrong, and sample 2's tie goes to class 0, which is wrong.
  EXPECT_EQ(r.correct, 1);
  EXPECT_EQ(model->Evaluate(x.data(), y.data(), 0).correct, 0);
  EXPECT_NEAR(model->ForwardBackward(x.data(), y.data(), 3, {}), r.loss_sum / 3, 1e-6);
}

TEST_F(ModelTest, TrainingStepsReduceLossOnOneBatch) {
  const ModelConfig config = TinyCnn();
  auto model = MustCreate(config);
  auto optimizer = Optimizer::Create(OptimizerConfig{}, model->params().size());
  ASSERT_TRUE(optimizer.ok());
  const Batch batch = RandomBatch(config, 8, 17);
  const float first = model->ForwardBackward(batch.x.data(), batch.y.data(), 8, {});
  for (int step = 0; step < 30; ++step) {
    (*optimizer)->Step(model->params(), model->grads(), 1e-3);
    model->ForwardBackward(batch.x.data(), batch.y.data(), 8, {});
  }
  EXPECT_LT(model->Evaluate(batch.x.data(), batch.y.data(), 8).loss_sum / 8, 0.5 * first);
}

TEST_F(ModelTest, HotPathDoesNotAllocate) {
  for (const ModelConfig& config : {TinyMlp(), TinyCnn()}) {
    auto model = MustCreate(config);
    auto optimizer = Optimizer::Create(OptimizerConfig{}, model->params().size());
    ASSERT_TRUE(optimizer.ok());
    const Batch batch = RandomBatch(config, 8, 19);
    std::size_t ready = 0;
    const GradReadyFn on_ready = [&ready](const ParamRange&) { ++ready; };
    // The first step may allocate once: oneDNN generates and caches a kernel per GEMM shape.
    model->ForwardBackward(batch.x.data(), batch.y.data(), 8, nullptr);
    model->Evaluate(batch.x.data(), batch.y.data(), 8);
    StartCountingAllocations();
    model->ForwardBackward(batch.x.data(), batch.y.data(), 8, on_ready);
    (*optimizer)->Step(model->params(), model->grads(), 1e-3);
    model->Evaluate(batch.x.data(), batch.y.data(), 8);
    EXPECT_EQ(StopCountingAllocations(), 0) << config.name;
    EXPECT_EQ(ready, model->layer_ranges().size());
  }
}

// Slicing changes only when gradients are reported, never what they are: sliced ranges tile
// the buffer, come from the last layer (and the last rows) first, are final when reported, and
// equal the unsliced gradients.
TEST_F(ModelTest, SlicedGradientsTileAreFinalWhenReportedAndEqualUnsliced) {
  for (ModelConfig config : {TinyMlp(), TinyCnn()}) {
    auto whole = MustCreate(config);
    config.max_grad_slice = 20;  // the tiny MLP's first layer has 8×16 weights: 7 slices
    auto sliced = MustCreate(config);
    ASSERT_EQ(whole->params().size(), sliced->params().size());
    std::copy(whole->params().begin(), whole->params().end(), sliced->params().begin());
    EXPECT_EQ(whole->grad_ranges().size(), whole->layer_ranges().size()) << config.name;
    ASSERT_GT(sliced->grad_ranges().size(), sliced->layer_ranges().size()) << config.name;
    std::size_t next = 0;
    for (const ParamRange& r : sliced->grad_ranges()) {
      EXPECT_EQ(r.offset, next) << config.name;
      next += r.count;
    }
    EXPECT_EQ(next, sliced->params().size());

    const Batch batch = RandomBatch(config, 8, 23);
    std::vector<ParamRange> reported;
    std::vector<std::vector<float>> at_report;
    const GradReadyFn on_ready = [&](const ParamRange& r) {
      reported.push_back(r);
      auto g = sliced->grads().subspan(r.offset, r.count);
      at_report.emplace_back(g.begin(), g.end());
    };
    // Stale values in the buffer must not survive into the reported slices.
    std::fill(sliced->grads().begin(), sliced->grads().end(), 1e9f);
    const float loss_sliced = sliced->ForwardBackward(batch.x.data(), batch.y.data(), 8, on_ready);
    const float loss_whole = whole->ForwardBackward(batch.x.data(), batch.y.data(), 8, {});
    EXPECT_EQ(loss_sliced, loss_whole);

    ASSERT_EQ(reported.size(), sliced->grad_ranges().size()) << config.name;
    for (std::size_t i = 1; i < reported.size(); ++i) {
      EXPECT_LT(reported[i].offset, reported[i - 1].offset) << config.name << " report " << i;
    }
    for (std::size_t i = 0; i < reported.size(); ++i) {
      for (std::size_t j = 0; j < reported[i].count; ++j) {
        const std::size_t k = reported[i].offset + j;
        EXPECT_EQ(at_report[i][j], sliced->grads()[k]) << "changed after its report at " << k;
        EXPECT_NEAR(sliced->grads()[k], whole->grads()[k],
                    1e-6 * (1 + std::fabs(whole->grads()[k])))
            << config.name << " gradient " << k;
      }
    }
  }
}

TEST_F(ModelTest, LinearSlicesAreEvenRowBlocksWithTheBiasLast) {
  ModelConfig config;  // 784-256-10
  config.max_grad_slice = 65536;
  auto model = MustCreate(config);
  const auto& r = model->grad_ranges();
  // 784·256 weights in ⌈200704/65536⌉ = 4 blocks of 64 rows; the last block carries the bias.
  ASSERT_EQ(r.size(), 5u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].offset, 64u * 784 * i);
    EXPECT_EQ(r[i].count, 64u * 784);
  }
  EXPECT_EQ(r[3].count, 64u * 784 + 256);
  EXPECT_EQ(r[4].offset, 784u * 256 + 256);
  EXPECT_EQ(r[4].count, 256u * 10 + 10);
}

TEST_F(ModelTest, UnknownOrInvalidConfigIsInvalidArgument) {
  ModelConfig config;
  config.name = "resnet";
  auto model = Model::Create(config);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("train.model"), std::string::npos);
  EXPECT_NE(model.status().message().find("resnet"), std::string::npos);

  config.name = "mlp";
  config.hidden = 0;
  EXPECT_EQ(Model::Create(config).status().code(), StatusCode::kInvalidArgument);

  config = ModelConfig{};
  config.name = "cnn";
  config.height = 3;
  EXPECT_EQ(Model::Create(config).status().code(), StatusCode::kInvalidArgument);
}

TEST(ModelDeathTest, BatchLargerThanMaxBatchExitsPermanently) {
  // OpenBLAS has started its thread pool by now; a forked child must re-exec to be safe.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ModelConfig config = TinyMlp();
  config.max_batch = 2;
  auto model = MustCreate(config);
  const Batch batch = RandomBatch(config, 3, 1);
  EXPECT_EXIT(model->ForwardBackward(batch.x.data(), batch.y.data(), 3, {}),
              ::testing::ExitedWithCode(kExitPermanent), "max_batch");
}

}  // namespace
}  // namespace ringtrain::model
