// The invariant the product rests on: N ranks with per-rank batch B/N reach, step for step, the
// parameters of one rank with batch B. Ranks are threads sharing an in-memory store and talking
// over a real TCP ring on loopback.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/model/gemm.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/memory_store.h"
#include "tests/fakes/rank_fixtures.h"

namespace ringtrain::train {
namespace {

TrainConfig BaseConfig(const std::string& model, const std::string& optimizer) {
  TrainConfig c;
  c.model.name = model;
  c.optimizer.name = optimizer;
  c.learning_rate = optimizer == "adam" ? 0.002 : 0.05;
  c.lr_scaling = contract::LrScaling::kNone;  // the global batch is the same in both runs
  c.warmup_epochs = 0;
  c.lr_schedule = contract::LrSchedule::kConstant;
  c.epochs = 1;
  c.seed = 3;
  c.eval_every_epoch = false;
  c.bucket_cap_bytes = 16 * 1024;  // several buckets, so the overlap path is exercised
  return c;
}

// Trains `world` ranks as threads; returns rank 0's parameters after training.
std::vector<float> Train(int world, TrainConfig config, const data::Dataset* ds,
                         const data::Table* table, TrainResult* result0 = nullptr) {
  rendezvous::MemoryStore store;
  std::vector<std::vector<float>> params(static_cast<std::size_t>(world));
  std::vector<Status> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      comm::TcpCommOptions o;
      o.rank = r;
      o.size = world;
      o.connect_timeout = std::chrono::seconds(30);
      o.collective_timeout = std::chrono::seconds(60);
      auto comm = comm::TcpCommunicator::Create(store, o);
      if (!comm.ok()) {
        errors[r] = comm.status();
        return;
      }
      EngineDeps deps;
      deps.comm = comm->get();
      deps.train = ds;
      deps.train_table = table;
      auto trainer = rank::Trainer::Create(config, deps);
      if (!trainer.ok()) {
        errors[r] = trainer.status();
        return;
      }
      auto res = (*trainer)->Run();
      if (!res.ok()) {
        errors[r] = res.status();
        return;
      }
      if (r == 0 && result0 != nullptr) *result0 = *res;
      std::vector<float> state;
      std::int64_t optimizer_steps = 0;
      errors[r] = (*trainer)->engine().Snapshot(params[r], state, optimizer_steps);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r].ToString();
  }
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(params[r], params[0]) << "rank " << r << " diverged from rank 0";
  }
  return params[0];
}

std::vector<float> Train(int world, TrainConfig config, const data::Dataset& ds,
                         TrainResult* result0 = nullptr) {
  return Train(world, std::move(config), &ds, nullptr, result0);
}

double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

struct Case {
  int world;
  const char* model;
  const char* optimizer;
};

class DataParallelEquivalence : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { model::SetKernelThreads(1); }
};

TEST_P(DataParallelEquivalence, MatchesOneRankWithTheGlobalBatch) {
  const auto& c = GetParam();
  const int global_batch = 24;
  const int steps = 6;
  data::Dataset ds = testing::SyntheticImages(240, 28, 28, 11);

  TrainConfig single = BaseConfig(c.model, c.optimizer);
  single.batch_size = global_batch;
  single.max_steps = steps;
  TrainConfig multi = single;
  multi.batch_size = global_batch / c.world;

  auto reference = Train(1, single, ds);
  auto distributed = Train(c.world, multi, ds);
  ASSERT_EQ(reference.size(), distributed.size());
  ASSERT_FALSE(reference.empty());
  double rel = RelativeDifference(distributed, reference);
  EXPECT_LE(rel, 1e-5) << "world " << c.world << " " << c.model << "/" << c.optimizer;
  // And training moved the weights: a broken all-reduce that zeroed gradients would not.
  TrainConfig untrained = single;
  untrained.max_steps = 0;
  EXPECT_GT(RelativeDifference(Train(1, untrained, ds), reference), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Worlds, DataParallelEquivalence,
                         ::testing::Values(Case{2, "mlp", "sgd"}, Case{3, "mlp", "adam"},
                                           Case{4, "mlp", "sgd"}, Case{4, "mlp", "adam"},
                                           Case{2, "cnn", "adam"}, Case{3, "cnn", "sgd"}),
                         [](const auto& info) {
                           return std::string(info.param.model) + "_" + info.param.optimizer +
                                  "_world" + std::to_string(info.param.world);
                         });

// A user-defined list (a strided conv, average pooling, tanh, a dropout of 0, dense) on a Table:
// the same invariant, through Model::Create(spec) and the Table loader.
class UserModelDataParallelEquivalence : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { model::SetKernelThreads(1); }
};

TEST_P(UserModelDataParallelEquivalence, MatchesOneRankWithTheGlobalBatch) {
  const auto& c = GetParam();
  const int global_batch = 24;
  const int steps = 6;
  data::Table table = testing::SyntheticTable(240, 64, 3, 5);
  table.shape = {8, 8};  // one channel of 8 × 8, as an NPY of images would say
  auto spec = model::ParseModelSpec(R"({"input": [1, 8, 8], "layers": [
      {"conv2d": {"filters": 4, "kernel": 3, "stride": 2, "padding": "same"}},
      {"avg_pool2d": {"pool": 2}}, "tanh", {"dropout": {"rate": 0}}, "flatten",
      {"dense": {"units": 3}}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();

  TrainConfig single = BaseConfig("mlp", c.optimizer);
  single.model_spec = *spec;
  single.batch_size = global_batch;
  single.max_steps = steps;
  TrainConfig multi = single;
  multi.batch_size = global_batch / c.world;

  auto reference = Train(1, single, nullptr, &table);
  auto distributed = Train(c.world, multi, nullptr, &table);
  ASSERT_EQ(reference.size(), distributed.size());
  // 4·(9+1) conv + 3·(16+1) dense parameters.
  ASSERT_EQ(reference.size(), 40u + 51u);
  EXPECT_LE(RelativeDifference(distributed, reference), 1e-5)
      << "world " << c.world << " " << c.optimizer;
  // And it trained: the weights moved from the initial ones.
  TrainConfig none = single;
  none.max_steps = 0;
  auto initial = Train(1, none, nullptr, &table);
  EXPECT_GT(RelativeDifference(reference, initial), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Worlds, UserModelDataParallelEquivalence,
                         ::testing::Values(Case{2, "user", "sgd"}, Case{2, "user", "adam"},
                                           Case{3, "user", "adam"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::to_string(info.param.world) + "_" + info.param.optimizer;
                         });

TEST(DataParallel, NoOverlapGivesTheSameResult) {
  model::SetKernelThreads(1);
  data::Dataset ds = testing::SyntheticImages(120, 28, 28, 5);
  TrainConfig c = BaseConfig("mlp", "adam");
  c.batch_size = 10;
  c.max_steps = 4;
  auto overlapped = Train(2, c, ds);
  c.overlap = false;
  auto serial = Train(2, c, ds);
  EXPECT_LE(RelativeDifference(overlapped, serial), 1e-6);
}

TEST(DataParallel, ResumeFromCheckpointContinuesExactly) {
  model::SetKernelThreads(1);
  data::Dataset ds = testing::SyntheticImages(160, 28, 28, 7);
  auto dir = std::filesystem::temp_directory_path() / ("dp_resume_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  TrainConfig c = BaseConfig("mlp", "adam");
  c.batch_size = 8;
  c.epochs = 2;  // 10 steps per epoch with 2 ranks: the resume crosses an epoch boundary
  c.max_steps = 14;
  auto straight = Train(2, c, ds);

  c.checkpoint_dir = dir.string();
  c.checkpoint_every = 1000;
  c.max_steps = 8;  // the final checkpoint lands at step 8
  Train(2, c, ds);
  c.max_steps = 6;
  TrainResult resumed;
  auto continued = Train(2, c, ds, &resumed);
  EXPECT_TRUE(resumed.resumed);
  EXPECT_EQ(resumed.steps, 14);
  EXPECT_EQ(continued, straight) << "resume must continue bit for bit";
  std::filesystem::remove_all(dir);
}

// Issue 9 item 7: resizing by restart. A checkpoint taken at world size 2 resumes at world size
// 3 at the same number of samples seen: the rest of the epoch is sharded over 3 ranks, and the
// job finishes its epochs.
TEST(DataParallel, ResizeByRestartContinuesAtTheSameSample) {
  model::SetKernelThreads(1);
  const std::size_t n = 160;
  data::Dataset ds = testing::SyntheticImages(n, 28, 28, 9);
  auto dir = std::filesystem::temp_directory_path() / ("dp_resize_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  TrainConfig c = BaseConfig("mlp", "sgd");
  c.batch_size = 8;
  c.epochs = 2;
  c.checkpoint_dir = dir.string();
  c.checkpoint_every = 1000;
  c.max_steps = 3;  // 3 steps × 8 × 2 ranks = 48 samples of epoch 0; the final checkpoint
  TrainResult first;
  Train(2, c, ds, &first);
  EXPECT_EQ(first.samples_this_run, 48);

  c.max_steps = -1;
  TrainResult resized;
  Train(3, c, ds, &resized);
  EXPECT_TRUE(resized.resumed);
  EXPECT_EQ(resized.world_size, 3);
  EXPECT_EQ(resized.epochs, 2);
  // The rest of epoch 0 (160 - 48 = 112 samples, padded to 114 for 3 ranks) and all of epoch 1
  // (160 padded to 162): every sample of each epoch once, none skipped, none repeated beyond
  // the padding.
  EXPECT_EQ(resized.samples_this_run, 114 + 162);
  // 38 samples per rank at batch 8 = 5 steps, then 54 per rank = 7 steps.
  EXPECT_EQ(resized.steps_this_run, 5 + 7);
  EXPECT_EQ(resized.steps, 3 + 5 + 7);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ringtrain::train
