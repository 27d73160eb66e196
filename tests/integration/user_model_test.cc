// Issue 21, the runner side end to end: a user-defined model and a CSV or NPY dataset written
// here, loaded as the runner loads them (train::LoadTrainingData, train::ResolveModelSpec) and
// trained by TrainRank with 2 ranks over a real TCP ring (threads, one in-memory store). The
// test loss must fall; regression reports its MSE; a model that does not fit is refused naming
// the layer; a checkpoint of another architecture (of the same size) is not resumed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "runner/model/gemm.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/train/model_data.h"
#include "tests/fakes/rank_fixtures.h"
#include "tests/unit/data/npy_writer.h"

namespace ringtrain::rank {
namespace {

using data::Bytes;
using data::Npy;

train::RankEnv EnvFor(int rank, int world) {
  return testing::RankEnvOf({{"RINGTRAIN_RANK", std::to_string(rank)},
                             {"RINGTRAIN_WORLD_SIZE", std::to_string(world)},
                             {"RINGTRAIN_TOKEN", "t"},
                             {"RINGTRAIN_MASTER_ADDR", "127.0.0.1"},
                             {"RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS", "30"},
                             {"RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS", "30"}});
}

// What main does before the rendezvous: the data, then the model resolved against it.
StatusOr<train::TrainingData> Load(train::TrainConfig& config) {
  ASSIGN_OR_RETURN(
      train::TrainingData data,
      train::LoadTrainingData(train::DatasetSpecOf(config), config.seed, config.model.classes));
  ASSIGN_OR_RETURN(config.model_spec, train::ResolveModelSpec(config, data.shape));
  return data;
}

// Trains `world` ranks as threads; returns rank 0's result (every rank must succeed).
StatusOr<train::TrainResult> TrainGang(const train::TrainConfig& config,
                                       const train::TrainingData& data, int world) {
  rendezvous::MemoryStore store;
  std::vector<StatusOr<train::TrainResult>> r(static_cast<std::size_t>(world), Internal("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < world; ++i) {
    threads.emplace_back([&, i] {
      RankDeps deps;
      deps.store = &store;
      deps.train = data.idx_train();
      deps.test = data.idx_test();
      deps.train_table = data.table_train();
      deps.test_table = data.table_test();
      deps.advertise_host = "127.0.0.1";
      r[static_cast<std::size_t>(i)] = TrainRank(EnvFor(i, world), config, Placement{}, deps);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 1; i < world; ++i) {
    if (!r[static_cast<std::size_t>(i)].ok()) return r[static_cast<std::size_t>(i)].status();
  }
  return r[0];
}

class UserModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model::SetKernelThreads(1); }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("user_model_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // A CSV with a header row; the label (or target) in a column named "y", third of the row.
  std::string WriteCsv(const std::string& name, const data::Table& t) {
    std::string text;
    for (std::size_t f = 0; f < t.features; ++f) {
      if (f == 2) text += "y,";
      text += "f" + std::to_string(f) + (f + 1 < t.features ? "," : "\n");
    }
    for (std::size_t i = 0; i < t.n; ++i) {
      for (std::size_t f = 0; f < t.features; ++f) {
        if (f == 2) {
          text +=
              t.task.classification() ? std::to_string(t.labels[i]) : std::to_string(t.targets[i]);
          text += ",";
        }
        text += std::to_string(t.x[i * t.features + f]) + (f + 1 < t.features ? "," : "\n");
      }
    }
    return Write(name, text);
  }

  static train::TrainConfig Config(const std::string& model_json) {
    train::TrainConfig c;
    auto spec = model::ParseModelSpec(model_json);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    if (spec.ok()) c.model_spec = *spec;
    c.optimizer.name = "adam";
    c.learning_rate = 0.01;
    c.batch_size = 16;
    c.epochs = 8;
    c.warmup_epochs = 0;
    c.seed = 7;
    return c;
  }
  static void SetDataset(train::TrainConfig& c, const std::string& json) {
    auto spec = data::ParseDatasetSpec(json);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    c.dataset_spec = *spec;
  }

  // Trains `config` with 2 ranks, once without a step (the initial test loss) and once fully.
  void ExpectLossFalls(train::TrainConfig config, double max_ratio, train::TrainResult* out) {
    auto data = Load(config);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    train::TrainConfig untrained = config;
    untrained.max_steps = 0;
    auto before = TrainGang(untrained, *data, 2);
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    auto after = TrainGang(config, *data, 2);
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    EXPECT_GT(after->steps, 0);
    EXPECT_GT(before->test_loss, 0);
    EXPECT_LT(after->test_loss, max_ratio * before->test_loss)
        << "before " << before->test_loss << " after " << after->test_loss;
    *out = *after;
  }

  std::filesystem::path dir_;
};

constexpr const char* kMlp = R"({"input": [6], "layers": [{"dense": {"units": 32}}, "tanh",
    {"dropout": {"rate": 0.1}}, {"dense": {"units": 3}}, "softmax"]})";

TEST_F(UserModelTest, CsvWithAHeaderAndANamedLabelTrainsToALowerLoss) {
  const std::string train = WriteCsv("train.csv", testing::SyntheticTable(480, 6, 3, 1));
  const std::string test = WriteCsv("test.csv", testing::SyntheticTable(120, 6, 3, 2));
  train::TrainConfig c = Config(kMlp);
  SetDataset(c, R"({"format": "csv", "train": ")" + train + R"(", "test": ")" + test +
                    R"(", "label": "y", "inputShape": [6]})");
  train::TrainResult r;
  ExpectLossFalls(c, 0.5, &r);
  EXPECT_FALSE(r.regression);
  EXPECT_GT(r.test_accuracy, 0.8);
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.steps, 8 * (480 / 32));
}

TEST_F(UserModelTest, NpyPairsTrainToALowerLoss) {
  auto write_split = [&](const std::string& name, const data::Table& t) {
    std::vector<std::int64_t> y(t.labels.begin(), t.labels.end());
    const std::string n = std::to_string(t.n);
    Write(name + "_x.npy", Npy("<f4", "(" + n + ", 6)", Bytes(t.x)));
    Write(name + "_y.npy", Npy("<i8", "(" + n + ",)", Bytes(y)));
    return (dir_ / name).string();
  };
  const std::string train = write_split("train", testing::SyntheticTable(480, 6, 3, 3));
  const std::string test = write_split("test", testing::SyntheticTable(120, 6, 3, 4));
  train::TrainConfig c = Config(kMlp);
  SetDataset(c, R"({"format": "npy", "trainX": ")" + train + R"(_x.npy", "trainY": ")" + train +
                    R"(_y.npy", "testX": ")" + test + R"(_x.npy", "testY": ")" + test +
                    R"(_y.npy"})");
  train::TrainResult r;
  ExpectLossFalls(c, 0.5, &r);
  EXPECT_GT(r.test_accuracy, 0.8);
}

TEST_F(UserModelTest, RegressionReportsTheTestMse) {
  // One file, the test split held out of it.
  const std::string all = WriteCsv("all.csv", testing::SyntheticTable(600, 6, 0, 5));
  train::TrainConfig c = Config(R"({"input": [6], "layers": [{"dense": {"units": 16}}, "relu",
      {"dense": {"units": 1}}], "loss": "mse"})");
  SetDataset(c, R"({"format": "csv", "train": ")" + all +
                    R"(", "label": "y", "task": "regression", "testFraction": 0.2})");
  auto data = Load(c);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(data->table->train.n, 480u);
  EXPECT_EQ(data->table->test.n, 120u);
  train::TrainResult r;
  ExpectLossFalls(c, 0.5, &r);
  EXPECT_TRUE(r.regression);
  EXPECT_EQ(r.test_accuracy, 0);
}

TEST_F(UserModelTest, AModelThatDoesNotFitIsRefusedBeforeTrainingNamingTheLayer) {
  const std::string train = WriteCsv("train.csv", testing::SyntheticTable(64, 6, 3, 1));
  const std::string test = WriteCsv("test.csv", testing::SyntheticTable(16, 6, 3, 2));
  const std::string dataset =
      R"({"format": "csv", "train": ")" + train + R"(", "test": ")" + test + R"(", "label": 2})";
  struct Case {
    const char* model;
    const char* want;
  };
  const Case cases[] = {
      {R"({"input": [6], "layers": [{"dense": {"units": 8}}, "relu", {"dense": {"units": 4}}]})",
       "layers[2] dense: output 4 units but the dataset has 3 classes"},
      {R"({"input": [7], "layers": [{"dense": {"units": 3}}]})", "input"},
      {R"({"input": [6], "layers": [{"dense": {"units": 3}}], "loss": "mse"})", "model.loss"},
  };
  for (const Case& k : cases) {
    train::TrainConfig c = Config(k.model);
    SetDataset(c, dataset);
    auto data = Load(c);
    ASSERT_FALSE(data.ok()) << k.model;
    EXPECT_EQ(data.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(data.status().message().find(k.want), std::string::npos) << data.status().message();
  }
  // A preset cannot do regression, and a stated inputShape must be the data's.
  train::TrainConfig preset;
  SetDataset(preset, R"({"format": "csv", "train": ")" + train + R"(", "test": ")" + test +
                         R"(", "task": "regression"})");
  EXPECT_EQ(Load(preset).status().code(), StatusCode::kInvalidArgument);
  train::TrainConfig shape = Config(kMlp);
  SetDataset(shape, R"({"format": "csv", "train": ")" + train + R"(", "test": ")" + test +
                        R"(", "label": 2, "inputShape": [1, 2, 2]})");
  auto wrong = Load(shape);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("dataset.inputShape"), std::string::npos)
      << wrong.status().message();
}

TEST_F(UserModelTest, ResumingAnotherArchitectureIsAPermanentErrorNamingBoth) {
  const std::string train = WriteCsv("train.csv", testing::SyntheticTable(96, 6, 3, 1));
  const std::string test = WriteCsv("test.csv", testing::SyntheticTable(32, 6, 3, 2));
  const std::string dataset =
      R"({"format": "csv", "train": ")" + train + R"(", "test": ")" + test + R"(", "label": 2})";
  // The same parameters, another activation: only the recorded architecture tells them apart.
  train::TrainConfig tanh = Config(R"({"input": [6], "layers": [{"dense": {"units": 8}}, "tanh",
      {"dense": {"units": 3}}]})");
  train::TrainConfig relu = Config(R"({"input": [6], "layers": [{"dense": {"units": 8}}, "relu",
      {"dense": {"units": 3}}]})");
  for (train::TrainConfig* c : {&tanh, &relu}) {
    SetDataset(*c, dataset);
    c->checkpoint_dir = (dir_ / "ckpt").string();
    c->epochs = 1;
  }
  auto data = Load(tanh);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  ASSERT_TRUE(Load(relu).ok());
  auto first = TrainGang(tanh, *data, 2);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // The same architecture resumes (and has nothing left to train).
  tanh.epochs = 2;
  auto resumed = TrainGang(tanh, *data, 2);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_TRUE(resumed->resumed);
  auto refused = TrainGang(relu, *data, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_FALSE(refused.status().retryable()) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find(model::CanonicalString(*tanh.model_spec)),
            std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find(model::CanonicalString(*relu.model_spec)),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace ringtrain::rank
