// train::LoadTrainingData: what a rank loads for a DatasetSpec and the shape its model is checked
// against, on data written here.
#include "runner/train/model_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/unit/data/idx_writer.h"

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

  std::filesystem::path dir_;
};

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

}  // namespace
}  // namespace ringtrain::train
