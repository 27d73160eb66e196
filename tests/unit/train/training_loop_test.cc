// The training loop is written once for every step engine, so what it reports must not depend on
// the engine: a CPU-like engine (every step completes inside Step) and a CUDA-like one (the host
// runs one step ahead; losses are read from an accumulator that includes the step in flight)
// must drive the same metric series to the same values, the same learning rates, and never a
// checkpoint or evaluation while a step is in flight. The real CPU engine runs through the same
// checks.
#include "runner/train/training_loop.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "runner/comm/tcp/tcp_communicator.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/train/bucket_plan.h"
#include "runner/train/cpu_engine.h"
#include "runner/train/grad_reducer.h"
#include "runner/train/model_data.h"
#include "tests/fakes/fake_clock.h"

namespace ringtrain::train {
namespace {

// A world of one that needs no sockets.
// One rank alone (or, with `rank`, one rank of a gang whose peers answer at once); the hooks
// run inside the collectives, where a rank waits for its peers.
class SoloComm final : public comm::Communicator {
 public:
  int rank() const override { return rank_; }
  int size() const override { return rank_ + 1; }
  Status AllReduce(float*, std::size_t count, comm::ReduceOp) override {
    if (while_reducing) while_reducing(count);
    return Status::Ok();
  }
  Status Broadcast(void*, std::size_t bytes, int) override {
    if (while_broadcasting) while_broadcasting(bytes);
    return Status::Ok();
  }
  Status Barrier() override {
    if (while_barrier) while_barrier();
    return Status::Ok();
  }
  Status AllGather(const void* in, std::size_t bytes, void* out) override {
    std::memcpy(out, in, bytes);
    return Status::Ok();
  }
  void Abort() override {}

  int rank_ = 0;
  std::function<void(std::size_t)> while_reducing;
  std::function<void()> while_barrier;
  std::function<void(std::size_t)> while_broadcasting;
};

// Step i (from 0) has loss i + 1 and `batch` samples; `lag` 1 completes each step one call late.
class FakeEngine final : public StepEngine {
 public:
  FakeEngine(int lag, int steps_per_epoch, int epochs, int batch)
      : lag_(lag), spe_(steps_per_epoch), epochs_(epochs), batch_(batch) {}

  std::size_t num_params() const override { return 4; }
  std::size_t optimizer_state_size() const override { return 0; }
  Status Restore(const CheckpointState&) override { return Status::Ok(); }
  Status BroadcastFrom(int, bool, std::int64_t) override { return Status::Ok(); }
  Status Snapshot(std::vector<float>& params, std::vector<float>& state,
                  std::int64_t& steps) override {
    if (in_flight_) return Internal("snapshot with a step in flight");
    params.assign(4, 0.0f);
    state.clear();
    steps = enqueued_;
    ++snapshots_;
    if (while_snapshotting) while_snapshotting();
    return Status::Ok();
  }
  std::int64_t optimizer_steps() const override { return enqueued_; }
  StatusOr<InputStart> OpenInput(int epoch, std::int64_t samples) override {
    epoch_ = epoch;
    step_ = samples / batch_;
    return InputStart{spe_, epoch, samples};
  }
  StatusOr<std::optional<EngineBatch>> NextBatch() override {
    if (epoch_ >= epochs_) return std::optional<EngineBatch>();
    if (while_fetching) while_fetching(epoch_ * spe_ + step_);
    EngineBatch b{epoch_, step_, batch_, step_ + 1 == spe_, (step_ + 1) * batch_};
    if (++step_ == spe_) {
      ++epoch_;
      step_ = 0;
    }
    return std::optional<EngineBatch>(b);
  }
  double data_wait_seconds() const override { return 0; }
  StatusOr<std::optional<StepStats>> Step(double lr) override {
    lrs_.push_back(lr);
    loss_sum_ += enqueued_ + 1 == nan_loss_at ? std::nan("") : static_cast<double>(enqueued_ + 1);
    ++loss_steps_;
    ++enqueued_;
    StepStats s{batch_, 0.001, 0.002, lag_ ? 0.0005 : 0.0};
    if (lag_ == 0) return std::optional<StepStats>(s);
    std::optional<StepStats> prev = in_flight_;
    in_flight_ = s;
    return prev;
  }
  StatusOr<std::optional<StepStats>> Flush() override {
    std::optional<StepStats> prev = in_flight_;
    in_flight_.reset();
    return prev;
  }
  StatusOr<std::pair<double, std::int64_t>> TakeLoss() override {
    std::pair<double, std::int64_t> out{loss_sum_, loss_steps_};
    loss_sum_ = 0;
    loss_steps_ = 0;
    return out;
  }
  StatusOr<EvalSums> EvaluateShard() override {
    if (in_flight_) return Internal("evaluation with a step in flight");
    if (while_evaluating) while_evaluating();
    return EvalSums{10.0, 7.0, 10.0};
  }
  bool has_device() const override { return lag_ > 0; }

  std::vector<double> lrs_;
  int snapshots_ = 0;
  std::int64_t nan_loss_at = -1;  // the step (from 1) whose loss is NaN
  // Called inside a checkpoint's snapshot, an evaluation, and before batch `index` (from 0).
  std::function<void()> while_snapshotting;
  std::function<void()> while_evaluating;
  std::function<void(std::int64_t index)> while_fetching;

 private:
  int lag_;
  std::int64_t spe_;
  int epochs_;
  int batch_;
  int epoch_ = 0;
  std::int64_t step_ = 0;
  std::int64_t enqueued_ = 0;
  double loss_sum_ = 0;
  std::int64_t loss_steps_ = 0;
  std::optional<StepStats> in_flight_;
};

// name (without labels) → value, for the series of one rank.
std::map<std::string, double> Scrape(const metrics::RunnerMetrics& m) {
  std::map<std::string, double> out;
  std::istringstream in(m.RenderText());
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto name_end = line.find_first_of("{ ");
    const auto value_at = line.rfind(' ');
    std::string name = line.substr(0, name_end);
    if (name.rfind("ringtrain_gpu", 0) == 0) continue;  // device series: by design not on CPU
    // Timings differ from run to run: histogram buckets and sums, rates, times.
    if (line.find("le=\"") != std::string::npos) continue;
    if (name == "ringtrain_step_duration_seconds_sum" || name == "ringtrain_samples_per_second" ||
        name == "ringtrain_last_step_timestamp_seconds") {
      continue;
    }
    out[name] = std::stod(line.substr(value_at + 1));
  }
  return out;
}

// `count` 28x28 images of one value, all of label 3.
data::Dataset Uniform28x28(int count) {
  data::Dataset ds;
  ds.count = count;
  ds.rows = 28;
  ds.cols = 28;
  ds.images.assign(ds.count * 28 * 28, 7);
  ds.labels.assign(ds.count, 3);
  return ds;
}

TrainConfig LoopConfig() {
  TrainConfig c;
  c.epochs = 2;
  c.batch_size = 8;
  c.checkpoint_every = 3;
  c.checkpoint_dir = ::testing::TempDir() + "loop_ckpt_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                     std::to_string(std::random_device{}());
  c.learning_rate = 0.01;
  c.warmup_epochs = 0.5;
  return c;
}

struct LoopRun {
  TrainResult result;
  std::map<std::string, double> series;
  std::vector<double> lrs;
  int snapshots = 0;
};

// `regression`: a model with an MSE loss, whose evaluation is a test MSE instead of an accuracy.
LoopRun RunFake(int lag, bool regression = false) {
  SoloComm comm;
  FakeEngine engine(lag, /*steps_per_epoch=*/4, /*epochs=*/2, /*batch=*/8);
  metrics::RunnerMetrics m(metrics::RunnerLabels{"job", "ns", 0});
  LoopDeps deps;
  deps.comm = &comm;
  deps.engine = &engine;
  deps.evaluate = true;
  deps.metrics = &m;
  TrainConfig config = LoopConfig();
  if (regression) {
    config.model_spec = model::ModelSpec{};
    config.model_spec->loss = model::Loss::kMse;
  }
  TrainingLoop loop(config, deps);
  auto r = loop.Run();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return LoopRun{r.ok() ? *r : TrainResult{}, Scrape(m), engine.lrs_, engine.snapshots_};
}

TEST(TrainingLoop, EnginesWithAndWithoutHostLagReportTheSame) {
  const LoopRun now = RunFake(0);
  const LoopRun lagged = RunFake(1);
  EXPECT_EQ(now.series, lagged.series);
  EXPECT_EQ(now.lrs, lagged.lrs);
  EXPECT_EQ(now.snapshots, lagged.snapshots);
  EXPECT_EQ(now.snapshots, 3);  // steps 3 and 6, and the final one at 8
  EXPECT_EQ(now.series.at("ringtrain_steps_total"), 8);
  EXPECT_EQ(now.series.at("ringtrain_samples_total"), 64);
  EXPECT_EQ(now.series.at("ringtrain_step_duration_seconds_count"), 8);
  EXPECT_EQ(now.series.at("ringtrain_allreduce_wait_seconds_total"), 8 * 0.001);
  EXPECT_EQ(now.series.at("ringtrain_checkpoints_total"), 3);
  // ringtrain_loss: the mean step loss over the last report window. Each epoch end reports;
  // the second epoch's steps had losses 5, 6, 7, 8.
  EXPECT_DOUBLE_EQ(now.series.at("ringtrain_loss"), 6.5);
  EXPECT_EQ(now.result.allreduce_seconds, lagged.result.allreduce_seconds);
  EXPECT_NEAR(now.result.test_accuracy, 0.7, 1e-6);
  // A classification model's evaluation: an accuracy series, and no test MSE series at all.
  EXPECT_NEAR(now.series.at("ringtrain_test_accuracy_ratio"), 0.7, 1e-6);
  EXPECT_EQ(now.series.count("ringtrain_test_mse"), 0u);
  EXPECT_EQ(now.result.steps, 8);
  EXPECT_EQ(lagged.result.steps, 8);
  EXPECT_GT(lagged.result.device_busy, 0);
  EXPECT_EQ(now.result.device_busy, 0);
}

// A checkpoint dir that cannot even be created (/proc refuses mkdir with ENOENT) fails the rank
// at start, naming the job's field: the probe's NotFound is not "no checkpoint yet" (it was, and
// the rank trained up to its first checkpoint before failing for good).
TEST(TrainingLoop, ACheckpointDirThatCannotBeCreatedFailsAtStartNamingTheField) {
  SoloComm comm;
  FakeEngine engine(0, /*steps_per_epoch=*/4, /*epochs=*/2, /*batch=*/8);
  metrics::RunnerMetrics m(metrics::RunnerLabels{"job", "ns", 0});
  LoopDeps deps;
  deps.comm = &comm;
  deps.engine = &engine;
  deps.metrics = &m;
  TrainConfig config = LoopConfig();
  config.checkpoint_dir = "/proc/ringtrain-loop-test-ckpt";
  TrainingLoop loop(config, deps);
  auto r = loop.Run();
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.status().retryable()) << r.status().ToString();
  EXPECT_NE(r.status().message().find("spec.checkpoint.path"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find(config.checkpoint_dir), std::string::npos)
      << r.status().ToString();
  const auto series = Scrape(m);
  const auto steps = series.find("ringtrain_steps_total");
  EXPECT_EQ(steps == series.end() ? 0 : steps->second, 0) << "trained before failing";
}

// A loss that is not finite ends the run for good, naming the steps and the setting to change,
// before a checkpoint of the diverged weights is written: here step 3's, the step a checkpoint
// follows (checkpoint_every 3), mid-epoch and within the report window, so nothing but the
// read before the checkpoint sees it in time.
TEST(TrainingLoop, ADivergedLossIsAPermanentFailureBeforeTheNextCheckpoint) {
  for (int lag : {0, 1}) {
    SoloComm comm;
    FakeEngine engine(lag, /*steps_per_epoch=*/4, /*epochs=*/2, /*batch=*/8);
    engine.nan_loss_at = 3;
    LoopDeps deps;
    deps.comm = &comm;
    deps.engine = &engine;
    TrainingLoop loop(LoopConfig(), deps);
    auto r = loop.Run();
    ASSERT_FALSE(r.ok()) << "lag " << lag;
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
    EXPECT_NE(r.status().message().find("the training loss is NaN in steps 1..3"),
              std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("spec.train.learningRate"), std::string::npos);
    EXPECT_EQ(engine.snapshots_, 0) << "lag " << lag << ": a checkpoint of the diverged state";
  }
}

// The real CPU engine at a learning rate it cannot train at: its loss overflows within steps,
// and the run fails for good instead of training NaN weights to a "success".
TEST(TrainingLoop, CpuEngineThatDivergesFailsForGood) {
  data::Dataset ds = Uniform28x28(32);
  for (std::size_t i = 0; i < ds.labels.size(); ++i)
    ds.labels[i] = static_cast<std::uint8_t>(i % 10);
  SoloComm comm;
  EngineDeps deps;
  deps.comm = &comm;
  deps.train = &ds;
  deps.test = &ds;
  TrainConfig config = LoopConfig();
  config.learning_rate = 1e30;
  config.warmup_epochs = 0;
  auto trainer = rank::Trainer::Create(config, deps);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto r = (*trainer)->Run();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("the model diverged"), std::string::npos)
      << r.status().ToString();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(config.checkpoint_dir, ec)) {
    ADD_FAILURE() << "a checkpoint of a diverged model: " << e.path();
  }
}

TEST(TrainingLoop, ARegressionModelExportsATestMseAndNoAccuracy) {
  const LoopRun run = RunFake(0, /*regression=*/true);
  ASSERT_TRUE(run.result.regression);
  // FakeEngine's evaluation: a summed loss of 10 over 10 samples.
  EXPECT_DOUBLE_EQ(run.series.at("ringtrain_test_mse"), 1.0);
  EXPECT_EQ(run.series.count("ringtrain_test_accuracy_ratio"), 0u);
  EXPECT_DOUBLE_EQ(run.series.at("ringtrain_loss"), 6.5);
}

// A rank that waited for a recovery which found no kept state (the gang starts over, as when
// the first round failed before it trained) stops counting the outage once it trains: the
// counter holds still after the run, and /status is no longer "recovering".
TEST(TrainingLoop, TrainingAgainEndsTheOutageWithoutAnInPlaceRecovery) {
  SoloComm comm;
  FakeEngine engine(0, /*steps_per_epoch=*/4, /*epochs=*/2, /*batch=*/8);
  metrics::RunnerMetrics m(metrics::RunnerLabels{"job", "ns", 0});
  LoopDeps deps;
  deps.comm = &comm;
  deps.engine = &engine;
  deps.metrics = &m;
  TrainingLoop loop(LoopConfig(), deps);
  loop.BeginRecovery();
  EXPECT_EQ(m.progress().state, "recovering");
  auto r = loop.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->recoveries, 0);
  EXPECT_EQ(m.progress().state, "succeeded");
  const double outage = Scrape(m).at("ringtrain_recovery_seconds_total");
  EXPECT_GT(outage, 0);
  // Time passes (the steady clock moves between reads): an outage still open would grow.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(Scrape(m).at("ringtrain_recovery_seconds_total"), outage);
  EXPECT_EQ(Scrape(m).at("ringtrain_recoveries_total"), 0);
}

// An evaluation or a checkpoint write longer than the stall threshold is no stall: /status says
// "running" through it, and the steps after it are not late for it. Waiting that long for input
// is one.
TEST(TrainingLoop, EvaluationAndCheckpointWritesAreNoStallButStarvedInputIs) {
  SoloComm comm;
  FakeEngine engine(0, /*steps_per_epoch=*/4, /*epochs=*/2, /*batch=*/8);
  ringtrain::testing::FakeClock clock;
  metrics::RunnerMetrics m(metrics::RunnerLabels{"job", "ns", 0}, clock);
  std::vector<std::string> during_work;
  auto slow_work = [&] {
    clock.Advance(std::chrono::minutes(5));
    during_work.push_back(m.progress().state);
  };
  engine.while_snapshotting = slow_work;
  engine.while_evaluating = slow_work;
  std::map<std::int64_t, std::string> fetching;  // the state while batch i is fetched
  engine.while_fetching = [&](std::int64_t index) {
    if (index == 5) clock.Advance(std::chrono::minutes(5));  // the input pipeline starves
    fetching[index] = m.progress().state;
  };
  LoopDeps deps;
  deps.comm = &comm;
  deps.engine = &engine;
  deps.evaluate = true;
  deps.metrics = &m;
  TrainConfig config = LoopConfig();
  config.checkpoint_every = 4;  // at each epoch's end, with its evaluation
  TrainingLoop loop(config, deps);
  auto r = loop.Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Epoch 1 ends at batch 3: the first report says "running"; then the checkpoint and the
  // evaluation of epochs 1 and 2.
  EXPECT_EQ(during_work, std::vector<std::string>(4, "running"));
  EXPECT_EQ(fetching.at(4), "running") << "the step after the work is not late for it";
  EXPECT_EQ(fetching.at(5), "stalled") << "five minutes without input";
  EXPECT_EQ(fetching.at(6), "running") << "batch 5's step completed";
  EXPECT_EQ(m.progress().state, "succeeded");
}

// A peer that hangs in the collectives after the local work (the evaluation's all-reduce, the
// final barrier) is a stall on every rank, whether or not a checkpoint was written: the ranks
// wait for rank 0's write before them, hearing from it (comm/root_work.h), and are not stalled
// while they do.
TEST(TrainingLoop, APeerThatHangsInTheEvaluationOrTheFinalBarrierIsAStall) {
  struct Case {
    int rank;
    int checkpoint_every;  // 4: at each epoch's end, with its evaluation
  };
  for (const Case& c : {Case{0, 4}, Case{0, 1000}, Case{1, 1000}, Case{1, 4}}) {
    SCOPED_TRACE("rank " + std::to_string(c.rank) + ", checkpoint every " +
                 std::to_string(c.checkpoint_every));
    SoloComm comm;
    comm.rank_ = c.rank;
    FakeEngine engine(0, /*steps_per_epoch=*/4, /*epochs=*/2, /*batch=*/8);
    ringtrain::testing::FakeClock clock;
    metrics::RunnerMetrics m(metrics::RunnerLabels{"job", "ns", c.rank}, clock);
    std::vector<std::string> in_evaluation, at_barrier, waiting_for_the_write;
    comm.while_reducing = [&](std::size_t count) {
      if (count != 3) return;  // the evaluation's sums (loss, correct, count)
      clock.Advance(std::chrono::minutes(5));
      in_evaluation.push_back(m.progress().state);
    };
    comm.while_barrier = [&] {
      clock.Advance(std::chrono::minutes(5));
      at_barrier.push_back(m.progress().state);
    };
    comm.while_broadcasting = [&](std::size_t bytes) {
      if (bytes != 1 || c.rank == 0) return;  // a peer hearing from rank 0 at a checkpoint
      clock.Advance(std::chrono::minutes(5));
      waiting_for_the_write.push_back(m.progress().state);
    };
    LoopDeps deps;
    deps.comm = &comm;
    deps.engine = &engine;
    deps.evaluate = true;
    deps.metrics = &m;
    TrainConfig config = LoopConfig();
    config.checkpoint_every = c.checkpoint_every;
    TrainingLoop loop(config, deps);
    auto r = loop.Run();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(in_evaluation, std::vector<std::string>(2, "stalled"))
        << "the evaluations' all-reduce";
    ASSERT_EQ(at_barrier.size(), 1u);
    EXPECT_EQ(at_barrier[0], "stalled") << "the final barrier";
    // Rank 1 hears from rank 0 once at the start (its checkpoint read, still "starting") and at
    // each checkpoint: steps 4 and 8, or only the final one.
    if (c.rank == 1) {
      std::vector<std::string> want = {"starting"};
      want.resize(c.checkpoint_every == 4 ? 3 : 2, "running");
      EXPECT_EQ(waiting_for_the_write, want) << "waiting for rank 0's checkpoint I/O";
    }
  }
}

// The real CPU engine through the same loop reports the same loop-driven series.
TEST(TrainingLoop, CpuEngineReportsTheSameSeriesAsTheFakeEngines) {
  data::Dataset ds;
  ds.count = 32;
  ds.rows = 28;
  ds.cols = 28;
  std::mt19937_64 rng(5);
  ds.images.resize(ds.count * 28 * 28);
  for (auto& p : ds.images) p = static_cast<std::uint8_t>(rng() % 256);
  ds.labels.resize(ds.count);
  for (auto& l : ds.labels) l = static_cast<std::uint8_t>(rng() % 10);

  SoloComm comm;
  metrics::RunnerMetrics m(metrics::RunnerLabels{"job", "ns", 0});
  EngineDeps deps;
  deps.comm = &comm;
  deps.train = &ds;
  deps.test = &ds;
  deps.metrics = &m;
  auto trainer = rank::Trainer::Create(LoopConfig(), deps);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto r = (*trainer)->Run();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto cpu = Scrape(m);
  const LoopRun fake = RunFake(1);
  // Same families and series (values differ where the models differ).
  std::vector<std::string> cpu_names, fake_names;
  for (const auto& [k, v] : cpu) cpu_names.push_back(k);
  for (const auto& [k, v] : fake.series) fake_names.push_back(k);
  EXPECT_EQ(cpu_names, fake_names);
  for (const char* same : {"ringtrain_steps_total", "ringtrain_samples_total",
                           "ringtrain_step_duration_seconds_count", "ringtrain_checkpoints_total",
                           "ringtrain_step", "ringtrain_epoch", "ringtrain_world_size"}) {
    EXPECT_EQ(cpu.at(same), fake.series.at(same)) << same;
  }
  EXPECT_GT(cpu.at("ringtrain_loss"), 0);
  EXPECT_EQ(r->steps, 8);
  // Epochs completed, as /status counts them (the gauge read one less: the last step's epoch).
  EXPECT_EQ(cpu.at("ringtrain_epoch"), 2);
}

// The memory check counts one loader's prefetch slots: a new pass (an in-place recovery, a
// second Run) must not build its loader while the old one still holds its slots (a batch of a
// large input holds gigabytes), and an engine with no input open says so instead of crashing.
TEST(TrainingLoop, CpuEngineHoldsOneLoaderAtATime) {
  const data::Dataset ds = Uniform28x28(32);
  SoloComm comm;
  EngineDeps deps;
  deps.comm = &comm;
  deps.train = &ds;
  auto engine = CpuEngine::Create(LoopConfig(), deps);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto none = (*engine)->NextBatch();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  data::PrefetchLoader::ResetPeakLive();
  ASSERT_TRUE((*engine)->OpenInput(0, 0).ok());
  auto first = (*engine)->NextBatch();
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status().ToString();
  ASSERT_TRUE((*engine)->OpenInput(0, 16).ok());
  EXPECT_EQ(data::PrefetchLoader::PeakLive(), 1) << "two loaders' slots held at once";
  auto resumed = (*engine)->NextBatch();
  ASSERT_TRUE(resumed.ok() && resumed->has_value()) << resumed.status().ToString();
}

// The CPU engine's allocation failing is a permanent error naming the model's size, not a
// std::bad_alloc that ends the rank with SIGABRT (exit 134: retried up to backoffLimit). The
// child runs under an address-space limit, so nothing is really allocated.
TEST(CpuEngineDeathTest, AFailedAllocationIsAPermanentErrorNamingTheModelsSize) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' allocators do not throw std::bad_alloc under RLIMIT_AS";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "the sanitizers' allocators do not throw std::bad_alloc under RLIMIT_AS";
#endif
#endif
  // Where this process may use less than the model needs, or what is in use leaves less, the
  // engine refuses it before it allocates (another message, tested in model_data_test).
  const MemoryBudget memory = ReadMemoryBudget();
  if (memory.limit - memory.in_use < (std::uint64_t{2} << 30)) {
    GTEST_SKIP() << "less than 2 GiB of memory free: the size check refuses the model first";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const data::Dataset ds = Uniform28x28(16);
  // 784 x 65536 + 65536 x 10 weights and their biases: 52,101,130 parameters, 208 MB of weights.
  auto spec = model::ParseModelSpec(R"({"input": [1, 28, 28], "layers": ["flatten",
      {"dense": {"units": 65536}}, {"dense": {"units": 10}}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  TrainConfig config = LoopConfig();
  config.model_spec = *spec;
  // Exits 0 when the engine refuses the model with InvalidArgument, printing the error.
  const auto create_under_limit = [&] {
    SoloComm comm;
    EngineDeps deps;
    deps.comm = &comm;
    deps.train = &ds;
    // What is mapped now and 64 MiB more: the weights' 208 MB cannot be.
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const auto limit = static_cast<rlim_t>(pages) * ::sysconf(_SC_PAGESIZE) + (64 << 20);
    const rlimit as{limit, limit};
    if (::setrlimit(RLIMIT_AS, &as) != 0) std::_Exit(2);
    auto engine = CpuEngine::Create(config, deps);
    std::fprintf(stderr, "%s\n", engine.ok() ? "created" : engine.status().ToString().c_str());
    std::_Exit(!engine.ok() && engine.status().code() == StatusCode::kInvalidArgument ? 0 : 1);
  };
  EXPECT_EXIT(create_under_limit(), ::testing::ExitedWithCode(0),
              "INVALID_ARGUMENT: model.layers: 52,101,130 parameters need 833.6 MB for weights, "
              "gradients and optimizer state .adam.; the allocation failed");
}

// A batch whose activations this process cannot hold (a convolution of 32 channels at 28x28 keeps
// 100 KB of ReLU outputs per sample) is refused before anything is allocated, naming the batch,
// though the model's 63,050 parameters fit many times over: not an OOM kill (exit 137, retried up
// to backoffLimit). The child runs under an address-space limit, so a check that missed it could
// not allocate either: it would fail naming only the parameters.
TEST(CpuEngineDeathTest, ABatchWhoseActivationsDoNotFitIsAPermanentErrorNamingTheBatch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const data::Dataset ds = Uniform28x28(16);
  auto spec = model::ParseModelSpec(R"({"input": [1, 28, 28], "layers": [{"conv2d":
      {"filters": 32, "kernel": 3, "padding": "same"}}, "relu", {"max_pool2d": {"pool": 2}},
      "flatten", {"dense": {"units": 10}}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  TrainConfig config = LoopConfig();
  config.model_spec = *spec;
  model::ModelConfig one;
  one.max_batch = 1;
  auto per_sample = model::ActivationBytes(*spec, one);
  ASSERT_TRUE(per_sample.ok()) << per_sample.status().ToString();
  const std::uint64_t memory = MemoryLimitBytes();
  ASSERT_GT(memory, 0u);
  // The activations alone are about twice this process's memory.
  config.batch_size = static_cast<int>(2 * memory / *per_sample + 1);
  const auto create_under_limit = [&] {
    SoloComm comm;
    EngineDeps deps;
    deps.comm = &comm;
    deps.train = &ds;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    // What is mapped now and 64 MiB more (the sanitizers' allocators ignore the limit).
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const auto limit = static_cast<rlim_t>(pages) * ::sysconf(_SC_PAGESIZE) + (64 << 20);
    const rlimit as{limit, limit};
    if (::setrlimit(RLIMIT_AS, &as) != 0) std::_Exit(2);
#endif
    auto engine = CpuEngine::Create(config, deps);
    std::fprintf(stderr, "%s\n", engine.ok() ? "created" : engine.status().ToString().c_str());
    std::_Exit(!engine.ok() && engine.status().code() == StatusCode::kInvalidArgument ? 0 : 1);
  };
  EXPECT_EXIT(create_under_limit(), ::testing::ExitedWithCode(0),
              "INVALID_ARGUMENT: model.layers: 63,050 parameters need 1.8 MB for weights, "
              "gradients and optimizer state .adam. and rank 0's copy of them for a checkpoint, "
              "and [0-9.]+ GB for the activations and input buffers of a batch of " +
                  std::to_string(config.batch_size) +
                  " .batchSizePerReplica.; this process may use [0-9.]+ GB in all");
}

// A fake machine for the CPU engine's memory check (EngineDeps::memory_probe): `physical` bytes,
// no cgroup limit, and /proc/meminfo saying `in_use` of them are in use.
class CpuEngineMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    probe_.root = ::testing::TempDir() + "cpu_engine_memory_" + std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(probe_.root + "/proc");
    ds_ = Uniform28x28(16);
    config_ = LoopConfig();
    config_.checkpoint_dir.clear();  // no checkpoint copy
  }
  void TearDown() override { std::filesystem::remove_all(probe_.root); }

  void Machine(std::uint64_t physical, std::uint64_t in_use) {
    probe_.physical_bytes = physical;
    std::ofstream(probe_.root + "/proc/meminfo")
        << "MemTotal: " << physical / 1024 << " kB\nMemAvailable: " << (physical - in_use) / 1024
        << " kB\n";
  }
  StatusOr<std::unique_ptr<CpuEngine>> Create() {
    EngineDeps deps;
    deps.comm = &comm_;
    deps.train = &ds_;
    deps.memory_probe = &probe_;
    deps.host_ranks = host_ranks_;
    return CpuEngine::Create(config_, deps);
  }
  // Why Create refused, with the code `expected` (permanent unless other processes of the
  // machine hold what is missing); "created" when it did not.
  std::string Refusal(StatusCode expected = StatusCode::kInvalidArgument) {
    auto engine = Create();
    if (engine.ok()) return "created";
    EXPECT_EQ(engine.status().code(), expected);
    return engine.status().message();
  }

  MemoryProbe probe_;
  SoloComm comm_;
  data::Dataset ds_;
  TrainConfig config_;
  int host_ranks_ = 1;
};

// What is in use when the engine is created (here /proc/meminfo's: other ranks, everything else)
// is not the engine's: a model that fits the machine but not what it has left is refused before
// anything is allocated, naming what is in use; other processes may free it: retryable.
TEST_F(CpuEngineMemoryTest, WhatIsAlreadyInUseIsNotTheModels) {
  // The preset MLP: 203,530 parameters, a few MB in all.
  Machine(1'024'000'000, 0);
  auto fits = Create();
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  Machine(1'024'000'000, 1'023'000'000);
  const std::string refused = Refusal(StatusCode::kResourceExhausted);
  EXPECT_NE(refused.find("; this process may use 1.0 GB in all, 1.0 GB of it already in use (the "
                         "datasets and other processes); retried, as other processes may free it"),
            std::string::npos)
      << refused;
}

// The gradient reducer's bookkeeping is counted with the rest: with the smallest bucket cap and
// sliced gradients, each of the 196,622 rows of these dense layers is a range and a bucket of its
// own (15 MB), more than the 590,632 parameters' state (9.5 MB). A machine that holds the state
// and the batches with half of that to spare refuses the model, naming the reducer.
TEST_F(CpuEngineMemoryTest, TheReducersBucketsAreCounted) {
  auto spec = model::ParseModelSpec(R"({"input": [1, 28, 28], "layers": ["flatten",
      {"dense": {"units": 1}}, {"dense": {"units": 65536}}, {"dense": {"units": 1}},
      {"dense": {"units": 65536}}, {"dense": {"units": 1}}, {"dense": {"units": 65536}},
      {"dense": {"units": 1}}, {"dense": {"units": 10}}]})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  config_.model_spec = *spec;
  config_.bucket_cap_bytes = 4;
  model::ModelConfig mc;
  mc.max_batch = config_.batch_size;
  mc.max_grad_slice = GradSliceFloats(config_.bucket_cap_bytes, true);
  auto report = model::InferShapes(*spec);
  auto activations = model::ActivationBytes(*spec, mc);
  auto ranges = model::GradRangeCount(*spec, mc);
  ASSERT_TRUE(report.ok() && activations.ok() && ranges.ok());
  EXPECT_EQ(report->params, 590'632u);
  EXPECT_EQ(*ranges, 3 * 65'536u + 4 + 10);
  ReducerOptions ro;
  ro.bucket_cap_bytes = config_.bucket_cap_bytes;
  const std::uint64_t reducer = GradReducer::MemoryBytes(*ranges, ro);
  // The input buffers of batches of 8 images take well under 1 MB.
  const std::uint64_t state_and_batches =
      TrainingStateBytes(report->params, "adam") + *activations + 1'000'000;
  Machine(state_and_batches + reducer / 2 + 1'000'000, 0);
  const std::string refused = Refusal();
  EXPECT_NE(refused.find("15.1 MB for the gradient reducer's bookkeeping of 196,622 ranges "
                         "(--bucket-cap-bytes); this process may use "),
            std::string::npos)
      << refused;
  Machine(state_and_batches + reducer + 1'000'000, 0);
  auto fits = Create();
  EXPECT_TRUE(fits.ok()) << fits.status().ToString();
}

// Two ranks of `ringtrain run` (RINGTRAIN_HOST_RANKS 2) on a machine that holds one rank's model
// and datasets but not two: each rank's own check passes whatever the other has not allocated
// yet (both start at once), so the gang is checked as a whole against the whole limit, each
// rank counting its own datasets and runtime (RssAnon + RssShmem) for every sibling.
TEST_F(CpuEngineMemoryTest, SiblingRanksOnTheMachineAreCountedWhateverTheyAllocatedYet) {
  const DataShape shape = ShapeOf(ds_, config_.model.classes);
  auto spec = ResolveModelSpec(config_, shape);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto need = CpuRankMemoryOf(config_, *spec, shape);
  ASSERT_TRUE(need.ok()) << need.status().ToString();
  const std::uint64_t own = 2'048'000;  // the rank's datasets and runtime
  std::filesystem::create_directories(probe_.root + "/proc/self");
  std::ofstream(probe_.root + "/proc/self/status")
      << "RssAnon:\t" << own / 1024 << " kB\nRssShmem:\t0 kB\n";
  const std::uint64_t one = need->Bytes(config_.optimizer.name, false) + own;
  Machine((one * 3 / 2) & ~std::uint64_t{1023}, 0);
  host_ranks_ = 1;
  auto alone = Create();
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  host_ranks_ = 2;
  const std::string refused = Refusal();
  EXPECT_NE(refused.find("RINGTRAIN_HOST_RANKS: 2 local ranks need 2 x "), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("2.0 MB of datasets and runtime each, as this rank holds"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("; this machine has "), std::string::npos) << refused;
  Machine(one * 2 + 1'024'000, 0);
  auto both = Create();
  EXPECT_TRUE(both.ok()) << both.status().ToString();
}

}  // namespace
}  // namespace ringtrain::train
