// train::LoadTrainingData: what a rank loads for a DatasetSpec and the shape its model is checked
// against, on data written here.
#include "runner/train/model_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runner/model/model.h"
#include "runner/train/bucket_plan.h"
#include "runner/train/grad_reducer.h"
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
                                           ": label 10 at index 10 is not below the dataset's 10 "
                                           "classes (Fashion-MNIST's; spec.train.dataset.classes "
                                           "says how many there are)"),
            std::string::npos)
      << loaded.status().message();
}

// IDX images keep their shape; a declared one must be it (or hold as many values), the same
// check as `ringtrain validate`'s, naming the field and the images file. Declared [features]
// they are flat, as the operator reads that declaration (api::DeclaredDataShape): a model of
// input [9] trains on them (before, the operator passed it and every rank refused it).
TEST_F(ModelDataTest, IdxImagesKeepTheirShapeAndTheDeclaredOneIsChecked) {
  data::WriteIdxDir(dir_.string(), 20, 3, 3, 10);
  data::DatasetSpec spec = data::IdxDatasetSpec(dir_.string());
  for (const std::vector<int>& fits : {std::vector<int>{1, 3, 3}, {3, 3}, {9}, {1, 1, 3, 3}}) {
    spec.input_shape = fits;
    auto loaded = LoadTrainingData(spec, 1, 10);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const bool flat = fits.size() == 1 || fits.size() == 4;
    const model::Shape want = flat ? model::Shape{9, 1, 1} : model::Shape{1, 3, 3};
    EXPECT_EQ(loaded->shape.input, want) << fits.size();
    EXPECT_EQ(loaded->idx->train.flat, flat);
    EXPECT_EQ(loaded->idx->test.flat, flat);
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

// A fake root for ReadMemoryBudget: sys/fs/cgroup/... and proc/meminfo as a test writes them.
class MemoryBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    probe_.root = (std::filesystem::temp_directory_path() /
                   ("memory_budget_test_" + std::to_string(::getpid()) + "_" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                      .string();
    std::filesystem::remove_all(probe_.root);
    std::filesystem::create_directories(probe_.root);
  }
  void TearDown() override { std::filesystem::remove_all(probe_.root); }

  void Write(const std::string& path, const std::string& text) {
    const std::filesystem::path file = std::filesystem::path(probe_.root) / path;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << text;
  }
  void Clear() {
    std::filesystem::remove_all(probe_.root);
    std::filesystem::create_directories(probe_.root);
  }

  MemoryProbe probe_;
};

// 1,234,567 adam parameters (19.8 MB) and a batch of 1.0 GB fit a 2.0 GB limit, not the 0.8 GB
// that 1.2 GB already in use leave.
constexpr std::uint64_t kParams = 1'234'567;
constexpr BatchMemory kBatch{4096, 1'000'000'000};
constexpr char kRefusedWithInUse[] =
    "model.layers: 1,234,567 parameters need 19.8 MB for weights, gradients and optimizer state "
    "(adam) and 1.0 GB for the activations and input buffers of a batch of 4096 "
    "(batchSizePerReplica); this process may use 2.0 GB in all, 1.2 GB of it already in use (the "
    "datasets and other processes)";

// A pod's cgroup v2 limit of 2 GB, 1.1 GB of it anonymous memory (the datasets, a sidecar) and
// 0.1 GB shmem: a model that fits the bare limit is refused, naming what is in use. The page
// cache (file), which reclaim frees, is not counted, nor is the machine's /proc/meminfo.
TEST_F(MemoryBudgetTest, InUseMemoryOfTheCgroupV2RefusesAModelThatFitsTheBareLimit) {
  probe_.physical_bytes = 64'000'000'000;
  Write("sys/fs/cgroup/memory.max", "2000000000\n");
  Write("sys/fs/cgroup/memory.stat",
        "anon 1100000000\nfile 800000000\nkernel_stack 16384\nshmem 100000000\n"
        "file_mapped 4096\nanon_thp 0\n");
  Write("proc/meminfo", "MemTotal:       62500000 kB\nMemAvailable:   62000000 kB\n");
  const MemoryBudget budget = ReadMemoryBudget(probe_);
  EXPECT_EQ(budget.limit, 2'000'000'000u);
  EXPECT_EQ(budget.in_use, 1'200'000'000u);
  EXPECT_TRUE(
      CheckTrainingStateFits(kParams, "adam", std::uint64_t{2'000'000'000}, false, kBatch).ok());
  EXPECT_FALSE(budget.machine_wide);
  const Status st = CheckTrainingStateFits(kParams, "adam", budget, false, kBatch);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument)
      << "the cgroup's own: a restart loads it again";
  EXPECT_EQ(st.message(), kRefusedWithInUse);
  // What the limit leaves is still there to use.
  EXPECT_TRUE(CheckTrainingStateFits(kParams, "adam", budget, false, {64, 700'000'000}).ok());
}

// cgroup v1: total_rss and total_shmem of the hierarchy (not the cgroup's own rss, not the
// cache) are in use.
TEST_F(MemoryBudgetTest, InUseMemoryOfTheCgroupV1RefusesAModelThatFitsTheBareLimit) {
  probe_.physical_bytes = 64'000'000'000;
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "2000000000\n");
  Write("sys/fs/cgroup/memory/memory.stat",
        "cache 900000000\nrss 300000000\nrss_huge 0\nshmem 0\nmapped_file 0\n"
        "hierarchical_memory_limit 2000000000\ntotal_cache 900000000\ntotal_rss 1150000000\n"
        "total_rss_huge 0\ntotal_shmem 50000000\n");
  MemoryBudget budget = ReadMemoryBudget(probe_);
  EXPECT_EQ(budget.limit, 2'000'000'000u);
  EXPECT_EQ(budget.in_use, 1'200'000'000u);
  EXPECT_TRUE(
      CheckTrainingStateFits(kParams, "adam", std::uint64_t{2'000'000'000}, false, kBatch).ok());
  EXPECT_EQ(CheckTrainingStateFits(kParams, "adam", budget, false, kBatch).message(),
            kRefusedWithInUse);
  // A kernel without the hierarchy's totals: the cgroup's own rss and shmem.
  Write("sys/fs/cgroup/memory/memory.stat", "cache 900000000\nrss 1150000000\nshmem 50000000\n");
  budget = ReadMemoryBudget(probe_);
  EXPECT_EQ(budget.in_use, 1'200'000'000u);
  EXPECT_EQ(CheckTrainingStateFits(kParams, "adam", budget, false, kBatch).message(),
            kRefusedWithInUse);
}

// No cgroup limit below the machine's (v2 "max", v1's absurd "no limit"): the machine is the
// limit, and what MemAvailable does not count as free (other ranks, everything else) is in use.
TEST_F(MemoryBudgetTest, WithoutACgroupLimitTheMachinesMemInfoTellsWhatIsInUse) {
  probe_.physical_bytes = 16'000'000'000;
  Write("sys/fs/cgroup/memory.max", "max\n");
  Write("sys/fs/cgroup/memory.stat", "anon 1\n");
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  Write("proc/meminfo",
        "MemTotal:       15625000 kB\nMemFree:          100000 kB\nMemAvailable:    3906250 kB\n"
        "Buffers:           1000 kB\nCached:          3000000 kB\n");
  const MemoryBudget budget = ReadMemoryBudget(probe_);
  EXPECT_EQ(budget.limit, 16'000'000'000u);
  EXPECT_EQ(budget.in_use, 12'000'000'000u);
  EXPECT_TRUE(budget.machine_wide);
  // 300,000,000 adam parameters: 4.8 GB of 16 GB, but only 4 GB are left. Other processes of
  // the machine hold them and may free them: retryable (a restart may fit), not permanent.
  EXPECT_TRUE(CheckTrainingStateFits(300'000'000, "adam", std::uint64_t{16'000'000'000}).ok());
  const Status for_others =
      CheckTrainingStateFits(300'000'000, "adam", budget, false, {64, 1'000'000});
  EXPECT_EQ(for_others.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(for_others.retryable());
  EXPECT_EQ(for_others.message(),
            "model.layers: 300,000,000 parameters need 4.8 GB for weights, gradients and "
            "optimizer state (adam); this process may use 16.0 GB in all, 12.0 GB of it already "
            "in use (the datasets and other processes); retried, as other processes may free it");
  // What is in use is not named when the limit itself is too small: permanent.
  const Status too_big = CheckTrainingStateFits(1'100'000'000, "adam", budget);
  EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(too_big.message(),
            "model.layers: 1,100,000,000 parameters need 17.6 GB for weights, gradients and "
            "optimizer state (adam); this process may use 16.0 GB in all");
}

// The machine as above (16 GB, 12 GB of it in use), and /proc/self/status saying how much of
// that this process holds itself: its datasets, which a restart loads again.
class OwnMemoryTest : public MemoryBudgetTest {
 protected:
  void SetUp() override {
    MemoryBudgetTest::SetUp();
    probe_.physical_bytes = 16'000'000'000;
    Write("sys/fs/cgroup/memory.max", "max\n");
    Write("proc/meminfo", "MemTotal:       15625000 kB\nMemAvailable:    3906250 kB\n");
  }
  void WriteStatus(const std::string& rss) {
    Write("proc/self/status",
          "Name:\tringtrain\nVmRSS:\t11718750 kB\n" + rss + "RssFile:\t  488281 kB\nThreads:\t4\n");
  }
  // 300,000,000 adam parameters (4.8 GB) and a small batch.
  Status Check() {
    return CheckTrainingStateFits(300'000'000, "adam", ReadMemoryBudget(probe_), false,
                                  {64, 1'000'000});
  }
};

constexpr char kRefusedForOthers[] =
    "model.layers: 300,000,000 parameters need 4.8 GB for weights, gradients and optimizer "
    "state (adam); this process may use 16.0 GB in all, 12.0 GB of it already in use (the "
    "datasets and other processes); retried, as other processes may free it";

// This process's own 11.5 GB (11,230,469 kB: its datasets, anonymous and shared) leave 4.5 GB
// of the 16 GB however much other processes free: a 4.8 GB model is refused permanently, not
// retried until the job's backoffLimit is spent (every restart loads the same datasets).
TEST_F(OwnMemoryTest, ItsOwnDatasetsLeavingTooLittleAreAPermanentRefusal) {
  WriteStatus("RssAnon:\t11034000 kB\nRssShmem:\t  196469 kB\n");
  const MemoryBudget budget = ReadMemoryBudget(probe_);
  EXPECT_TRUE(budget.machine_wide);
  EXPECT_EQ(budget.in_use, 12'000'000'000u);
  EXPECT_EQ(budget.own_in_use, 11'230'469ULL * 1024);
  const Status st = Check();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_FALSE(st.retryable());
  EXPECT_EQ(st.message(),
            "model.layers: 300,000,000 parameters need 4.8 GB for weights, gradients and "
            "optimizer state (adam); this process may use 16.0 GB in all, 12.0 GB of it already "
            "in use (the datasets and other processes); 11.5 GB of it this process's own (its "
            "datasets), which leaves too little even if other processes free theirs");
  // A 4.4 GB model, which the 4.5 GB its own leave would hold, is refused (4.0 GB are free
  // now) only for what other processes hold: retried.
  const Status small = CheckTrainingStateFits(275'000'000, "adam", budget);
  EXPECT_EQ(small.code(), StatusCode::kResourceExhausted) << small.ToString();
}

// Its own 1 GB: the other 11 GB are other processes' (sibling ranks of `ringtrain run` among
// them), which may free them: retried, as before.
TEST_F(OwnMemoryTest, OtherProcessesHoldingTheMemoryIsARetryableRefusal) {
  WriteStatus("RssAnon:\t  976563 kB\nRssShmem:\t       0 kB\n");
  const MemoryBudget budget = ReadMemoryBudget(probe_);
  EXPECT_EQ(budget.own_in_use, 976'563ULL * 1024);
  const Status st = Check();
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_TRUE(st.retryable());
  EXPECT_EQ(st.message(), kRefusedForOthers);
  // 11.0 GB of its own leave 5.0 GB: the 4.8 GB would fit once the others freed theirs.
  WriteStatus("RssAnon:\t10742187 kB\nRssShmem:\t       0 kB\n");
  EXPECT_EQ(Check().code(), StatusCode::kResourceExhausted);
}

// An own figure larger than what is in use (the two files read at different moments) is all of
// it; a cgroup's limit is the process's own anyway (/proc/self/status is not read).
TEST_F(OwnMemoryTest, ItsOwnIsNeverMoreThanWhatIsInUse) {
  WriteStatus("RssAnon:\t19531250 kB\nRssShmem:\t       0 kB\n");
  EXPECT_EQ(ReadMemoryBudget(probe_).own_in_use, 12'000'000'000u);
  EXPECT_EQ(Check().code(), StatusCode::kInvalidArgument);
  // Nothing in use: nothing of it is its own, whatever the figure says.
  EXPECT_TRUE(CheckTrainingStateFits(300'000'000, "adam",
                                     MemoryBudget{16'000'000'000, 0, true, 12'000'000'000})
                  .ok());
  EXPECT_EQ(CheckTrainingStateFits(300'000'000, "adam",
                                   MemoryBudget{16'000'000'000, 12'000'000'000, true, ~0ULL})
                .code(),
            StatusCode::kInvalidArgument);
  Write("sys/fs/cgroup/memory.max", "2000000000\n");
  Write("sys/fs/cgroup/memory.stat", "anon 1200000000\n");
  EXPECT_EQ(ReadMemoryBudget(probe_).own_in_use, 0u);
}

// /proc/self/status read as hostile: missing, empty, either line missing or garbled, a sign,
// numbers past 64 bits, kB past 64 bits as bytes or a sum of them (which would wrap to this
// process's 11.5 GB). Each counts none of it as this process's own: retried, as before.
TEST_F(OwnMemoryTest, GarbageInItsStatusCountsNothingAsItsOwn) {
  const auto expect_none_own = [&](const std::string& what) {
    EXPECT_EQ(ReadMemoryBudget(probe_).own_in_use, 0u) << what;
    const Status st = Check();
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << what;
    EXPECT_EQ(st.message(), kRefusedForOthers) << what;
  };
  expect_none_own("no proc/self/status");
  for (const char* status :
       {"", "\n\n", "RssAnon:\t11230469 kB\n", "RssShmem:\t11230469 kB\n",
        "RssAnon: -11230469 kB\nRssShmem: 0 kB\n", "RssAnon: lots kB\nRssShmem: 0 kB\n",
        "RssAnon: 11230469abc kB\nRssShmem: 0 kB\n", "RssAnon: 1.1e7 kB\nRssShmem: 0 kB\n",
        "RssAnon:11230469 kB\nRssShmem:0 kB\n", "RssAnon: 11230469 kB\nRssShmem: x kB\n",
        "RssAnonymous: 11230469 kB\nRssShmem: 0 kB\n",
        "RssAnon: \xff\xfe"
        "11230469 kB\nRssShmem: 0 kB\n",
        "RssAnon: 99999999999999999999999 kB\nRssShmem: 0 kB\n",
        "RssAnon: 18014398520712453 kB\nRssShmem: 0 kB\n",
        "RssAnon: 18014398509481983 kB\nRssShmem: 11230470 kB\n"}) {
    Write("proc/self/status", status);
    expect_none_own(std::string("status ") + status);
  }
  // Nothing in use on the machine: nothing of it is its own either.
  Write("proc/meminfo", "MemTotal: lots kB\n");
  Write("proc/self/status", "RssAnon: 11230469 kB\nRssShmem: 0 kB\n");
  EXPECT_EQ(ReadMemoryBudget(probe_).own_in_use, 0u);
  EXPECT_TRUE(Check().ok());
}

// What the files hold is read as hostile: garbage, signs, numbers past 64 bits, sums that would
// wrap, a reading larger than the limit, missing lines. None crashes or refuses a model on a
// guess: each counts nothing in use, and a limit that is no number is no limit.
TEST_F(MemoryBudgetTest, GarbageInTheFilesCountsNothingInUse) {
  constexpr std::uint64_t kPhysical = 16'000'000'000;
  constexpr std::uint64_t kCgroup = 2'000'000'000;
  probe_.physical_bytes = kPhysical;
  // Each time: the limit expected, nothing in use, and a model of half the limit fits.
  const auto expect_nothing_in_use = [&](std::uint64_t limit, const std::string& what) {
    const MemoryBudget budget = ReadMemoryBudget(probe_);
    EXPECT_EQ(budget.limit, limit) << what;
    EXPECT_EQ(budget.in_use, 0u) << what;
    EXPECT_TRUE(CheckTrainingStateFits(limit / 2 / 16, "adam", budget).ok()) << what;
  };
  // A memory.max that is no number is no limit: the machine's (and an empty meminfo).
  for (const char* max : {"garbage\n", "-1\n", "99999999999999999999999\n", "2000000000 kB\n", "",
                          "\x7f\xff\xfe\x01 2000000000\n"}) {
    Clear();
    Write("sys/fs/cgroup/memory.max", max);
    Write("sys/fs/cgroup/memory.stat", "anon 1200000000\n");
    Write("proc/meminfo", "");
    expect_nothing_in_use(kPhysical, std::string("memory.max ") + max);
  }
  // Under a limit of 2 GB, a memory.stat missing, empty, garbled, past 64 bits, summing past 64
  // bits (would wrap to 1.2 GB), without anon, or claiming the limit or more (this process could
  // not be running).
  Clear();
  Write("sys/fs/cgroup/memory.max", "2000000000\n");
  expect_nothing_in_use(kCgroup, "no memory.stat");
  for (const char* stat :
       {"", "anon -1200000000\n", "anon 1200000000abc\n", "anon 1.2e9\n",
        "anon \xff\xfe"
        "1200000000\n",
        "anon 99999999999999999999\nshmem 1200000000\n", "anon\nshmem 1200000000\n",
        "shmem 1200000000\n", "anonymous 1200000000\nanon_thp 1200000000\n",
        "anon 18446744073709551615\nshmem 1200000001\n", "anon 2000000000\n",
        "anon 5000000000\n"}) {
    Write("sys/fs/cgroup/memory.stat", stat);
    expect_nothing_in_use(kCgroup, std::string("memory.stat ") + stat);
  }
  // No cgroup: a /proc/meminfo whose kB are past 64 bits as bytes (2^54 + 11,718,750 kB would
  // wrap to 12 GB), with more available than there is, or missing or garbled lines.
  Clear();
  for (const char* meminfo :
       {"MemTotal: 18014398509481984 kB\nMemAvailable: 0 kB\n",
        "MemTotal: 18014398521200734 kB\nMemAvailable: 0 kB\n",
        "MemTotal: 3906250 kB\nMemAvailable: 15625000 kB\n", "MemTotal: 15625000 kB\n",
        "MemTotal: lots kB\nMemAvailable: 3906250 kB\n",
        "MemTotal:15625000 kB\nMemAvailable:3906250 kB\n",
        "MemTotal: 15625000 kB\nMemAvailable: -3906250 kB\n", "\n\n\n"}) {
    Write("proc/meminfo", meminfo);
    expect_nothing_in_use(kPhysical, std::string("meminfo ") + meminfo);
  }
  // An in-use figure as large as the limit, however it came, leaves the check to the limit.
  EXPECT_TRUE(CheckTrainingStateFits(1'000'000, "adam", MemoryBudget{kCgroup, kCgroup}).ok());
  EXPECT_TRUE(CheckTrainingStateFits(1'000'000, "adam", MemoryBudget{kCgroup, ~0ULL}).ok());
  // Nothing there at all: the physical memory, nothing in use.
  std::filesystem::remove_all(probe_.root);
  expect_nothing_in_use(kPhysical, "no files");
}

// The sums saturate: 2^62 parameters need 2^66 bytes, which wrapped would be 0 and pass any
// limit; a batch or a reducer near 2^64 bytes beside a small state likewise.
TEST(TrainingState, SumsPastSixtyFourBitsAreRefusedNotWrapped) {
  constexpr std::uint64_t kMax = ~0ULL;
  constexpr std::uint64_t kHuge = std::uint64_t{1} << 62;
  EXPECT_EQ(TrainingStateBytes(kHuge, "adam"), kMax);
  EXPECT_EQ(TrainingStateBytes(kHuge, "sgd", true), kMax);
  EXPECT_EQ(TrainingStateBytes(kHuge / 16, "adam"), std::uint64_t{1} << 62);
  const Status st = CheckTrainingStateFits(kHuge, "adam", std::uint64_t{16} << 30);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("model.layers: 4,611,686,018,427,387,904 parameters need ", 0), 0u)
      << st.message();
  EXPECT_FALSE(CheckTrainingStateFits(kHuge + 1, "sgd", kMax - 1).ok());
  // 16 MB of state and a batch of 2^64 - 8 MB: 8 MB in all, wrapped.
  EXPECT_FALSE(
      CheckTrainingStateFits(1'000'000, "adam", 16'000'000'000, false, {64, kMax - 8'000'000})
          .ok());
  EXPECT_FALSE(CheckTrainingStateFits(1'000'000, "adam", 16'000'000'000, false, {64, 1'000'000},
                                      {1, kMax - 10'000'000})
                   .ok());
  EXPECT_EQ(BucketPlan::BytesFor(kMax / 2, 1), kMax);
  EXPECT_EQ(BucketPlan::BytesFor(1, kMax / 2), kMax);
  EXPECT_EQ(GradReducer::MemoryBytes(kMax / 8, ReducerOptions{}), kMax);
}

// Dense layers of 65,536 units on one input (and back to one), with the smallest bucket cap (4
// bytes) and sliced gradients: backward reports each row alone, 262,150 ranges, each a bucket of
// its own, whose bookkeeping (20.2 MB) outweighs the 851,976 parameters' state (13.6 MB). A limit
// that holds the state and the batch but not the reducer's bookkeeping refuses the model, naming
// it.
TEST(TrainingState, TheReducersBucketsAreCounted) {
  auto spec = model::ParseModelSpec(R"({"input": [2], "layers": [
      {"dense": {"units": 65536}}, {"dense": {"units": 1}}, {"dense": {"units": 65536}},
      {"dense": {"units": 1}}, {"dense": {"units": 65536}}, {"dense": {"units": 1}},
      {"dense": {"units": 65536}}, {"dense": {"units": 1}}, {"dense": {"units": 2}}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  model::ModelConfig mc;
  mc.max_batch = 1;
  mc.max_grad_slice = GradSliceFloats(4, true);
  auto ranges = model::GradRangeCount(*spec, mc);
  ASSERT_TRUE(ranges.ok()) << ranges.status().ToString();
  EXPECT_EQ(*ranges, 4 * 65'536u + 4 + 2);
  // The count is the model's and the plan's.
  {
    auto model = model::Model::Create(*spec, mc);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ((*model)->params().size(), 851'976u);
    EXPECT_EQ((*model)->grad_ranges().size(), *ranges);
    auto plan = BucketPlan::Create((*model)->grad_ranges(), 1, true);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->buckets().size(), *ranges);
    auto whole = model::GradRangeCount(*spec, model::ModelConfig{});
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(*whole, 9u);  // unsliced: one range per layer
  }
  ReducerOptions ro;
  ro.bucket_cap_bytes = 4;
  // x86-64: per range the plan's 25 bytes, a ParamRange and a queue entry; per bucket 28 bytes.
  const ReducerMemory reducer{*ranges, GradReducer::MemoryBytes(*ranges, ro)};
  EXPECT_EQ(reducer.bytes, 262'150u * (25 + 16 + 8 + 28));
  ro.overlap = false;  // one bucket
  EXPECT_EQ(GradReducer::MemoryBytes(*ranges, ro), 262'150u * (25 + 16) + 28 + 8);
  const std::uint64_t params = 851'976;
  const std::uint64_t state = TrainingStateBytes(params, "adam");
  const BatchMemory batch{8, 10'000'000};
  const std::uint64_t limit = state + batch.bytes + reducer.bytes - 1;
  EXPECT_TRUE(CheckTrainingStateFits(params, "adam", limit, false, batch).ok());
  EXPECT_TRUE(CheckTrainingStateFits(params, "adam", limit + 1, false, batch, reducer).ok());
  const Status st = CheckTrainingStateFits(params, "adam", limit, false, batch, reducer);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "model.layers: 851,976 parameters need 13.6 MB for weights, gradients and optimizer "
            "state (adam) and 10.0 MB for the activations and input buffers of a batch of 8 "
            "(batchSizePerReplica), and 20.2 MB for the gradient reducer's bookkeeping of "
            "262,150 ranges (--bucket-cap-bytes); this process may use 43.8 MB in all");
  // A failed allocation names it too.
  EXPECT_EQ(
      TrainingStateDoesNotFit(params, "adam", "the allocation failed", false, {8, 1000}, reducer)
          .message(),
      "model.layers: 851,976 parameters need 13.6 MB for weights, gradients and optimizer "
      "state (adam) and 20.2 MB for the gradient reducer's bookkeeping of 262,150 ranges "
      "(--bucket-cap-bytes); the allocation failed");
}

// The v1 memory hierarchy mounted whole at /sys/fs/cgroup/memory (mountinfo root "/"), this
// process in /slurm/job1 below it (Slurm, systemd-run): its limit is the job's, not the mount
// root's (which has none). Found by the process's own cgroup, not by the mount point.
constexpr char kV1Mount[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "35 31 0:30 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n";

TEST_F(MemoryBudgetTest, TheLimitOfTheProcesssOwnV1CgroupBelowTheMountRootCounts) {
  probe_.physical_bytes = 64'000'000'000;
  Write("proc/self/cgroup", "9:name=systemd:/\n4:memory:/slurm/job1\n1:cpu:/\n");
  Write("proc/self/mountinfo", kV1Mount);
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  Write("sys/fs/cgroup/memory/slurm/job1/memory.limit_in_bytes", "1258291200\n");
  Write("sys/fs/cgroup/memory/slurm/job1/memory.stat", "total_rss 100000000\ntotal_shmem 0\n");
  const MemoryBudget budget = ReadMemoryBudget(probe_);
  EXPECT_EQ(budget.limit, 1'258'291'200u);
  EXPECT_EQ(budget.in_use, 100'000'000u);
  EXPECT_EQ(budget.cgroup, "/slurm/job1");
  EXPECT_FALSE(budget.machine_wide);
}

// An ancestor's lower limit wins over the leaf's, with its own memory.stat; each cgroup from
// the leaf up to the mount point counts.
TEST_F(MemoryBudgetTest, TheMostRestrictiveVisibleAncestorLimitCounts) {
  probe_.physical_bytes = 64'000'000'000;
  Write("proc/self/cgroup", "4:memory:/slurm/job1/step0\n");
  Write("proc/self/mountinfo", kV1Mount);
  Write("sys/fs/cgroup/memory/slurm/job1/step0/memory.limit_in_bytes", "4000000000\n");
  Write("sys/fs/cgroup/memory/slurm/job1/memory.limit_in_bytes", "2000000000\n");
  Write("sys/fs/cgroup/memory/slurm/job1/memory.stat", "total_rss 300000000\n");
  Write("sys/fs/cgroup/memory/slurm/memory.limit_in_bytes", "3000000000\n");
  const MemoryBudget budget = ReadMemoryBudget(probe_);
  EXPECT_EQ(budget.limit, 2'000'000'000u);
  EXPECT_EQ(budget.in_use, 300'000'000u);
  EXPECT_EQ(budget.cgroup, "/slurm/job1");
}

// cgroup v2: "0::PATH", the unified hierarchy at /sys/fs/cgroup; a limit on the parent slice.
TEST_F(MemoryBudgetTest, TheV2LimitOfAnAncestorOfTheProcesssCgroupCounts) {
  probe_.physical_bytes = 64'000'000'000;
  Write("proc/self/cgroup", "0::/user.slice/run-u7.scope\n");
  Write("proc/self/mountinfo",
        "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  Write("sys/fs/cgroup/memory.max", "max\n");
  Write("sys/fs/cgroup/user.slice/memory.max", "1500000000\n");
  Write("sys/fs/cgroup/user.slice/memory.stat", "anon 200000000\nfile 900000000\nshmem 0\n");
  Write("sys/fs/cgroup/user.slice/run-u7.scope/memory.max", "max\n");
  Write("sys/fs/cgroup/user.slice/run-u7.scope/memory.events", "oom 2\noom_kill 3\n");
  const MemoryBudget budget = ReadMemoryBudget(probe_);
  EXPECT_EQ(budget.limit, 1'500'000'000u);
  EXPECT_EQ(budget.in_use, 200'000'000u);
  EXPECT_EQ(budget.cgroup, "/user.slice");
  // The OOM kills of the process's own cgroup (the leaf), not of an ancestor.
  EXPECT_EQ(ReadOomKillCount(probe_), std::optional<std::uint64_t>(3));
}

// A container's own cgroup bind-mounted at the mount point (mountinfo root = its path): the
// limit there is its own, named by its path; nothing above it is visible.
TEST_F(MemoryBudgetTest, ACgroupMountedAtTheMountPointIsTheProcesssOwn) {
  probe_.physical_bytes = 64'000'000'000;
  Write("proc/self/cgroup", "4:memory:/kubepods/pod1/c2\n");
  Write("proc/self/mountinfo",
        "35 31 0:30 /kubepods/pod1/c2 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n");
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "1000000000\n");
  Write("sys/fs/cgroup/memory/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n");
  const MemoryBudget budget = ReadMemoryBudget(probe_);
  EXPECT_EQ(budget.limit, 1'000'000'000u);
  EXPECT_EQ(budget.cgroup, "/kubepods/pod1/c2");
  EXPECT_EQ(ReadOomKillCount(probe_), std::optional<std::uint64_t>(7));
}

// Hostile /proc/self/cgroup and mountinfo: a path with "..", no path, a bad escape, fields
// missing, binary junk. Never a directory outside the hierarchy, never a crash: the mount point
// alone (as before), and nothing at all where nothing reads.
TEST_F(MemoryBudgetTest, HostileCgroupAndMountinfoFilesFallBackToTheMountPoint) {
  probe_.physical_bytes = 64'000'000'000;
  Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "3000000000\n");
  // What ".." would reach: never read.
  Write("sys/fs/cgroup/memory.limit_in_bytes", "1000\n");
  Write("sys/fs/cgroup/memory/x/memory.limit_in_bytes", "1000\n");
  const std::string cgroups[] = {"4:memory:/../x\n",
                                 "4:memory:/x/../..\n",
                                 "4:memory:\n",
                                 "4:memory:relative\n",
                                 "4:memory\n",
                                 "memory:/x\n",
                                 "0::/x\n4:memory:/./x\n",
                                 std::string("4:memory:/x\0/y\n", 15),
                                 std::string(5000, ':'),
                                 "\xff\xfe:memory:/x\n",
                                 ""};
  const std::string mountinfos[] = {
      kV1Mount,
      "35 31 0:30 / /sys/fs/cgroup/memory\n",
      "35 31 0:30 /\\9 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
      "35 31 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup\n",
      "35 31 0:30 / /sys/../memory rw - cgroup cgroup rw,memory\n",
      " - - - \n",
      std::string(3000, ' ') + " - cgroup cgroup memory\n",
      ""};
  for (const std::string& cgroup : cgroups) {
    for (const std::string& mountinfo : mountinfos) {
      Write("proc/self/cgroup", cgroup);
      Write("proc/self/mountinfo", mountinfo);
      const MemoryBudget budget = ReadMemoryBudget(probe_);
      EXPECT_EQ(budget.limit, 3'000'000'000u) << cgroup << " | " << mountinfo;
      EXPECT_EQ(budget.cgroup, "/sys/fs/cgroup/memory") << cgroup << " | " << mountinfo;
    }
  }
  // A hierarchy at a mount point that holds none of the files: no limit, no OOM count.
  Clear();
  Write("proc/self/cgroup", "4:memory:/x\n");
  Write("proc/self/mountinfo", kV1Mount);
  EXPECT_EQ(ReadMemoryBudget(probe_).limit, 64'000'000'000u);
  EXPECT_EQ(ReadOomKillCount(probe_), std::nullopt);
  Write("sys/fs/cgroup/memory/x/memory.oom_control", "oom_kill -1\n");
  EXPECT_EQ(ReadOomKillCount(probe_), std::nullopt);
}

// A gang that shares one memory: the total against what is available, saturating, naming the
// field; one rank or an unknown limit refuses nothing.
TEST(GangFitsTest, RefusesTheGangsTotalNamingTheField) {
  EXPECT_TRUE(CheckGangFits("spec.replicas", 2, 500'000'000, 0, "x", 1'000'000'000, "w").ok());
  const Status st =
      CheckGangFits("spec.replicas", 2, 542'300'000, 135'600'000, "what", 1'100'000'000, "where");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "spec.replicas: 2 local ranks need 2 x 542.3 MB (what) and 135.6 MB more for rank 0's "
            "checkpoint copy, 1.2 GB in all; where 1.1 GB available");
  EXPECT_TRUE(CheckGangFits("f", 1, 5'000'000'000, 0, "x", 1'000'000'000, "w").ok());
  EXPECT_TRUE(CheckGangFits("f", 8, 5'000'000'000, 0, "x", 0, "w").ok());
  EXPECT_FALSE(
      CheckGangFits("f", 1 << 16, UINT64_MAX / 2, UINT64_MAX, "x", UINT64_MAX - 1, "w").ok());
}

}  // namespace
}  // namespace ringtrain::train
