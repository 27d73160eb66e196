// train::LoadTrainingData: what a rank loads for a DatasetSpec and the shape its model is checked
// against, on data written here.
#include "runner/train/model_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/data/idx_writer.h"
#include "tests/unit/data/npy_writer.h"

namespace ringtrain::train {
namespace {

class ModelDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("model_data_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // x (200, 8, 8) uint8 and y (200,) int64 labels 0/1, as the NPY files of a job.
  data::DatasetSpec NpyImages() {
    std::string pixels;
    std::vector<std::int64_t> labels;
    for (int i = 0; i < 200; ++i) {
      for (int p = 0; p < 64; ++p) pixels += static_cast<char>((i + p) % 256);
      labels.push_back(i % 2);
    }
    data::DatasetSpec spec;
    spec.format = data::DatasetFormat::kNpy;
    spec.train_x = (dir_ / "x.npy").string();
    spec.train_y = (dir_ / "y.npy").string();
    std::ofstream(spec.train_x, std::ios::binary) << data::Npy("|u1", "(200, 8, 8)", pixels);
    std::ofstream(spec.train_y, std::ios::binary)
        << data::Npy("<i8", "(200,)", data::Bytes(labels));
    spec.test_fraction = 0.25;
    return spec;
  }

  std::filesystem::path dir_;
};

// The runner applies a declared inputShape of the same size as `ringtrain validate` does: 8x8
// images declared [64] train a model of 64 inputs instead of being refused on every rank.
TEST_F(ModelDataTest, TheDeclaredInputShapeReshapesTheTableAsValidateDoes) {
  data::DatasetSpec spec = NpyImages();
  spec.input_shape = {64};
  auto loaded = LoadTrainingData(spec, 1, 10);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->shape.input, (model::Shape{64, 1, 1}));
  TrainConfig config;
  auto model = model::ParseModelSpec(
      R"({"input": [64], "layers": [{"dense": {"units": 16}}, "relu", {"dense": {"units": 2}}]})");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  config.model_spec = *model;
  auto resolved = ResolveModelSpec(config, loaded->shape);
  EXPECT_TRUE(resolved.ok()) << resolved.status().ToString();
  // The engines take the shape from the tables themselves.
  auto from_table = ShapeOf(loaded->table->test);
  ASSERT_TRUE(from_table.ok());
  EXPECT_EQ(from_table->input, (model::Shape{64, 1, 1}));

  spec.input_shape = {65};
  loaded = LoadTrainingData(spec, 1, 10);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find("dataset.inputShape: says [65] (65 values) per sample "
                                           "but " +
                                           spec.train_x + " has 64 (8x8)"),
            std::string::npos)
      << loaded.status().message();
}

// A checkpoint of the mlp preset written when a CSV job's declared [1, 28, 28] was recorded as 784
// flat values (builds before the declared CSV shape) resumes the same job now that it is
// recorded as 1x28x28: the preset begins with a flatten, so the parameters mean the same. The
// cnn preset's records of the two shapes are still told apart.
TEST_F(ModelDataTest, TheMlpPresetResumesACheckpointRecordedWithTheFlatShapeOfItsCsv) {
  TrainConfig config;
  config.model.name = "mlp";
  const DataShape flat{model::Shape{784, 1, 1}, 10, false};
  const DataShape declared{model::Shape{1, 28, 28}, 10, false};
  auto old_spec = ResolveModelSpec(config, flat);
  auto new_spec = ResolveModelSpec(config, declared);
  ASSERT_TRUE(old_spec.ok() && new_spec.ok());
  const ExpectedModel old_model = CheckpointModelOf(*old_spec, flat, true);
  const ExpectedModel new_model = CheckpointModelOf(*new_spec, declared, true);
  ASSERT_NE(old_model.model, new_model.model);  // what made it refused before
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::vector<float> params(8, 0.5f), state(4, 0.25f);
  CheckpointPosition pos;
  pos.global_step = 7;
  pos.world_size = 2;
  ASSERT_TRUE(WriteCheckpoint(ckpt, pos, old_model.model, params, state, 2).ok());
  auto resumed = LoadNewestCheckpoint(ckpt, params.size(), state.size(), &new_model);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->global_step, 7);

  config.model.name = "cnn";
  auto cnn = ResolveModelSpec(config, declared);
  ASSERT_TRUE(cnn.ok()) << cnn.status().ToString();
  const ExpectedModel cnn_model = CheckpointModelOf(*cnn, declared, true);
  auto refused = LoadNewestCheckpoint(ckpt, params.size(), state.size(), &cnn_model);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
}

// The spec's classes reach the IDX reader: 12 classes load when the spec says 12, and are refused
// by the model check, naming the labels file and the classes, when nothing says more than 10.
TEST_F(ModelDataTest, IdxWithMoreThanTenClassesLoadsWithTheSpecsClasses) {
  data::WriteIdxDir(dir_.string(), 24, 3, 3, 12);
  data::DatasetSpec spec = data::IdxDatasetSpec(dir_.string());
  spec.classes = 12;
  auto loaded = LoadTrainingData(spec, 1, /*idx_classes=*/10);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->shape.outputs, 12);
  EXPECT_EQ(loaded->shape.input, (model::Shape{1, 3, 3}));
  ASSERT_NE(loaded->idx_train(), nullptr);
  EXPECT_EQ(loaded->idx_train()->labels[11], 11);

  spec.classes = 0;
  loaded = LoadTrainingData(spec, 1, /*idx_classes=*/10);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find((dir_ / "train-labels-idx1-ubyte").string() +
                                           ": label 10 at index 10 is not below the model's 10 "
                                           "classes"),
            std::string::npos)
      << loaded.status().message();
}

// IDX images keep their shape; a declared one must be it (or hold as many values), the same
// check as `ringtrain validate`'s, naming the field and the images file.
TEST_F(ModelDataTest, IdxImagesKeepTheirShapeAndTheDeclaredOneIsChecked) {
  data::WriteIdxDir(dir_.string(), 20, 3, 3, 10);
  data::DatasetSpec spec = data::IdxDatasetSpec(dir_.string());
  for (const std::vector<int>& fits : {std::vector<int>{1, 3, 3}, {3, 3}, {9}}) {
    spec.input_shape = fits;
    auto loaded = LoadTrainingData(spec, 1, 10);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(loaded->shape.input, (model::Shape{1, 3, 3}));
  }
  spec.input_shape = {3, 3, 1};
  auto loaded = LoadTrainingData(spec, 1, 10);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("dataset.inputShape: says [3, 3, 1] per sample but " +
                                           (dir_ / "train-images-idx3-ubyte").string() +
                                           " has images of 1x3x3"),
            std::string::npos)
      << loaded.status().message();
}

// [flatten, dense 65536, dense 65536, dense 10] passes every shape check and needs 4.3 billion
// parameters: refused naming them and their bytes, as a permanent error, before any allocation.
TEST(TrainingState, AModelLargerThanTheMemoryIsAPermanentErrorNamingItsSize) {
  auto spec = model::ParseModelSpec(
      R"({"input": [1, 28, 28], "layers": ["flatten", {"dense": {"units": 65536}},
          {"dense": {"units": 65536}}, {"dense": {"units": 10}}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto report = model::InferShapes(*spec);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->params, 4'347'133'962u);
  EXPECT_EQ(TrainingStateBytes(report->params, "adam"), 4'347'133'962u * 16);
  EXPECT_EQ(TrainingStateBytes(report->params, "sgd"), 4'347'133'962u * 12);
  // Rank 0 with a checkpoint dir also holds the copy a checkpoint is written from.
  EXPECT_EQ(TrainingStateBytes(report->params, "adam", true), 4'347'133'962u * 28);
  EXPECT_EQ(TrainingStateBytes(report->params, "sgd", true), 4'347'133'962u * 20);
  const Status st = CheckTrainingStateFits(report->params, "adam", std::uint64_t{16} << 30);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "model.layers: 4,347,133,962 parameters need 69.6 GB for weights, gradients and "
            "optimizer state (adam); this process may use 17.2 GB in all");
  const int code = ExitCodeFor(st);
  EXPECT_TRUE(code >= 1 && code <= 127) << code;
  // 1 billion adam parameters: 16 GB of state fit in 20 GB, not with a checkpoint's copy (28 GB).
  EXPECT_TRUE(CheckTrainingStateFits(1'000'000'000, "adam", 20'000'000'000).ok());
  EXPECT_EQ(CheckTrainingStateFits(1'000'000'000, "adam", 20'000'000'000, true).message(),
            "model.layers: 1,000,000,000 parameters need 28.0 GB for weights, gradients and "
            "optimizer state (adam) and rank 0's copy of them for a checkpoint; this process may "
            "use 20.0 GB in all");
  // What fits, or an unknown memory, passes.
  EXPECT_TRUE(CheckTrainingStateFits(1'000'000, "adam", std::uint64_t{16} << 30).ok());
  EXPECT_TRUE(CheckTrainingStateFits(report->params, "adam", 0).ok());
  EXPECT_EQ(TrainingStateDoesNotFit(52'101'130, "sgd", "the allocation failed").message(),
            "model.layers: 52,101,130 parameters need 625.2 MB for weights, gradients and "
            "optimizer state (sgd); the allocation failed");
  EXPECT_GT(MemoryLimitBytes(), 0u);  // /proc and sysconf on every Linux
}

// The state fits but a batch's activations do not (a CNN at batch 4096): refused as a permanent
// error naming the batch size and the activations' bytes beside the state's, not left to an OOM
// kill that a restart repeats.
TEST(TrainingState, ABatchWhoseActivationsDoNotFitIsAPermanentErrorNamingTheBatch) {
  const BatchMemory batch{4096, 3'300'000'000};
  EXPECT_TRUE(CheckTrainingStateFits(1'234'567, "adam", 2'000'000'000).ok());
  const Status st = CheckTrainingStateFits(1'234'567, "adam", 2'000'000'000, false, batch);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "model.layers: 1,234,567 parameters need 19.8 MB for weights, gradients and optimizer "
            "state (adam) and 3.3 GB for the activations and input buffers of a batch of 4096 "
            "(batchSizePerReplica); this process may use 2.0 GB in all");
  const int code = ExitCodeFor(st);
  EXPECT_TRUE(code >= 1 && code <= 127) << code;
  EXPECT_EQ(CheckTrainingStateFits(1'234'567, "sgd", 2'000'000'000, true, batch).message(),
            "model.layers: 1,234,567 parameters need 24.7 MB for weights, gradients and optimizer "
            "state (sgd) and rank 0's copy of them for a checkpoint, and 3.3 GB for the "
            "activations and input buffers of a batch of 4096 (batchSizePerReplica); this "
            "process may use 2.0 GB in all");
  // The state and the batch are counted together: each fits alone, not both.
  const std::uint64_t state = TrainingStateBytes(1'234'567, "adam");
  EXPECT_TRUE(CheckTrainingStateFits(1'234'567, "adam", state + 1000, false, {64, 1000}).ok());
  EXPECT_FALSE(CheckTrainingStateFits(1'234'567, "adam", state + 1000, false, {64, 1001}).ok());
  // A small batch beside a state that cannot fit alone is not named: the message is the state's.
  EXPECT_EQ(
      CheckTrainingStateFits(1'000'000'000, "adam", 10'000'000'000, false, {64, 1'000'000'000})
          .message(),
      "model.layers: 1,000,000,000 parameters need 16.0 GB for weights, gradients and "
      "optimizer state (adam); this process may use 10.0 GB in all");
  // ... but it is when the state alone would fit: it is what does not.
  EXPECT_EQ(
      CheckTrainingStateFits(1'000'000'000, "adam", 17'000'000'000, false, {64, 1'000'000'001})
          .message(),
      "model.layers: 1,000,000,000 parameters need 16.0 GB for weights, gradients and "
      "optimizer state (adam) and 1.0 GB for the activations and input buffers of a batch "
      "of 64 (batchSizePerReplica); this process may use 17.0 GB in all");
  // An allocation that failed names a large batch too.
  EXPECT_EQ(
      TrainingStateDoesNotFit(1'234'567, "adam", "the allocation failed", false, batch).message(),
      "model.layers: 1,234,567 parameters need 19.8 MB for weights, gradients and optimizer "
      "state (adam) and 3.3 GB for the activations and input buffers of a batch of 4096 "
      "(batchSizePerReplica); the allocation failed");
  EXPECT_EQ(
      TrainingStateDoesNotFit(52'101'130, "sgd", "the allocation failed", false, {64, 1'000'000})
          .message(),
      "model.layers: 52,101,130 parameters need 625.2 MB for weights, gradients and "
      "optimizer state (sgd); the allocation failed");
}

}  // namespace
}  // namespace ringtrain::train
