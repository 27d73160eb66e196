// Trainer start-up checks at world size 1: data of the wrong shape is refused before any step
// (issue 10 item 1), and unreadable checkpoints are said in the status, not silently ignored
// (issue 10 item 7); /status's epoch counts completed epochs.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "common/runner_contract.h"
#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/model/gemm.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/train/checkpoint.h"
#include "tests/fakes/rank_fixtures.h"

namespace ringtrain::train {
namespace {

// The file names the shape errors must name.
data::Dataset Synthetic(std::size_t n, int rows, int cols) {
  data::Dataset ds = testing::SyntheticImages(n, rows, cols, 1);
  ds.images_path = "/data/t10k-images-idx3-ubyte.gz";
  ds.labels_path = "/data/t10k-labels-idx1-ubyte.gz";
  return ds;
}

TrainConfig SmallConfig() {
  TrainConfig c;
  c.model.name = "mlp";
  c.model.hidden = 16;
  c.optimizer.name = "sgd";
  c.batch_size = 8;
  c.epochs = 2;
  c.warmup_epochs = 0;
  c.eval_every_epoch = false;
  return c;
}

struct OneRank {
  rendezvous::MemoryStore store;
  std::unique_ptr<comm::TcpCommunicator> comm;
  OneRank() {
    comm::TcpCommOptions o;
    o.rank = 0;
    o.size = 1;
    auto c = comm::TcpCommunicator::Create(store, o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) comm = std::move(*c);
  }
};

TEST(TrainerStart, TestSetOfAnotherShapeIsRefusedNamingTheFile) {
  model::SetKernelThreads(1);
  OneRank r;
  data::Dataset train = Synthetic(32, 28, 28);
  data::Dataset test = Synthetic(16, 14, 14);  // the reproduction: used to overflow in Evaluate
  EngineDeps deps;
  deps.comm = r.comm.get();
  deps.train = &train;
  deps.test = &test;
  auto t = rank::Trainer::Create(SmallConfig(), deps);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("/data/t10k-images-idx3-ubyte.gz: images are 14x14"),
            std::string::npos)
      << t.status().message();
  EXPECT_EQ(ExitCodeFor(t.status()), kExitPermanent);
}

TEST(TrainerStart, LabelOutsideTheModelsClassesIsRefused) {
  OneRank r;
  data::Dataset train = Synthetic(32, 28, 28);
  train.labels[5] = 12;
  EngineDeps deps;
  deps.comm = r.comm.get();
  deps.train = &train;
  auto t = rank::Trainer::Create(SmallConfig(), deps);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("label 12 at index 5"), std::string::npos);
}

TEST(TrainerStart, AllCheckpointsCorruptTrainsFromZeroAndSaysSo) {
  model::SetKernelThreads(1);
  auto dir =
      std::filesystem::temp_directory_path() / ("trainer_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* name : {"ckpt-4.bin", "ckpt-8.bin"}) {
    std::ofstream(dir / name) << "RTCKPT02 garbage that is no checkpoint";
  }
  OneRank r;
  data::Dataset train = Synthetic(32, 28, 28);
  metrics::RunnerMetrics metrics({"job", "ns", 0});
  TrainConfig c = SmallConfig();
  c.checkpoint_dir = dir.string();
  EngineDeps deps;
  deps.comm = r.comm.get();
  deps.train = &train;
  deps.metrics = &metrics;
  auto t = rank::Trainer::Create(c, deps);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto res = (*t)->Run();
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_FALSE(res->resumed);
  EXPECT_EQ(res->steps, 8);  // 2 epochs of 4 steps: from step 0
  EXPECT_NE(res->resume_warning.find("starting from step 0"), std::string::npos);
  EXPECT_NE(res->resume_warning.find((dir / "ckpt-8.bin").string()), std::string::npos);

  auto status = nlohmann::json::parse(metrics.RenderStatusJson());
  ASSERT_TRUE(status.contains(std::string(contract::kStatusResumeWarning))) << status.dump();
  EXPECT_EQ(status[std::string(contract::kStatusResumeWarning)], res->resume_warning);
  EXPECT_EQ(status["epoch"], 2) << "epochs completed";
  EXPECT_EQ(status["step"], 8);
  auto final_status = nlohmann::json::parse(metrics.FinalStatusJson());
  EXPECT_EQ(final_status, status);
  EXPECT_EQ(metrics.FinalStatusJson().find('\n'), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(TrainerStart, FreshStartHasNoResumeWarning) {
  OneRank r;
  data::Dataset train = Synthetic(32, 28, 28);
  metrics::RunnerMetrics metrics({"job", "ns", 0});
  TrainConfig c = SmallConfig();
  c.epochs = 1;
  EngineDeps deps;
  deps.comm = r.comm.get();
  deps.train = &train;
  deps.metrics = &metrics;
  auto t = rank::Trainer::Create(c, deps);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*t)->Run().ok());
  auto status = nlohmann::json::parse(metrics.RenderStatusJson());
  EXPECT_FALSE(status.contains(std::string(contract::kStatusResumeWarning)));
  EXPECT_EQ(status["epoch"], 1);
}

}  // namespace
}  // namespace ringtrain::train
