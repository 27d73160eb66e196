// The GPU training loop end to end (device and backend choice: tests/unit/rank), on a GPU:
// world size 1 through NCCL to the CPU path's accuracy band, the step in a CUDA graph, pinned
// host input, two ranks sharing one GPU through the TCP backend, and checkpoints that the CPU
// trainer resumes from. GPU cases skip visibly without a device.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "runner/comm/nccl/nccl_communicator.h"
#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/cuda/cuda_util.h"
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
