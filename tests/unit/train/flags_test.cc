// The runner's flags: errors name the flag, the help lists every flag, and whatever the
// controller writes for a valid TrainingJob (api::RunnerArgs) the runner parses back to the same
// values, so the two binaries cannot drift.
#include <gtest/gtest.h>

#include "controller/api/training_job.h"
#include "runner/train/config.h"

namespace ringtrain::train {
namespace {

TEST(TrainFlags, ErrorsNameTheFlag) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--epochs", "0"}, "--epochs"},
      {{"--epochs=ten"}, "--epochs"},
      {{"--lr-scaling", "sqrt"}, "--lr-scaling"},
      {{"--device", "tpu"}, "--device"},
      {{"--overlap=maybe"}, "--overlap"},
      {{"--no-such-flag", "1"}, "--no-such-flag"},
      {{"--batch-size"}, "--batch-size"},
      {{"stray"}, "stray"},
  };
  for (const auto& [args, names] : cases) {
    auto c = ParseTrainFlags(args);
    ASSERT_FALSE(c.ok()) << names;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(names), std::string::npos) << c.status().ToString();
  }
}

TEST(TrainFlags, ModesAreParsedOnceIntoEnums) {
  auto c = ParseTrainFlags({"--lr-scaling=none", "--lr-schedule", "constant", "--device", "cuda",
                            "--backend", "tcp", "--precision", "tf32", "--input", "host",
                            "--cuda-graph", "off"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->lr_scaling, contract::LrScaling::kNone);
  EXPECT_EQ(c->lr_schedule, contract::LrSchedule::kConstant);
  EXPECT_EQ(c->device, contract::Device::kCuda);
  EXPECT_EQ(c->backend, contract::Backend::kTcp);
  EXPECT_EQ(c->precision, contract::Precision::kTf32);
  EXPECT_EQ(c->input, contract::Input::kHost);
  EXPECT_EQ(c->cuda_graph, contract::CudaGraph::kOff);
}

TEST(TrainFlags, ModelAndDatasetSpecs) {
  const std::string model =
      R"({"input": [4], "layers": [{"dense": {"units": 3}}], "loss": "softmax_cross_entropy"})";
  const std::string dataset = R"({"format": "csv", "train": "a.csv", "testFraction": 0.25})";
  auto c = ParseTrainFlags({"--model-spec", model, "--dataset-spec=" + dataset});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->model_spec.has_value());
  EXPECT_EQ(c->model_spec->input, (model::Shape{4, 1, 1}));
  ASSERT_TRUE(c->dataset_spec.has_value());
  EXPECT_EQ(c->dataset_spec->format, data::DatasetFormat::kCsv);
  EXPECT_EQ(DatasetSpecOf(*c).train, "a.csv");
  // The default --model is no contradiction.
  EXPECT_TRUE(ParseTrainFlags({"--model", "mlp", "--model-spec", model}).ok());

  // Without specs: the preset and the IDX directory, as before.
  auto d = ParseTrainFlags({"--dataset", "/data/fm"});
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->model_spec.has_value());
  EXPECT_FALSE(d->dataset_spec.has_value());
  EXPECT_EQ(DatasetSpecOf(*d), data::IdxDatasetSpec("/data/fm"));

  const std::pair<std::vector<std::string>, std::string> errors[] = {
      {{"--model", "cnn", "--model-spec", model}, "--model-spec: not with --model cnn"},
      {{"--model-spec", model, "--model", "cnn"}, "--model-spec: not with --model cnn"},
      {{"--dataset", "/d", "--dataset-spec", dataset}, "--dataset-spec: not with --dataset"},
      {{"--model-spec", R"({"input": [4]})"}, "--model-spec.layers"},
      {{"--model-spec", "not json"}, "--model-spec: not valid JSON"},
      {{"--dataset-spec", R"({"format": "csv"})"}, "--dataset-spec.train: required"},
  };
  for (const auto& [args, want] : errors) {
    auto e = ParseTrainFlags(args);
    ASSERT_FALSE(e.ok()) << want;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(want), std::string::npos) << e.status().ToString();
  }
}

TEST(TrainFlags, HelpListsEveryFlag) {
  const std::string help = TrainFlagsHelp();
  for (const std::string& name : TrainFlagNames()) {
    EXPECT_NE(help.find("--" + name + " "), std::string::npos) << "--" << name << " not in help";
  }
}

TEST(TrainFlags, WhatTheControllerWritesTheRunnerReadsBack) {
  api::JobSpec spec;
  spec.train.model = "cnn";
  spec.train.epochs = 3;
  spec.train.batch_size_per_replica = 32;
  spec.train.optimizer = "sgd";
  spec.train.learning_rate = 0.0125;
  spec.train.momentum = 0.8;
  spec.train.weight_decay = 1e-4;
  spec.train.lr_scaling = contract::LrScaling::kNone;
  spec.train.warmup_epochs = 0.5;
  spec.train.lr_schedule = contract::LrSchedule::kConstant;
  spec.train.seed = 7;
  spec.backend = contract::Backend::kTcp;
  spec.gpus_per_replica = 0;
  auto c = ParseTrainFlags(api::RunnerArgs(spec, "/ckpt"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.name, "cnn");
  EXPECT_EQ(c->epochs, 3);
  EXPECT_EQ(c->batch_size, 32);
  EXPECT_EQ(c->optimizer.name, "sgd");
  EXPECT_EQ(c->learning_rate, 0.0125);
  EXPECT_EQ(c->optimizer.momentum, 0.8);
  EXPECT_EQ(c->optimizer.weight_decay, 1e-4);
  EXPECT_EQ(c->lr_scaling, contract::LrScaling::kNone);
  EXPECT_EQ(c->warmup_epochs, 0.5);
  EXPECT_EQ(c->lr_schedule, contract::LrSchedule::kConstant);
  EXPECT_EQ(c->seed, 7u);
  EXPECT_EQ(c->backend, contract::Backend::kTcp);
  EXPECT_EQ(c->device, contract::Device::kCpu);
  EXPECT_EQ(c->checkpoint_dir, "/ckpt");
  // Defaults agree too: an empty TrainingJob's train section means the runner's defaults.
  auto d = ParseTrainFlags(api::RunnerArgs(api::JobSpec{}, ""));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const TrainConfig runner_defaults;
  EXPECT_EQ(d->model.name, runner_defaults.model.name);
  EXPECT_EQ(d->optimizer.name, runner_defaults.optimizer.name);
  EXPECT_EQ(d->learning_rate, runner_defaults.learning_rate);
  EXPECT_EQ(d->lr_scaling, runner_defaults.lr_scaling);
  EXPECT_EQ(d->lr_schedule, runner_defaults.lr_schedule);
  EXPECT_EQ(d->epochs, runner_defaults.epochs);
  EXPECT_EQ(d->batch_size, runner_defaults.batch_size);
}

// Issue 21: a layer list and a dataset object reach the runner as the same specs.
TEST(TrainFlags, WhatTheControllerWritesForSpecsTheRunnerReadsBack) {
  for (const char* name : {"fashion-mnist-keras-cnn.yaml", "fashion-mnist-cnn.yaml"}) {
    auto job =
        api::LoadManifestFile(std::string(RINGTRAIN_SOURCE_DIR) + "/manifests/examples/" + name);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    auto c = ParseTrainFlags(api::RunnerArgs(job->spec, ""));
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().ToString();
    const api::TrainSpec& t = job->spec.train;
    ASSERT_EQ(c->model_spec.has_value(), t.model_spec.has_value()) << name;
    if (t.model_spec) {
      EXPECT_EQ(model::CanonicalString(*c->model_spec), model::CanonicalString(*t.model_spec));
      EXPECT_EQ(c->model_spec->init, model::Initializer::kGlorot);  // Keras' defaults
    } else {
      EXPECT_EQ(c->model.name, t.model);
    }
    ASSERT_EQ(c->dataset_spec.has_value(), t.dataset_spec.has_value()) << name;
    if (t.dataset_spec) {
      EXPECT_EQ(*c->dataset_spec, *t.dataset_spec);
    } else {
      EXPECT_EQ(c->dataset, t.dataset);
    }
  }
}

}  // namespace
}  // namespace ringtrain::train
