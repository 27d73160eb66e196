// `ringtrain validate`/`run`'s model check on this machine: the dataset's shape from its files
// (CSV here; the IDX directory of the shipped examples), else from what the manifest declares,
// and the Keras-like summary.
#include "controller/executors/local/local_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/data/idx_writer.h"
#include "tests/unit/data/npy_writer.h"

namespace ringtrain::executors {
namespace {

namespace fs = std::filesystem;

class LocalDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ringtrain-local-dataset-" +
            std::to_string(::testing::UnitTest::GetInstance()->current_test_info()->line()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // 4 features, the label column by name, 3 classes.
    std::ofstream(dir_ / "train.csv") << "a,b,c,d,target\n"
                                         "1,2,3,4,0\n"
                                         "2,3,4,5,1\n"
                                         "3,4,5,6,2\n"
                                         "4,5,6,7,1\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  api::TrainingJob Job(const std::string& train_lines) {
    const std::string yaml =
        "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: t\nspec:\n"
        "  train:\n" +
        train_lines;
    auto job = api::ParseManifestYaml(yaml, "t.yaml");
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? *job : api::TrainingJob{};
  }
  std::string Csv() const { return (dir_ / "train.csv").string(); }

  fs::path dir_;
};

TEST_F(LocalDatasetTest, CsvFilesGiveTheInputAndTheClasses) {
  api::TrainingJob job =
      Job("    model:\n      layers: [{dense: {units: 8}}, relu, {dense: {units: 3}}]\n"
          "    dataset: {format: csv, train: " +
          Csv() + ", test: " + Csv() + ", label: target}\n");
  auto data = ReadLocalDataShape(job.spec.train);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  ASSERT_TRUE(data->shape.has_value());
  EXPECT_EQ(data->shape->input, (model::Shape{4, 1, 1}));
  EXPECT_EQ(data->shape->outputs, 3);
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ASSERT_TRUE(job.spec.train.model_spec.has_value());  // the input came from the file
  EXPECT_EQ(job.spec.train.model_spec->input, (model::Shape{4, 1, 1}));
  EXPECT_NE(summary->find("layers[0] dense"), std::string::npos) << *summary;
  EXPECT_NE(summary->find("(4 samples)"), std::string::npos) << *summary;
  // dense 4->8: 40, dense 8->3: 27.
  EXPECT_NE(summary->find("Total params: 67\n"), std::string::npos) << *summary;
}

TEST_F(LocalDatasetTest, AListThatDoesNotFitTheFilesIsRefusedNamingTheLayer) {
  api::TrainingJob job =
      Job("    model:\n      layers: [{dense: {units: 8}}, relu, {dense: {units: 10}}]\n"
          "    dataset: {format: csv, train: " +
          Csv() + ", test: " + Csv() + ", label: target}\n");
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find(
                "spec.train.model.layers[2] dense: output 10 units but the dataset has 3 classes"),
            std::string::npos)
      << summary.status().message();
}

// Classes the labels said (none declared): one stray label makes them, and the message says which.
TEST_F(LocalDatasetTest, ClassesTheLabelsSaidAreTracedToTheLargestLabel) {
  std::ofstream(dir_ / "stray.csv") << "a,b,target\n1,2,0\n2,3,65535\n3,4,2\n";
  const std::string csv = (dir_ / "stray.csv").string();
  api::TrainingJob job =
      Job("    model:\n      layers: [{dense: {units: 3}}]\n"
          "    dataset: {format: csv, train: " +
          csv + ", testFraction: 0.34, label: target}\n");
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().message(),
            "spec.train.model.layers[0] dense: output 3 units but the dataset has 65536 classes "
            "(the largest label, 65535 (" +
                csv +
                " line 3), plus one; the dataset's classes, spec.train.dataset.classes, says how "
                "many)");
  // Declared: the label is refused where it is.
  job =
      Job("    model:\n      layers: [{dense: {units: 3}}]\n"
          "    dataset: {format: csv, train: " +
          csv + ", testFraction: 0.34, label: target, classes: 3}\n");
  summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find(csv + ": line 3, column 3 (\"target\"): label 65535 is "
                                                  "not below the 3 classes"),
            std::string::npos)
      << summary.status().message();
}

// The loss against the dataset's task, as the runner checks it (train::ResolveModelSpec), and
// before the units: the units are then worded from the task.
TEST_F(LocalDatasetTest, ALossThatDoesNotFitTheTaskIsRefusedAsTheRunnerRefusesIt) {
  std::ofstream(dir_ / "regression.csv") << "a,b,c,d,target\n"
                                            "1,2,3,4,0.5\n"
                                            "2,3,4,5,1.5\n";
  const std::string regression = (dir_ / "regression.csv").string();
  struct Case {
    std::string train_lines;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"    model:\n      layers: [{dense: {units: 3}}]\n      loss: mse\n"
       "    dataset: {format: csv, train: " +
           Csv() + ", test: " + Csv() + ", label: target}\n",
       "spec.train.model.loss: mse does not fit a classification dataset (use "
       "\"softmax_cross_entropy\"; a CSV or NPY dataset of numbers to predict says "
       "spec.train.dataset.task: regression)"},
      {"    model:\n      layers: [{dense: {units: 1}}]\n      loss: mse\n"
       "    dataset: {format: csv, train: " +
           Csv() + ", test: " + Csv() + ", label: target, task: classification}\n",
       "spec.train.model.loss: mse does not fit a classification dataset"},
      {"    model:\n      layers: [{dense: {units: 2}}]\n"
       "    dataset: {format: csv, train: " +
           regression + ", test: " + regression + ", label: target, task: regression}\n",
       "spec.train.model.loss: softmax_cross_entropy does not fit a regression dataset (use "
       "\"mse\"; a dataset of classes to predict says spec.train.dataset.task: "
       "classification)"},
      {"    model:\n      layers: [{dense: {units: 2}}]\n      loss: mse\n"
       "    dataset: {format: csv, train: " +
           regression + ", test: " + regression + ", label: target, task: regression}\n",
       "spec.train.model.layers[0] dense: output 2 units but the dataset has 1 target values"},
      // (A preset over a regression is refused when the manifest is parsed: the declared task
      // says it, api_test's TheDeclaredTaskChecksTheLossWithoutAnInputShape.)
  };
  for (const Case& c : cases) {
    api::TrainingJob job = Job(c.train_lines);
    auto summary = CheckModelLocally(&job.spec.train);
    ASSERT_FALSE(summary.ok()) << c.train_lines;
    EXPECT_NE(summary.status().message().find(c.want), std::string::npos)
        << summary.status().message();
  }
  // Fashion-MNIST's IDX files: classes, whatever the units.
  data::WriteIdxDir(dir_.string(), 24, 3, 3, 10);
  api::TrainingJob job =
      Job("    model:\n      layers: [flatten, {dense: {units: 10}}]\n      loss: mse\n"
          "    dataset: {format: idx, train: " +
          dir_.string() + "}\n");
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find(
                "spec.train.model.loss: mse does not fit a classification dataset"),
            std::string::npos)
      << summary.status().message();
}

TEST_F(LocalDatasetTest, AbsentFilesFallBackToTheDeclaredShape) {
  const std::string missing = (dir_ / "elsewhere.csv").string();
  api::TrainingJob job =
      Job("    model:\n      layers: [{dense: {units: 3}}]\n"
          "    dataset: {format: csv, train: " +
          missing + ", test: " + missing + ", inputShape: [13], classes: 3}\n");
  auto data = ReadLocalDataShape(job.spec.train);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  ASSERT_TRUE(data->shape.has_value());
  EXPECT_EQ(data->shape->input, (model::Shape{13, 1, 1}));
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_NE(summary->find("Dataset: spec.train.dataset (declared)"), std::string::npos) << *summary;
  // Nothing here and nothing declared: the list needs its input.
  job = Job("    model:\n      layers: [{dense: {units: 3}}]\n    dataset: {format: csv, train: " +
            missing + ", test: " + missing + "}\n");
  summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  // ... and the files not read are named: a misspelt path is the likelier cause.
  EXPECT_EQ(summary.status().message(),
            "spec.train.model.input: required: the dataset's sample shape is not known here (give "
            "spec.train.model.input or spec.train.dataset.inputShape) (not on this machine, so "
            "not read: spec.train.dataset.train: " +
                missing + "; spec.train.dataset.test: " + missing + ")");
  // The training file here and the test file not: the test file is named (validate says it in
  // a note).
  job = Job("    model:\n      layers: [{dense: {units: 3}}]\n    dataset: {format: csv, train: " +
            Csv() + ", test: " + missing + ", label: target}\n");
  EXPECT_TRUE(CheckModelLocally(&job.spec.train).ok());
  EXPECT_EQ(DatasetPathsNotHere(job.spec.train),
            std::vector<std::string>{"spec.train.dataset.test: " + missing});
  job = Job("    model: mlp\n    dataset: {format: npy, trainX: " + Csv() + ", trainY: " + missing +
            ", testFraction: 0.2}\n");
  EXPECT_EQ(DatasetPathsNotHere(job.spec.train),
            std::vector<std::string>{"spec.train.dataset.trainY: " + missing});
  // A relative path, where the ranks open it under another workingDir: not judged.
  job = Job("    model: mlp\n    dataset: {format: npy, trainX: " + Csv() +
            ", trainY: data/y.npy, testFraction: 0.2}\n");
  EXPECT_EQ(DatasetPathsNotHere(job.spec.train),
            std::vector<std::string>{"spec.train.dataset.trainY: data/y.npy"});
  EXPECT_TRUE(DatasetPathsNotHere(job.spec.train, /*relative_elsewhere=*/true).empty());
}

// `ringtrain run` starts its ranks on this machine: a dataset path that is not here is refused
// before any rank starts, naming the field and the path, where `validate` (and the operator,
// whose ranks read the data inside their image) falls back to what the spec declares.
TEST_F(LocalDatasetTest, UnderRunAMissingPathIsRefusedNamingTheField) {
  const std::string missing = (dir_ / "elsewhere.csv").string();
  api::TrainingJob job =
      Job("    model:\n      layers: [{dense: {units: 3}}]\n"
          "    dataset: {format: csv, train: " +
          Csv() + ", test: " + missing + ", label: target, inputShape: [4], classes: 3}\n");
  EXPECT_TRUE(CheckModelLocally(&job.spec.train).ok());
  auto summary = CheckModelLocally(&job.spec.train, DatasetLocation::kThisMachine);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(
      summary.status().message().rfind("spec.train.dataset.test: " + missing + ": no such", 0), 0u)
      << summary.status().message();
  // A plain IDX directory: the field is spec.train.dataset itself.
  job = Job("    model: mlp\n    dataset: /nonexistent-ringtrain-data\n");
  EXPECT_TRUE(CheckModelLocally(&job.spec.train).ok());
  summary = CheckModelLocally(&job.spec.train, DatasetLocation::kThisMachine);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().message().rfind(
                "spec.train.dataset: /nonexistent-ringtrain-data: no such file or directory", 0),
            0u)
      << summary.status().message();
  // A directory without the IDX files: named too, not the first file a rank fails to open.
  job = Job("    model: mlp\n    dataset: " + dir_.string() + "\n");
  summary = CheckModelLocally(&job.spec.train, DatasetLocation::kThisMachine);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().message().rfind(
                "spec.train.dataset: " + dir_.string() + " has no train-images-idx3-ubyte[.gz]", 0),
            0u)
      << summary.status().message();
}

// Paths this process does not see as the ranks will open them were refused as missing, and jobs
// that ran before failed to start (found by a reviewing helper): a $(VAR) the ranks' arguments
// expand from the container's env, and a relative path under spec.template's workingDir. Not
// judged; an absolute path under another workingDir still is.
TEST_F(LocalDatasetTest, UnderRunAPathTheRanksResolveElsewhereIsNotJudgedHere) {
  const std::string csv = Csv();
  const std::string name = std::filesystem::path(csv).filename().string();
  api::TrainingJob job =
      Job("    model:\n      layers: [{dense: {units: 3}}]\n"
          "    dataset: {format: csv, train: \"$(DATA)/" +
          name + "\", testFraction: 0.2, label: target, inputShape: [4], classes: 3}\n");
  auto summary = CheckModelLocally(&job.spec.train, DatasetLocation::kThisMachine);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  job =
      Job("    model:\n      layers: [{dense: {units: 3}}]\n"
          "    dataset: {format: csv, train: data/" +
          name + ", testFraction: 0.2, label: target, inputShape: [4], classes: 3}\n");
  summary = CheckModelLocally(&job.spec.train, DatasetLocation::kThisMachineElsewhereDir);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  // The same relative path from this process's own directory is judged.
  summary = CheckModelLocally(&job.spec.train, DatasetLocation::kThisMachine);
  EXPECT_FALSE(summary.ok());
  job = Job("    model: mlp\n    dataset: /nonexistent-ringtrain-data\n");
  summary = CheckModelLocally(&job.spec.train, DatasetLocation::kThisMachineElsewhereDir);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().message().rfind(
                "spec.train.dataset: /nonexistent-ringtrain-data: no such file or directory", 0),
            0u)
      << summary.status().message();
}

// A path of the wrong kind (a directory as a CSV file) names its field, under validate too.
TEST_F(LocalDatasetTest, APathOfTheWrongKindIsRefusedNamingTheField) {
  api::TrainingJob job =
      Job("    model:\n      layers: [{dense: {units: 3}}]\n"
          "    dataset: {format: csv, train: " +
          dir_.string() + ", testFraction: 0.25, inputShape: [4], classes: 3}\n");
  for (const DatasetLocation where :
       {DatasetLocation::kMaybeElsewhere, DatasetLocation::kThisMachine}) {
    auto summary = CheckModelLocally(&job.spec.train, where);
    ASSERT_FALSE(summary.ok());
    EXPECT_EQ(summary.status().message(),
              "spec.train.dataset.train: " + dir_.string() + ": not a regular file (a directory)");
  }
}

// An IDX directory that is here but lacks its files: `validate` (maybe elsewhere) said the
// loader's "<dir>/train-images-idx3-ubyte: No such file or directory", `run` this (review).
TEST_F(LocalDatasetTest, AnIdxDirectoryWithoutItsFilesIsSaidAlikeByValidateAndRun) {
  api::TrainingJob job = Job("    dataset: " + dir_.string() + "\n");
  for (const DatasetLocation where :
       {DatasetLocation::kMaybeElsewhere, DatasetLocation::kThisMachine}) {
    auto summary = CheckModelLocally(&job.spec.train, where);
    ASSERT_FALSE(summary.ok());
    EXPECT_EQ(summary.status().message(),
              "spec.train.dataset: " + dir_.string() +
                  " has no train-images-idx3-ubyte[.gz] (an IDX directory holds the four "
                  "Fashion-MNIST files)");
  }
}

TEST_F(LocalDatasetTest, ACorruptFileIsAnErrorNamingIt) {
  std::ofstream(dir_ / "train.csv", std::ios::app) << "5,6,x,8,0\n";
  api::TrainingJob job =
      Job("    model:\n      layers: [{dense: {units: 3}}]\n    dataset: {format: csv, train: " +
          Csv() + ", test: " + Csv() + ", label: target}\n");
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find(Csv()), std::string::npos)
      << summary.status().message();
}

// The test split is read too when it is here, under the ranks' rule (data::LoadTrainTest): a
// test CSV whose header names other columns is refused by validate, not on every rank.
TEST_F(LocalDatasetTest, ATestCsvWithAnotherHeaderIsRefusedBeforeAnyRankStarts) {
  const std::string test = (dir_ / "test.csv").string();
  std::ofstream(test) << "a,b,d,c,target\n"
                         "1,2,4,3,0\n"
                         "2,3,5,4,1\n";
  auto job_for = [&](const std::string& dataset) {
    return Job("    model:\n      layers: [{dense: {units: 3}}]\n    dataset: {format: csv, " +
               dataset + ", label: target}\n");
  };
  api::TrainingJob job = job_for("train: " + Csv() + ", test: " + test);
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find(test +
                                            ": the header names feature 3 \"d\", the "
                                            "training set (" +
                                            Csv() + ") names it \"c\""),
            std::string::npos)
      << summary.status().message();
  // A test file not on this machine, or a holdout split: the training file alone, as before.
  job = job_for("train: " + Csv() + ", test: " + (dir_ / "elsewhere.csv").string());
  summary = CheckModelLocally(&job.spec.train);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  job = job_for("train: " + Csv() + ", testFraction: 0.5");
  summary = CheckModelLocally(&job.spec.train);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  // The same columns in the same order pass.
  std::ofstream(test) << "a,b,c,d,target\n"
                         "1,2,3,4,0\n";
  job = job_for("train: " + Csv() + ", test: " + test);
  summary = CheckModelLocally(&job.spec.train);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
}

// A test NPY whose samples have another shape is refused by validate too.
TEST_F(LocalDatasetTest, ATestNpyOfAnotherShapeIsRefusedBeforeAnyRankStarts) {
  std::vector<std::int64_t> labels = {0, 1, 0, 1};
  const std::string x = (dir_ / "x.npy").string(), y = (dir_ / "y.npy").string();
  const std::string tx = (dir_ / "tx.npy").string(), ty = (dir_ / "ty.npy").string();
  std::ofstream(x, std::ios::binary) << data::Npy("|u1", "(4, 6)", std::string(24, '\1'));
  std::ofstream(y, std::ios::binary) << data::Npy("<i8", "(4,)", data::Bytes(labels));
  std::ofstream(tx, std::ios::binary) << data::Npy("|u1", "(4, 5)", std::string(20, '\1'));
  std::ofstream(ty, std::ios::binary) << data::Npy("<i8", "(4,)", data::Bytes(labels));
  api::TrainingJob job = Job(
      "    model:\n      layers: [{dense: {units: 2}}]\n    dataset: {format: npy, trainX: " + x +
      ", trainY: " + y + ", testX: " + tx + ", testY: " + ty + "}\n");
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find(tx + ": samples of 5 features, the training set (" + x +
                                            ") has 6"),
            std::string::npos)
      << summary.status().message();
}

// An IDX set of 12 classes: the spec's classes reach the reader, and the labels are checked
// against the classes the runner will use, as the runner checks them.
TEST_F(LocalDatasetTest, IdxWithMoreThanTenClassesTakesTheSpecsClasses) {
  data::WriteIdxDir(dir_.string(), 24, 3, 3, 12);
  api::TrainingJob job =
      Job("    model:\n      layers: [flatten, {dense: {units: 12}}]\n"
          "    dataset: {format: idx, train: " +
          dir_.string() + ", classes: 12}\n");
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_NE(summary->find("Total params: 120\n"), std::string::npos) << *summary;  // 9*12+12
  job =
      Job("    model:\n      layers: [flatten, {dense: {units: 10}}]\n"
          "    dataset: {format: idx, train: " +
          dir_.string() + "}\n");
  summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find((dir_ / "train-labels-idx1-ubyte").string() +
                                            ": label 10 at index 10 is not below the dataset's 10 "
                                            "classes (Fashion-MNIST's; spec.train.dataset.classes "
                                            "says how many there are)"),
            std::string::npos)
      << summary.status().message();
}

// The training split is read too, as every rank reads it: a label out of range there, a
// training file cut short, or test images of another size than the training images are refused
// naming the file, not left to every rank (validate read the test split alone).
TEST_F(LocalDatasetTest, IdxTrainingFilesAreCheckedAsTheRanksCheckThem) {
  const std::string manifest =
      "    model:\n      layers: [flatten, {dense: {units: 3}}]\n"
      "    dataset: {format: idx, train: " +
      dir_.string() + ", classes: 3}\n";
  data::WriteIdxDir(dir_.string(), 24, 3, 3, 3);
  api::TrainingJob job = Job(manifest);
  ASSERT_TRUE(CheckModelLocally(&job.spec.train).ok());
  const std::string labels = (dir_ / "train-labels-idx1-ubyte").string();
  const std::string images = (dir_ / "train-images-idx3-ubyte").string();
  {  // label 7 at index 5 of the training labels
    std::fstream f(labels, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8 + 5);
    f.put(7);
  }
  job = Job(manifest);
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find(labels + ": label 7 at index 5 is not below the "
                                                     "dataset's 3 classes "
                                                     "(spec.train.dataset.classes)"),
            std::string::npos)
      << summary.status().message();
  data::WriteIdxDir(dir_.string(), 24, 3, 3, 3);
  fs::resize_file(images, 16 + 24 * 9 - 5);
  job = Job(manifest);
  summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find("spec.train.dataset.train: " + images),
            std::string::npos)
      << summary.status().message();
  // Training images of 4x4 beside test images of 3x3.
  const fs::path other = dir_ / "other";
  fs::create_directories(other);
  data::WriteIdxDir(other.string(), 24, 4, 4, 3);
  data::WriteIdxDir(dir_.string(), 24, 3, 3, 3);
  fs::copy_file(other / "train-images-idx3-ubyte", images, fs::copy_options::overwrite_existing);
  job = Job(manifest);
  summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find((dir_ / "t10k-images-idx3-ubyte").string()),
            std::string::npos)
      << summary.status().message();
}

// An IDX set's declared inputShape gives the model the same input whether the files are read
// (ringtrain run, validate, every rank) or only the declaration is (the operator): images for
// [h, w] and [1, h, w], flat for [features] and four dimensions.
TEST_F(LocalDatasetTest, IdxDeclaredShapesReadAlikeWithAndWithoutTheFiles) {
  data::WriteIdxDir(dir_.string(), 24, 3, 3, 10);
  for (const std::string shape : {"[9]", "[3, 3]", "[1, 3, 3]", "[1, 1, 3, 3]"}) {
    const auto manifest = [&](const std::string& where) {
      return "    model:\n      layers: [flatten, {dense: {units: 10}}]\n"
             "    dataset: {format: idx, train: " +
             where + ", inputShape: " + shape + ", classes: 10}\n";
    };
    api::TrainingJob here = Job(manifest(dir_.string()));
    ASSERT_TRUE(CheckModelLocally(&here.spec.train).ok()) << shape;
    api::TrainingJob declared = Job(manifest("/nonexistent/idx"));
    ASSERT_TRUE(CheckModelLocally(&declared.spec.train).ok()) << shape;
    ASSERT_TRUE(here.spec.train.model_spec && declared.spec.train.model_spec) << shape;
    EXPECT_EQ(here.spec.train.model_spec->input, declared.spec.train.model_spec->input) << shape;
  }
}

// NPY images of 8x8 declared [64]: validate and the runner apply the declared shape alike
// (train::LoadTrainingData, model_data_test), so the model of 64 inputs passes both.
TEST_F(LocalDatasetTest, NpyImagesTakeTheDeclaredInputShapeAsTheRunnerDoes) {
  std::string pixels;
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 200; ++i) {
    pixels += std::string(64, static_cast<char>(i));
    labels.push_back(i % 2);
  }
  const std::string x = (dir_ / "x.npy").string();
  const std::string y = (dir_ / "y.npy").string();
  std::ofstream(x, std::ios::binary) << data::Npy("|u1", "(200, 8, 8)", pixels);
  std::ofstream(y, std::ios::binary) << data::Npy("<i8", "(200,)", data::Bytes(labels));
  auto job_for = [&](const std::string& shape) {
    return Job(
        "    model:\n      layers: [{dense: {units: 16}}, relu, {dense: {units: 2}}]\n"
        "    dataset: {format: npy, trainX: " +
        x + ", trainY: " + y + ", testFraction: 0.25, inputShape: " + shape + "}\n");
  };
  api::TrainingJob job = job_for("[64]");
  auto summary = CheckModelLocally(&job.spec.train);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  ASSERT_TRUE(job.spec.train.model_spec.has_value());
  EXPECT_EQ(job.spec.train.model_spec->input, (model::Shape{64, 1, 1}));
  job = job_for("[65]");
  summary = CheckModelLocally(&job.spec.train);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find(
                "spec.train.dataset.inputShape: says [65] (65 values) per sample but " + x +
                " has 64 (8x8)"),
            std::string::npos)
      << summary.status().message();
}

// The shipped examples, against the Fashion-MNIST files when this machine has them (CI does).
TEST(ShippedExamples, ValidateAgainstTheLocalData) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "no Fashion-MNIST under /usr/share/datasets";
  }
  for (const char* name : {"fashion-mnist-mlp.yaml", "fashion-mnist-cnn.yaml",
                           "fashion-mnist-keras-cnn.yaml", "fashion-mnist-gpu.yaml"}) {
    auto job =
        api::LoadManifestFile(std::string(RINGTRAIN_SOURCE_DIR) + "/manifests/examples/" + name);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    auto summary = CheckModelLocally(&job->spec.train);
    ASSERT_TRUE(summary.ok()) << name << ": " << summary.status().ToString();
    EXPECT_NE(summary->find("/usr/share/datasets/fashion-mnist (IDX)"), std::string::npos)
        << *summary;
    // Both CNNs: 421,642 parameters (dropout adds none).
    if (std::string(name).find("cnn") != std::string::npos) {
      EXPECT_NE(summary->find("Total params: 421,642"), std::string::npos) << *summary;
    }
  }
}

// `ringtrain run`'s ranks share this machine: spec.replicas of them that do not fit together
// are refused before any starts, naming spec.replicas, with the runner's own per-rank figures
// (here 4,212,739 parameters, adam: 67.4 MB of state each, plus rank 0's 50.6 MB checkpoint
// copy) and the runner's own 10.5 MB each (kCpuRankRuntimeBytes). The memory is a fake machine
// (MemAvailable), injected: no cgroup, no root needed.
TEST_F(LocalDatasetTest, ALocalGangThatDoesNotFitTogetherIsRefusedNamingSpecReplicas) {
  const fs::path root = dir_ / "machine";
  fs::create_directories(root / "proc");
  train::MemoryProbe probe;
  probe.root = root.string();
  probe.physical_bytes = 1'024'000'000;
  const auto available = [&](std::uint64_t bytes) {
    std::ofstream(root / "proc/meminfo")
        << "MemTotal: 1000000 kB\nMemAvailable: " << bytes / 1024 << " kB\n";
  };
  const auto job = [&](int replicas) {
    auto parsed = api::ParseManifestYaml(
        "apiVersion: ringtrain.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: t\nspec:\n"
        "  replicas: " +
            std::to_string(replicas) +
            "\n  train:\n    optimizer: adam\n    batchSizePerReplica: 4\n"
            "    model:\n      layers: [{dense: {units: 2048}}, relu, {dense: {units: 2048}}, "
            "relu, {dense: {units: 3}}]\n"
            "    dataset: {format: csv, train: " +
            Csv() + ", test: " + Csv() + ", label: target}\n",
        "t.yaml");
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    auto checked = CheckModelLocally(&parsed->spec.train);
    EXPECT_TRUE(checked.ok()) << checked.status().ToString();
    return *parsed;
  };
  // 2 x (67.6 + 10.5) MB and 50.6 MB: 206.8 MB in all. Without the runner's own 10.5 MB a
  // rank, 185.8 MB, which 200 MB would hold.
  available(200'000'000);
  const Status refused = CheckLocalGangMemory(job(2).spec, probe);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("spec.replicas: 2 local ranks need 2 x 78."), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("and 10.5 MB of the runner's own (libraries, threads, heap)"),
            std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("weights, gradients and adam state of 4,212,739 parameters"),
            std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("this machine has (MemAvailable) 200.0 MB available"),
            std::string::npos)
      << refused.message();
  // One rank's own check is the runner's.
  EXPECT_TRUE(CheckLocalGangMemory(job(1).spec, probe).ok());
  available(400'000'000);
  EXPECT_TRUE(CheckLocalGangMemory(job(2).spec, probe).ok());
  // A program of the user's own: no model of ours.
  available(150'000'000);
  api::TrainingJob command = job(2);
  command.spec.command = {"true"};
  EXPECT_TRUE(CheckLocalGangMemory(command.spec, probe).ok());
}

}  // namespace
}  // namespace ringtrain::executors
