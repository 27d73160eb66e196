// The GPU training loop end to end (device and backend choice: tests/unit/rank), on a GPU:
// world size 1 through NCCL to the CPU path's accuracy band, the step in a CUDA graph, pinned
// host input, two ranks sharing one GPU through the TCP backend, and checkpoints that the CPU
// trainer resumes from. GPU cases skip visibly without a device.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>

#include "runner/comm/nccl/nccl_communicator.h"
#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/cuda/cuda_util.h"
#include "runner/data/table.h"
#include "runner/model/model_spec.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/train/checkpoint.h"

namespace ringtrain::gpu {
namespace {

class GpuTrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (VisibleDeviceCount() == 0) return;
    auto tr = data::LoadFashionMnist("/usr/share/datasets/fashion-mnist", true);
    auto te = data::LoadFashionMnist("/usr/share/datasets/fashion-mnist", false);
    if (!tr.ok() || !te.ok()) {
      const char* env = std::getenv("RINGTRAIN_DATA");
      if (env == nullptr) return;
      tr = data::LoadFashionMnist(env, true);
      te = data::LoadFashionMnist(env, false);
      if (!tr.ok() || !te.ok()) return;
    }
    train_ = new data::Dataset(std::move(*tr));
    test_ = new data::Dataset(std::move(*te));
  }
  void SetUp() override {
    if (VisibleDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
    if (train_ == nullptr) GTEST_SKIP() << "Fashion-MNIST not found (set RINGTRAIN_DATA)";
    dir_ = std::filesystem::temp_directory_path() /
           ("ringtrain-gpu-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  StatusOr<train::TrainResult> RunNccl(const train::TrainConfig& c, bool* graph = nullptr) {
    rendezvous::MemoryStore store;
    comm::NcclCommOptions o;
    ASSIGN_OR_RETURN(auto nccl, comm::NcclCommunicator::Create(store, o));
    train::EngineDeps d;
    d.comm = nccl.get();
    d.train = train_;
    d.test = test_;
    d.device = 0;
    ASSIGN_OR_RETURN(auto t, rank::Trainer::Create(c, d));
    ASSIGN_OR_RETURN(auto r, t->Run());
    if (graph != nullptr) *graph = r.step_graph;
    EXPECT_GT(r.device_busy, 0.0);
    EXPECT_LE(r.device_busy, 1.0);
    return r;
  }

  static data::Dataset* train_;
  static data::Dataset* test_;
  std::filesystem::path dir_;
};
data::Dataset* GpuTrainerTest::train_ = nullptr;
data::Dataset* GpuTrainerTest::test_ = nullptr;

TEST_F(GpuTrainerTest, NcclWorldOfOneReachesTheCpuAccuracyBand) {
  train::TrainConfig c;
  c.epochs = 3;
  c.batch_size = 128;
  c.learning_rate = 0.002;
  bool graph = false;
  auto r = RunNccl(c, &graph);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::printf("GPU MLP 3 epochs: test accuracy %.4f, %.0f samples/s\n", r->test_accuracy,
              r->samples_per_second);
  EXPECT_TRUE(graph);
  EXPECT_GE(r->test_accuracy, 0.86);  // the CPU path gives ~0.87 after 3 epochs
  EXPECT_EQ(r->steps, 3 * ((60000 + 127) / 128));
}

TEST_F(GpuTrainerTest, EagerAndPinnedHostInputTrainToo) {
  for (const char* input : {"device", "host"}) {
    train::TrainConfig c;
    c.epochs = 1;
    c.input = *contract::EnumFromName<contract::Input>(input);
    c.cuda_graph = contract::CudaGraph::kOff;
    bool graph = true;
    auto r = RunNccl(c, &graph);
    ASSERT_TRUE(r.ok()) << input << ": " << r.status().ToString();
    EXPECT_FALSE(graph);
    EXPECT_GE(r->test_accuracy, 0.80) << input;
  }
}

TEST_F(GpuTrainerTest, CnnWithCudnnTrains) {
  train::TrainConfig c;
  c.model.name = "cnn";
  c.epochs = 1;
  auto r = RunNccl(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->test_accuracy, 0.85);
}

// A layer list of its own (Keras-style CNN: strided asymmetric "same" convolution, GELU,
// dropout) on both engines, the same steps from the same weights and the same dropout masks:
// the engines agree to float rounding, and the GPU run trains.
TEST_F(GpuTrainerTest, AUserModelTrainsOnTheGpuAsOnTheCpuEngine) {
  auto spec = model::ParseModelSpec(R"({"input": [1, 28, 28], "layers": [
      {"conv2d": {"filters": 16, "kernel": 4, "stride": 2, "padding": "same"}}, "relu",
      {"max_pool2d": {"pool": 2}}, {"dropout": {"rate": 0.25}}, "flatten",
      {"dense": {"units": 64}}, "gelu", {"dropout": {"rate": 0.5}}, {"dense": {"units": 10}},
      "softmax"]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  train::TrainConfig c;
  c.model_spec = *spec;
  c.epochs = 1;
  c.max_steps = 40;
  c.batch_size = 64;
  c.learning_rate = 0.002;
  c.optimizer.name = "adam";
  c.cuda_graph = contract::CudaGraph::kOff;
  auto gpu = RunNccl(c);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();

  rendezvous::MemoryStore store;
  comm::TcpCommOptions o;
  auto tcp = comm::TcpCommunicator::Create(store, o);
  ASSERT_TRUE(tcp.ok()) << tcp.status().ToString();
  train::EngineDeps d;
  d.comm = tcp->get();
  d.train = train_;
  d.test = test_;
  auto cpu_trainer = rank::Trainer::Create(c, d);
  ASSERT_TRUE(cpu_trainer.ok()) << cpu_trainer.status().ToString();
  auto cpu = (*cpu_trainer)->Run();
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  const double loss_err = std::fabs(gpu->test_loss - cpu->test_loss) / cpu->test_loss;
  std::printf("user model, 40 steps: GPU test loss %.6f acc %.4f, CPU %.6f acc %.4f (rel %.3g)\n",
              gpu->test_loss, gpu->test_accuracy, cpu->test_loss, cpu->test_accuracy, loss_err);
  EXPECT_LE(loss_err, 1e-3);
  EXPECT_NEAR(gpu->test_accuracy, cpu->test_accuracy, 0.005);

  // And through a whole epoch, captured in a graph, it learns.
  c.max_steps = -1;
  c.cuda_graph = contract::CudaGraph::kOn;
  bool graph = false;
  auto epoch = RunNccl(c, &graph);
  ASSERT_TRUE(epoch.ok()) << epoch.status().ToString();
  EXPECT_TRUE(graph);
  std::printf("user model, 1 epoch on the GPU: test accuracy %.4f, %.0f samples/s\n",
              epoch->test_accuracy, epoch->samples_per_second);
  EXPECT_GE(epoch->test_accuracy, 0.82);
}

// A table, as CSV/NPY load it: n samples of `features` floats, blobs around one centre per
// class (classification) or a noisy linear function of the features (regression, 2 targets).
data::Table SyntheticTable(std::size_t n, bool regression, std::uint64_t seed) {
  data::Table t;
  t.n = n;
  t.features = 12;
  t.shape = {t.features};
  t.path = "synthetic";
  t.labels_path = "synthetic";
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  t.task.kind = regression ? data::Task::Kind::kRegression : data::Task::Kind::kClassification;
  t.task.classes = regression ? 0 : 4;
  t.task.targets = regression ? 2 : 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(i % 4);
    float sum = 0;
    for (std::size_t f = 0; f < t.features; ++f) {
      const float v =
          noise(rng) +
          (regression ? 0.0f : (f % 4 == static_cast<std::size_t>(label) ? 2.5f : 0.0f));
      t.x.push_back(v);
      sum += v * static_cast<float>(f % 3) * 0.25f;
    }
    if (regression) {
      t.targets.push_back(sum + 0.1f * noise(rng));
      t.targets.push_back(-0.5f * sum + 0.1f * noise(rng));
    } else {
      t.labels.push_back(label);
    }
  }
  return t;
}

// CSV/NPY tables on the GPU (pinned host input, float targets for mse): the same steps as the
// CPU engine to float rounding, for a classifier and a regression.
TEST_F(GpuTrainerTest, TablesTrainOnTheGpuAsOnTheCpuEngine) {
  for (const bool regression : {false, true}) {
    SCOPED_TRACE(regression ? "regression" : "classification");
    const data::Table train = SyntheticTable(1000, regression, 1);
    const data::Table test = SyntheticTable(300, regression, 2);
    auto spec = model::ParseModelSpec(regression ? R"({"input": [12], "layers": [
        {"dense": {"units": 32}}, "tanh", {"dense": {"units": 2}}], "loss": "mse"})"
                                                 : R"({"input": [12], "layers": [
        {"dense": {"units": 32}}, "relu", {"dropout": {"rate": 0.2}}, {"dense": {"units": 4}}]})");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    train::TrainConfig c;
    c.model_spec = *spec;
    c.epochs = 2;
    c.batch_size = 32;
    c.learning_rate = 0.01;
    c.optimizer.name = "adam";
    StatusOr<train::TrainResult> results[2] = {Internal("not run"), Internal("not run")};
    for (const int device : {0, -1}) {
      rendezvous::MemoryStore store;
      std::unique_ptr<comm::Communicator> comm;
      if (device == 0) {
        auto nccl = comm::NcclCommunicator::Create(store, comm::NcclCommOptions{});
        ASSERT_TRUE(nccl.ok()) << nccl.status().ToString();
        comm = std::move(*nccl);
      } else {
        auto tcp = comm::TcpCommunicator::Create(store, comm::TcpCommOptions{});
        ASSERT_TRUE(tcp.ok()) << tcp.status().ToString();
        comm = std::move(*tcp);
      }
      train::EngineDeps d;
      d.comm = comm.get();
      d.train_table = &train;
      d.test_table = &test;
      d.device = device;
      auto t = rank::Trainer::Create(c, d);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      results[device == 0 ? 0 : 1] = (*t)->Run();
    }
    ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
    ASSERT_TRUE(results[1].ok()) << results[1].status().ToString();
    const train::TrainResult& gpu = *results[0];
    const train::TrainResult& cpu = *results[1];
    const double err = std::fabs(gpu.test_loss - cpu.test_loss) / cpu.test_loss;
    std::printf("table (%s), 2 epochs: GPU test loss %.6f acc %.4f, CPU %.6f acc %.4f (rel %.3g)\n",
                regression ? "mse" : "classes", gpu.test_loss, gpu.test_accuracy, cpu.test_loss,
                cpu.test_accuracy, err);
    EXPECT_LE(err, 1e-3);
    EXPECT_NEAR(gpu.test_accuracy, cpu.test_accuracy, 0.004);
    if (!regression) {
      EXPECT_GE(gpu.test_accuracy, 0.9);
    }
  }
}

TEST_F(GpuTrainerTest, TwoRanksShareOneGpuThroughTheTcpBackend) {
  rendezvous::MemoryStore store;
  std::vector<StatusOr<train::TrainResult>> results(2, Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      comm::TcpCommOptions o;
      o.rank = r;
      o.size = 2;
      auto comm = comm::TcpCommunicator::Create(store, o);
      if (!comm.ok()) {
        results[r] = comm.status();
        return;
      }
      train::TrainConfig c;
      c.epochs = 1;
      c.max_steps = 100;
      train::EngineDeps d;
      d.comm = comm->get();
      d.train = train_;
      d.test = test_;
      d.device = 0;
      auto t = rank::Trainer::Create(c, d);
      results[r] = t.ok() ? (*t)->Run() : StatusOr<train::TrainResult>(t.status());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
  ASSERT_TRUE(results[1].ok()) << results[1].status().ToString();
  // Averaged gradients keep the replicas identical: both evaluate to the same figures.
  EXPECT_EQ(results[0]->test_accuracy, results[1]->test_accuracy);
  EXPECT_EQ(results[0]->steps, 100);
  EXPECT_EQ(results[0]->world_size, 2);
}

TEST_F(GpuTrainerTest, CheckpointsAreTheCpuFormatAndResume) {
  train::TrainConfig c;
  c.epochs = 1;
  c.max_steps = 30;
  c.checkpoint_dir = dir_.string();
  c.checkpoint_every = 10;
  auto r = RunNccl(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->resumed);
  // The GPU run resumes where it stopped...
  auto again = RunNccl(c);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->resumed);
  EXPECT_EQ(again->steps, 60);
  // ...and the CPU trainer reads the same files.
  rendezvous::MemoryStore store;
  auto comm = comm::TcpCommunicator::Create(store, comm::TcpCommOptions{});
  ASSERT_TRUE(comm.ok());
  train::EngineDeps d;  // device -1: the CPU engine
  d.comm = comm->get();
  d.train = train_;
  c.max_steps = 1;
  auto cpu = rank::Trainer::Create(c, d);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  auto cr = (*cpu)->Run();
  ASSERT_TRUE(cr.ok()) << cr.status().ToString();
  EXPECT_TRUE(cr->resumed);
  EXPECT_EQ(cr->steps, 61);
}

}  // namespace
}  // namespace ringtrain::gpu
