// One wiring for every engine: a rank's failure reaches the gang's store while its
// communicator is still up (whatever failed: engine creation or a collective), and a GPU rank
// on the TCP backend forms the very ring a CPU rank does (same bind address and advertised
// host: one code path, MakeCommunicator).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "common/runner_contract.h"
#include "common/stop.h"
#include "common/version.h"
#include "runner/model/gemm.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/failure.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/train/checkpoint.h"
#include "tests/fakes/rank_fixtures.h"

namespace ringtrain::rank {
namespace {

train::TrainConfig Small() {
  train::TrainConfig c;
  c.model.hidden = 8;
  c.batch_size = 4;
  c.epochs = 1;
  c.warmup_epochs = 0;
  return c;
}

std::string GangConfigDigestOfBatch(int batch_size) {
  train::TrainConfig c = Small();
  c.batch_size = batch_size;
  return train::GangConfigDigest(c);
}

// A world of one whose lifetime the test observes, and whose broadcasts can be made to fail.
class TrackedComm final : public comm::Communicator {
 public:
  TrackedComm(std::shared_ptr<bool> alive, bool fail_broadcast)
      : alive_(std::move(alive)), fail_broadcast_(fail_broadcast) {
    *alive_ = true;
  }
  ~TrackedComm() override { *alive_ = false; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status AllReduce(float*, std::size_t, comm::ReduceOp) override { return Status::Ok(); }
  Status Broadcast(void*, std::size_t, int) override {
    if (fail_broadcast_) return Unavailable("broadcast: lost peer rank 1");
    return Status::Ok();
  }
  Status Barrier() override { return Status::Ok(); }
  Status AllGather(const void* in, std::size_t bytes, void* out) override {
    std::memcpy(out, in, bytes);
    return Status::Ok();
  }
  void Abort() override {}

 private:
  std::shared_ptr<bool> alive_;
  bool fail_broadcast_;
};

struct Reported {
  std::vector<Status> failures;
  std::vector<bool> comm_alive;  // at each report
};

StatusOr<train::TrainResult> RunWith(const data::Dataset& train, const data::Dataset& test,
                                     bool fail_broadcast, Reported& reported,
                                     std::shared_ptr<bool>& alive) {
  rendezvous::MemoryStore store;
  const train::RankEnv env =
      testing::RankEnvOf({{"RINGTRAIN_RANK", "0"}, {"RINGTRAIN_WORLD_SIZE", "1"}});
  RankDeps deps;
  deps.store = &store;
  deps.train = &train;
  deps.test = &test;
  deps.make_communicator =
      [&](rendezvous::Store&, const train::RankEnv&, const Placement&,
          const std::string&) -> StatusOr<std::unique_ptr<comm::Communicator>> {
    return std::unique_ptr<comm::Communicator>(new TrackedComm(alive, fail_broadcast));
  };
  deps.report_failure = [&](rendezvous::Store&, const Status& s) {
    reported.failures.push_back(s);
    reported.comm_alive.push_back(*alive);
  };
  Placement cpu;  // the CPU and the TCP ring
  return TrainRank(env, Small(), cpu, deps);
}

TEST(TrainRank, AnEngineThatCannotStartIsReportedWhileTheCommunicatorIsUp) {
  model::SetKernelThreads(1);
  const data::Dataset train = testing::SyntheticImages(16, 28, 28, 3);
  const data::Dataset test =
      testing::SyntheticImages(8, 14, 14, 3);  // another shape: the engine refuses it
  Reported reported;
  auto alive = std::make_shared<bool>(false);
  auto r = RunWith(train, test, /*fail_broadcast=*/false, reported, alive);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  ASSERT_EQ(reported.failures.size(), 1u);
  EXPECT_EQ(reported.failures[0].ToString(), r.status().ToString());
  EXPECT_TRUE(reported.comm_alive[0]) << "reported after the communicator closed";
  EXPECT_FALSE(*alive) << "the communicator outlived the rank";
}

TEST(TrainRank, ACollectiveFailureIsReportedWhileTheCommunicatorIsUp) {
  model::SetKernelThreads(1);
  const data::Dataset ds = testing::SyntheticImages(16, 28, 28, 3);
  Reported reported;
  auto alive = std::make_shared<bool>(false);
  auto r = RunWith(ds, ds, /*fail_broadcast=*/true, reported, alive);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("lost peer rank 1"), std::string::npos);
  ASSERT_EQ(reported.failures.size(), 1u);
  EXPECT_TRUE(reported.comm_alive[0]) << "reported after the communicator closed";
}

TEST(TrainRank, ASuccessfulRankReportsNothing) {
  model::SetKernelThreads(1);
  const data::Dataset ds = testing::SyntheticImages(16, 28, 28, 3);
  Reported reported;
  auto alive = std::make_shared<bool>(false);
  auto r = RunWith(ds, ds, /*fail_broadcast=*/false, reported, alive);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->steps, 4);
  EXPECT_TRUE(reported.failures.empty());
}

// Rank 0 of a world of 2 whose peer adds nothing: all-reduces leave the buffer as it is,
// broadcasts from rank 0 reach no one, all-gathers see a peer that kept no state and asks
// nothing. The fakes below lose the peer in one of them.
class QuietPeerComm : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  Status AllReduce(float*, std::size_t, comm::ReduceOp) override { return Status::Ok(); }
  Status Broadcast(void*, std::size_t, int) override { return Status::Ok(); }
  Status Barrier() override { return Status::Ok(); }
  Status AllGather(const void* in, std::size_t bytes, void* out) override {
    std::memset(out, 0, 2 * bytes);
    std::memcpy(out, in, bytes);
    return Status::Ok();
  }
  void Abort() override {}
};

// Rank 0 of a world of 2 whose every broadcast loses the peer.
class LosingComm final : public QuietPeerComm {
 public:
  Status Broadcast(void*, std::size_t, int) override {
    return Unavailable("broadcast: lost peer rank 1");
  }
};

// A failed in-place recovery is reported to the round that lost the peer. It was not reported
// at all, so main resolved it against the attempt's round-0 key space, which held an older
// failure already recovered from: the rank exited blaming the wrong rank with that failure's
// code (143 there, a free stop for the planner). Found by a reviewing helper.
TEST(TrainRank, AFailedRecoveryIsReportedToTheRoundThatLostThePeer) {
  model::SetKernelThreads(1);
  const data::Dataset ds = testing::SyntheticImages(16, 28, 28, 3);
  rendezvous::MemoryStore store;
  const train::RankEnv env = testing::RankEnvOf({{"RINGTRAIN_RANK", "0"},
                                                 {"RINGTRAIN_WORLD_SIZE", "2"},
                                                 {"RINGTRAIN_TOKEN", "t"},
                                                 {"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS", "1"},
                                                 {"RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS", "5"}});
  // Rank 1 took part in rounds 0 and 1 (running what rank 0 runs) and never comes back for
  // round 2.
  const std::string same = rendezvous::EncodeFingerprint(FingerprintOf(env, Small()));
  ASSERT_TRUE(store.Set("fingerprint/1", same).ok());
  ASSERT_TRUE(store.Set("arrived/1", "1").ok());
  ASSERT_TRUE(store.Set("r1/fingerprint/1", same).ok());
  ASSERT_TRUE(store.Set("r1/arrived/1", "1").ok());
  // Each round's first failure, as its communicator recorded it.
  ASSERT_TRUE(
      store
          .Set("abort",
               "UNAVAILABLE: round 0 loss, long recovered (detected by rank 1, exit code 143)")
          .ok());
  ASSERT_TRUE(store.Set("r1/abort", "UNAVAILABLE: round 1 loss (detected by rank 0)").ok());
  RankDeps deps;
  deps.store = &store;
  deps.train = &ds;
  deps.test = &ds;
  deps.make_communicator = [](rendezvous::Store&, const train::RankEnv&, const Placement&,
                              const std::string&) -> StatusOr<std::unique_ptr<comm::Communicator>> {
    return std::unique_ptr<comm::Communicator>(new LosingComm());
  };
  std::vector<std::string> seen;
  deps.report_failure = [&](rendezvous::Store& round_store, const Status&) {
    auto v = round_store.Get("abort", std::chrono::milliseconds(0));
    seen.push_back(v.ok() ? *v : v.status().ToString());
  };
  Placement cpu;
  auto r = TrainRank(env, Small(), cpu, deps);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("in-place recovery failed"), std::string::npos)
      << r.status().ToString();
  ASSERT_EQ(seen.size(), 1u) << "the failed recovery was never reported";
  EXPECT_NE(seen[0].find("round 1 loss"), std::string::npos) << seen[0];
}

// A QuietPeerComm that loses the peer from all-reduce number `lose_after` + 1 on (counted in
// `calls`; never with -1).
class PeerLosingComm final : public QuietPeerComm {
 public:
  PeerLosingComm(std::shared_ptr<std::atomic<int>> calls, int lose_after,
                 StatusCode code = StatusCode::kUnavailable)
      : calls_(std::move(calls)), lose_after_(lose_after), code_(code) {}
  Status AllReduce(float*, std::size_t, comm::ReduceOp) override {
    if (++*calls_ > lose_after_ && lose_after_ >= 0) {
      return Status(code_, "all-reduce: lost peer rank 1");
    }
    return Status::Ok();
  }

 private:
  std::shared_ptr<std::atomic<int>> calls_;
  int lose_after_;
  StatusCode code_;
};

// What rank 0 of a gang of two keeps when it loses rank 1 in the step after kKeptSteps (no
// checkpoint while training): the state it holds after kKeptSteps steps, and the checkpoint a
// gang writes at that step, both from a gang that trains kKeptSteps steps and ends.
constexpr std::int64_t kKeptSteps = 5;

train::TrainConfig KeptConfig() {
  train::TrainConfig config = Small();
  config.checkpoint_every = 1000;  // no checkpoint while training
  return config;
}

std::string UniqueDir(const std::string& name) {
  return ::testing::TempDir() + name + "_" + std::to_string(::getpid()) + "_" +
         std::to_string(std::random_device{}());
}

struct KeptReference {
  std::vector<float> params;
  std::vector<float> state;
  std::int64_t optimizer_steps = 0;
  int step_allreduces = 0;  // the all-reduces of kKeptSteps steps (no test set)
  std::optional<train::CheckpointState> checkpoint;
};

void TrainKeptReference(const data::Dataset& ds, KeptReference& out) {
  train::TrainConfig reference = KeptConfig();
  reference.checkpoint_dir = UniqueDir("kept_reference");
  auto calls = std::make_shared<std::atomic<int>>(0);
  {
    PeerLosingComm peer_stays(calls, -1);
    train::EngineDeps ed;
    ed.comm = &peer_stays;
    ed.train = &ds;
    auto trainer = Trainer::Create(reference, ed);
    ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
    auto r = (*trainer)->Run(kKeptSteps);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->steps, kKeptSteps);
    ASSERT_TRUE((*trainer)->engine().Snapshot(out.params, out.state, out.optimizer_steps).ok());
  }
  out.step_allreduces = calls->load();
  ASSERT_GT(out.step_allreduces, 0);
  auto expected =
      train::LoadNewestCheckpoint(reference.checkpoint_dir, out.params.size(), out.state.size());
  std::filesystem::remove_all(reference.checkpoint_dir);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  ASSERT_EQ(expected->global_step, kKeptSteps);
  out.checkpoint = std::move(*expected);
}

// What rank 0 reported, resolved as the runner's main resolves it, and whether the checkpoint of
// the state it kept was already in `checkpoint_dir` at each report.
struct KeptReports {
  std::string checkpoint_dir;
  std::vector<rendezvous::FailureReport> reports;
  std::vector<bool> saved_first;
};

// Rank 0 of a gang of two (rank 1 arrived in round 0 and runs what rank 0 runs) that trains
// kKeptSteps steps and loses rank 1 in the next one.
RankDeps LosingRankZeroDeps(rendezvous::MemoryStore& store, const train::RankEnv& env,
                            const data::Dataset& ds, int step_allreduces, KeptReports& got,
                            StatusCode code = StatusCode::kUnavailable) {
  const std::string same = rendezvous::EncodeFingerprint(FingerprintOf(env, KeptConfig()));
  EXPECT_TRUE(store.Set("fingerprint/1", same).ok());
  EXPECT_TRUE(store.Set("arrived/1", "1").ok());
  RankDeps deps;
  deps.store = &store;
  deps.train = &ds;
  deps.stop = &StopFlag();
  auto lost_calls = std::make_shared<std::atomic<int>>(0);
  deps.make_communicator =
      [lost_calls, step_allreduces, code](
          rendezvous::Store&, const train::RankEnv&, const Placement&,
          const std::string&) -> StatusOr<std::unique_ptr<comm::Communicator>> {
    return std::unique_ptr<comm::Communicator>(
        new PeerLosingComm(lost_calls, step_allreduces, code));
  };
  deps.report_failure = [&got](rendezvous::Store& round_store, const Status& s) {
    got.saved_first.push_back(
        std::filesystem::exists(train::CheckpointPath(got.checkpoint_dir, kKeptSteps)));
    got.reports.push_back(rendezvous::ResolveFailure(round_store, 0, s, ExitCodeFor(s)));
  };
  return deps;
}

train::RankEnv KeptEnv(const std::string& recovery_seconds) {
  return testing::RankEnvOf({{"RINGTRAIN_RANK", "0"},
                             {"RINGTRAIN_WORLD_SIZE", "2"},
                             {"RINGTRAIN_TOKEN", "t"},
                             {"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS", recovery_seconds},
                             {"RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS", "20"},
                             {"RINGTRAIN_IMAGE", "ghcr.io/x:0.1"}});
}

// The checkpoint at the last step rank 0 completed, of the state it held, recording what a
// checkpoint written there while training records.
void ExpectCheckpointOfKeptState(const std::string& dir, const KeptReference& ref) {
  ASSERT_TRUE(std::filesystem::exists(train::CheckpointPath(dir, kKeptSteps)))
      << "rank 0 gave up recovering in place and did not save the state it kept";
  auto saved = train::LoadNewestCheckpoint(dir, ref.params.size(), ref.state.size());
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  const train::CheckpointState& expected = *ref.checkpoint;
  EXPECT_EQ(saved->global_step, kKeptSteps);
  EXPECT_EQ(saved->epoch, expected.epoch);
  EXPECT_EQ(saved->step_in_epoch, expected.step_in_epoch);
  EXPECT_EQ(saved->epoch_samples, expected.epoch_samples);
  EXPECT_EQ(saved->world_size, expected.world_size);
  EXPECT_EQ(saved->optimizer_steps, ref.optimizer_steps);
  EXPECT_EQ(saved->model, expected.model);
  EXPECT_TRUE(saved->params == ref.params) << "the saved parameters are not the ones rank 0 held";
  EXPECT_TRUE(saved->optimizer_state == ref.state) << "the saved optimizer state is not rank 0's";
  EXPECT_TRUE(saved->params == expected.params);
}

// Each kept-state test: one kernel thread, no stop left from another test, and the reference
// rank 0's state is compared with.
void StartKeptTest(const data::Dataset& ds, KeptReference& ref) {
  model::SetKernelThreads(1);
  ResetStopForTest();
  TrainKeptReference(ds, ref);
}

// Rank 0's failure `s` is retryable and was reported once, in those words.
void ExpectReportedOnceAsRetryable(const KeptReports& got, const Status& s) {
  EXPECT_EQ(ExitCodeFor(s), kExitRetryable);
  ASSERT_EQ(got.reports.size(), 1u);
  EXPECT_EQ(got.reports[0].exit_code, kExitRetryable);
  EXPECT_NE(got.reports[0].message.find(s.message()), std::string::npos) << got.reports[0].message;
}

// Seen on a cluster: rank 0 held the gang's state at step 6913 while it waited for a lost
// peer's replacement, the job was suspended (SIGTERM), and rank 0 exited without saving it: the
// next attempt resumed from the checkpoint at step 6500. Now rank 0, stopped while it recovers
// in place, writes the checkpoint a gang stopping at its last completed step would have written,
// and exits as promptly, with the stop's status.
TEST(TrainRank, AStopWhileRecoveringInPlaceSavesTheStateRankZeroKept) {
  using namespace std::chrono_literals;
  const data::Dataset ds = testing::SyntheticImages(64, 28, 28, 3);
  KeptReference ref;
  ASSERT_NO_FATAL_FAILURE(StartKeptTest(ds, ref));

  // Rank 0 trains kKeptSteps steps, loses rank 1 in the next one, keeps its state and waits for
  // the next round (up to 30 s); the job is stopped meanwhile.
  train::TrainConfig config = KeptConfig();
  config.checkpoint_dir = UniqueDir("stop_recovering");
  rendezvous::MemoryStore store;
  const train::RankEnv env = KeptEnv("30");
  KeptReports got{config.checkpoint_dir, {}, {}};
  const RankDeps deps = LosingRankZeroDeps(store, env, ds, ref.step_allreduces, got);
  StatusOr<train::TrainResult> result = Internal("not run");
  SteadyTime returned;
  std::thread rank0([&] {
    Placement cpu;
    result = TrainRank(env, config, cpu, deps);
    returned = std::chrono::steady_clock::now();
  });
  const Status waiting = store.Wait({"r1/arrived/0"}, 60s);
  const SteadyTime stopped = std::chrono::steady_clock::now();
  RequestStop(SIGTERM);
  rank0.join();
  ResetStopForTest();
  ASSERT_TRUE(waiting.ok()) << "rank 0 never waited for the next round: " << waiting.ToString();
  ASSERT_FALSE(result.ok());
  // As a stopped recovering rank ends today (main exits 128 + SIGTERM for it).
  EXPECT_NE(result.status().message().find("rendezvous: stopped by SIGTERM"), std::string::npos)
      << result.status().ToString();
  EXPECT_LT(returned - stopped, 10s) << "the stopped rank waited on (recovery timeout 30 s)";
  ASSERT_EQ(got.reports.size(), 1u);
  EXPECT_TRUE(got.saved_first[0]) << "stopped, rank 0 saves the state it kept before it reports";
  ExpectCheckpointOfKeptState(config.checkpoint_dir, ref);
  std::filesystem::remove_all(config.checkpoint_dir);
}

// The same loss when no replacement comes within the recovery timeout: rank 0 gave up and
// exited 138 without saving, and the gang restart resumed from the newest periodic checkpoint
// (on a cluster, 413 steps older than the state rank 0 held). Now it saves the state it kept;
// its failure, its report and its exit code are those of a failed recovery, as before.
TEST(TrainRank, ARecoveryThatTimesOutSavesTheStateRankZeroKept) {
  const data::Dataset ds = testing::SyntheticImages(64, 28, 28, 3);
  KeptReference ref;
  ASSERT_NO_FATAL_FAILURE(StartKeptTest(ds, ref));

  train::TrainConfig config = KeptConfig();
  config.checkpoint_dir = UniqueDir("recovery_timed_out");
  rendezvous::MemoryStore store;
  const train::RankEnv env = KeptEnv("1");  // rank 1 never comes back for round 1
  KeptReports got{config.checkpoint_dir, {}, {}};
  const RankDeps deps = LosingRankZeroDeps(store, env, ds, ref.step_allreduces, got);
  Placement cpu;
  auto result = TrainRank(env, config, cpu, deps);
  ASSERT_FALSE(result.ok());
  const Status& s = result.status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(s.message().rfind("step " + std::to_string(kKeptSteps + 1) + ": ", 0), 0u)
      << "not the loss that began the recovery: " << s.ToString();
  EXPECT_NE(s.message().find("lost peer rank 1"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(contract::kRecoveryFailedMarker), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("checkpoint"), std::string::npos) << s.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectReportedOnceAsRetryable(got, s));
  EXPECT_FALSE(got.saved_first[0]) << "a failed recovery is reported before the save, as promptly "
                                      "as without it";
  ExpectCheckpointOfKeptState(config.checkpoint_dir, ref);
  std::filesystem::remove_all(config.checkpoint_dir);
}

// Rank 1's replacement arrives for round 1 but runs another image: rank 0 refuses the round
// (a failure after the round formed, before training again) and exits 138, as before; it saves
// the state it kept first. The next attempt, built alike, resumes from it.
TEST(TrainRank, ARecoveryRoundThatFailsSavesTheStateRankZeroKept) {
  const data::Dataset ds = testing::SyntheticImages(64, 28, 28, 3);
  KeptReference ref;
  ASSERT_NO_FATAL_FAILURE(StartKeptTest(ds, ref));

  train::TrainConfig config = KeptConfig();
  config.checkpoint_dir = UniqueDir("recovery_refused");
  rendezvous::MemoryStore store;
  const train::RankEnv env = KeptEnv("30");
  KeptReports got{config.checkpoint_dir, {}, {}};
  const RankDeps deps = LosingRankZeroDeps(store, env, ds, ref.step_allreduces, got);
  train::RankEnv other_env = env;
  other_env.image = "ghcr.io/x:0.2";
  ASSERT_TRUE(store
                  .Set("r1/fingerprint/1",
                       rendezvous::EncodeFingerprint(FingerprintOf(other_env, KeptConfig())))
                  .ok());
  ASSERT_TRUE(store.Set("r1/arrived/1", "1").ok());
  Placement cpu;
  auto result = TrainRank(env, config, cpu, deps);
  ASSERT_FALSE(result.ok());
  const Status& s = result.status();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("the gang refused to train together"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("image ghcr.io/x:0.2"), std::string::npos) << s.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectReportedOnceAsRetryable(got, s));
  EXPECT_FALSE(got.saved_first[0]) << "a failed recovery is reported before the save, as promptly "
                                      "as without it";
  ExpectCheckpointOfKeptState(config.checkpoint_dir, ref);
  std::filesystem::remove_all(config.checkpoint_dir);
}

// Without in-place recovery (a recovery timeout of 0, runPolicy.recovery GangRestart) a peer
// lost while the gang trains ended rank 0 at once without a save: the gang restart resumed from
// the last periodic checkpoint and every step since was lost. Now rank 0 saves the state as of
// the gang's last completed step first; its failure, report and exit code are as before.
TEST(TrainRank, APeerLostWithoutInPlaceRecoverySavesTheLastCompletedStep) {
  const data::Dataset ds = testing::SyntheticImages(64, 28, 28, 3);
  KeptReference ref;
  ASSERT_NO_FATAL_FAILURE(StartKeptTest(ds, ref));

  train::TrainConfig config = KeptConfig();
  config.checkpoint_dir = UniqueDir("lost_without_recovery");
  rendezvous::MemoryStore store;
  const train::RankEnv env = KeptEnv("0");  // no in-place recovery
  KeptReports got{config.checkpoint_dir, {}, {}};
  const RankDeps deps = LosingRankZeroDeps(store, env, ds, ref.step_allreduces, got);
  Placement cpu;
  auto result = TrainRank(env, config, cpu, deps);
  ASSERT_FALSE(result.ok());
  const Status& s = result.status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(s.message().rfind("step " + std::to_string(kKeptSteps + 1) + ": ", 0), 0u)
      << s.ToString();
  EXPECT_EQ(s.message().find(contract::kRecoveryFailedMarker), std::string::npos) << s.ToString();
  EXPECT_EQ(ExitCodeFor(s), kExitRetryable);
  ASSERT_EQ(got.reports.size(), 1u);
  EXPECT_EQ(got.reports[0].exit_code, kExitRetryable);
  EXPECT_FALSE(got.saved_first[0]) << "a loss is reported before the save, as promptly as before";
  EXPECT_FALSE(store.Get("r1/arrived/0", Duration::zero()).ok())
      << "rank 0 waited for a next round without in-place recovery";
  ExpectCheckpointOfKeptState(config.checkpoint_dir, ref);
  std::filesystem::remove_all(config.checkpoint_dir);
}

// A checkpoint read the volume keeps failing (here the kernel's own EIO: a checkpoint that is a
// link to /proc/self/mem), after the read's 3 retries, ends the rank with a retryable code for a
// gang restart, marked as rank 0's checkpoint I/O. It was taken for a lost peer: with in-place
// recovery on, a round formed and read the same file again, forever, never counting against
// backoffLimit (review: 16 rounds in 110 s).
TEST(TrainRank, ACheckpointReadTheVolumeKeepsFailingIsNoLostPeer) {
  const data::Dataset ds = testing::SyntheticImages(64, 28, 28, 3);
  model::SetKernelThreads(1);
  ResetStopForTest();
  train::TrainConfig config = KeptConfig();
  config.checkpoint_dir = UniqueDir("eio_read");
  std::filesystem::create_directories(config.checkpoint_dir);
  std::filesystem::create_symlink("/proc/self/mem",
                                  train::CheckpointPath(config.checkpoint_dir, 5));
  rendezvous::MemoryStore store;
  const train::RankEnv env = KeptEnv("30");  // in-place recovery on
  KeptReports got{config.checkpoint_dir, {}, {}};
  const RankDeps deps = LosingRankZeroDeps(store, env, ds, 1 << 30, got);
  Placement cpu;
  auto result = TrainRank(env, config, cpu, deps);
  ASSERT_FALSE(result.ok());
  const Status& s = result.status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(contract::kCheckpointIoFailed), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(std::strerror(EIO)), std::string::npos) << s.ToString();
  EXPECT_EQ(ExitCodeFor(s), kExitRetryable);
  EXPECT_FALSE(store.Get("r1/arrived/0", Duration::zero()).ok())
      << "rank 0 took its own checkpoint read for a lost peer and formed a recovery round";
  EXPECT_TRUE(std::filesystem::is_symlink(train::CheckpointPath(config.checkpoint_dir, 5)))
      << "a file the volume may heal is kept";
  std::filesystem::remove_all(config.checkpoint_dir);
}

// A failure that is no peer loss (here an internal error of the collective) is no state worth a
// checkpoint: the step that failed may be this rank's own fault. Nothing is written.
TEST(TrainRank, AFailureThatIsNoPeerLossSavesNothing) {
  const data::Dataset ds = testing::SyntheticImages(64, 28, 28, 3);
  KeptReference ref;
  ASSERT_NO_FATAL_FAILURE(StartKeptTest(ds, ref));

  train::TrainConfig config = KeptConfig();
  config.checkpoint_dir = UniqueDir("failed_no_loss");
  rendezvous::MemoryStore store;
  const train::RankEnv env = KeptEnv("0");
  KeptReports got{config.checkpoint_dir, {}, {}};
  const RankDeps deps =
      LosingRankZeroDeps(store, env, ds, ref.step_allreduces, got, StatusCode::kInternal);
  Placement cpu;
  auto result = TrainRank(env, config, cpu, deps);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInternal) << result.status().ToString();
  ASSERT_EQ(got.reports.size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(train::CheckpointPath(config.checkpoint_dir, kKeptSteps)))
      << "a failure that is no peer loss was saved as the gang's state";
  std::filesystem::remove_all(config.checkpoint_dir);
}

// A save of the kept state that fails (the checkpoint dir became a file while rank 0 waited)
// is logged; the failure rank 0 returns and reports, and its exit code, are the recovery's.
TEST(TrainRank, AKeptStateThatCannotBeSavedLeavesTheFailureAsItWas) {
  using namespace std::chrono_literals;
  const data::Dataset ds = testing::SyntheticImages(64, 28, 28, 3);
  KeptReference ref;
  ASSERT_NO_FATAL_FAILURE(StartKeptTest(ds, ref));

  train::TrainConfig config = KeptConfig();
  config.checkpoint_dir = UniqueDir("kept_unsaved");
  rendezvous::MemoryStore store;
  const train::RankEnv env = KeptEnv("30");
  KeptReports got{config.checkpoint_dir, {}, {}};
  const RankDeps deps = LosingRankZeroDeps(store, env, ds, ref.step_allreduces, got);
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  StatusOr<train::TrainResult> result = Internal("not run");
  std::thread rank0([&] {
    Placement cpu;
    result = TrainRank(env, config, cpu, deps);
  });
  // Rank 0 waits for round 1: its checkpoint dir becomes a file, then rank 1's replacement
  // arrives running another image, and rank 0 refuses the round.
  const Status waiting = store.Wait({"r1/arrived/0"}, 60s);
  std::filesystem::remove_all(config.checkpoint_dir);
  { std::ofstream(config.checkpoint_dir) << "not a directory"; }
  train::RankEnv other_env = env;
  other_env.image = "ghcr.io/x:0.2";
  EXPECT_TRUE(store
                  .Set("r1/fingerprint/1",
                       rendezvous::EncodeFingerprint(FingerprintOf(other_env, KeptConfig())))
                  .ok());
  EXPECT_TRUE(store.Set("r1/arrived/1", "1").ok());
  rank0.join();
  spdlog::set_default_logger(previous);
  std::filesystem::remove_all(config.checkpoint_dir);
  ASSERT_TRUE(waiting.ok()) << "rank 0 never waited for the next round: " << waiting.ToString();
  ASSERT_FALSE(result.ok());
  const Status& s = result.status();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_EQ(s.message().rfind("the gang refused to train together", 0), 0u) << s.ToString();
  EXPECT_EQ(s.message().find("checkpoint"), std::string::npos) << s.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectReportedOnceAsRetryable(got, s));
  EXPECT_NE(log.str().find("in-place recovery failed; the state this rank kept is not saved: "),
            std::string::npos)
      << "no save of the kept state was tried, or its failure was not logged:\n"
      << log.str();
}

// What each rank of a refused gang reported: its failure resolved through the gang-failure
// protocol, in the key space of the round it failed in (as the runner's main does).
struct Refused {
  StatusOr<train::TrainResult> result = Internal("not run");
  std::optional<rendezvous::FailureReport> report;
  int reports = 0;
};

RankDeps RefusingDeps(rendezvous::Store& store, const data::Dataset& ds, int rank,
                      std::atomic<int>& communicators, Refused& out) {
  RankDeps deps;
  deps.store = &store;
  deps.train = &ds;
  deps.test = &ds;
  deps.make_communicator =
      [&communicators](rendezvous::Store&, const train::RankEnv&, const Placement&,
                       const std::string&) -> StatusOr<std::unique_ptr<comm::Communicator>> {
    ++communicators;
    return std::unique_ptr<comm::Communicator>(new LosingComm());
  };
  deps.report_failure = [&out, rank](rendezvous::Store& round_store, const Status& s) {
    ++out.reports;
    out.report = rendezvous::ResolveFailure(round_store, rank, s, ExitCodeFor(s));
  };
  return deps;
}

train::RankEnv GangEnv(int rank, const std::string& image = "",
                       const std::string& recovery_seconds = "0") {
  std::map<std::string, std::string> vars = {
      {"RINGTRAIN_RANK", std::to_string(rank)},
      {"RINGTRAIN_WORLD_SIZE", "2"},
      {"RINGTRAIN_TOKEN", "t"},
      {"RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS", "20"},
      {"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS", recovery_seconds}};
  if (!image.empty()) vars["RINGTRAIN_IMAGE"] = image;
  return testing::RankEnvOf(vars);
}

// Every rank's refusal names what differs, as rank 0 worded it, and every rank exits with a
// retryable code and the same root cause; no communicator is formed.
void ExpectRefusedAlike(const std::vector<Refused>& ranks, int communicators,
                        const std::vector<std::string>& named) {
  EXPECT_EQ(communicators, 0) << "a refused gang formed a communicator";
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const Refused& x = ranks[r];
    ASSERT_FALSE(x.result.ok()) << "rank " << r << " trained";
    EXPECT_EQ(x.result.status().code(), StatusCode::kAborted) << x.result.status().ToString();
    EXPECT_EQ(x.result.status().message(), ranks[0].result.status().message()) << "rank " << r;
    for (const std::string& part : named) {
      EXPECT_NE(x.result.status().message().find(part), std::string::npos)
          << "rank " << r << ": " << x.result.status().message();
    }
    ASSERT_EQ(x.reports, 1) << "rank " << r;
    EXPECT_EQ(x.report->exit_code, kExitRetryable) << "rank " << r;
    EXPECT_NE(x.report->message.find(ranks[0].result.status().message()), std::string::npos)
        << "rank " << r << " reports another cause: " << x.report->message;
  }
}

TEST(TrainRank, RanksOfAnotherImageOrConfigurationAreRefusedBeforeTheRingForms) {
  model::SetKernelThreads(1);
  const data::Dataset ds = testing::SyntheticImages(16, 28, 28, 3);
  struct Case {
    std::string image0, image1;
    int batch1;
    std::vector<std::string> named;
  };
  const Case cases[] = {
      {"ghcr.io/x:0.1",
       "ghcr.io/x:0.2",
       4,
       {"rank 1 runs runner", "image ghcr.io/x:0.2", "but rank 0 runs runner",
        "image ghcr.io/x:0.1"}},
      {"",
       "",
       8,
       {"rank 1's training configuration differs from rank 0's in batch_size (8 vs 4) (digest",
        GangConfigDigestOfBatch(8), GangConfigDigestOfBatch(4)}},
  };
  for (const Case& c : cases) {
    rendezvous::MemoryStore store;
    std::atomic<int> communicators{0};
    std::vector<Refused> ranks(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        train::TrainConfig config = Small();
        if (r == 1) config.batch_size = c.batch1;
        const RankDeps deps = RefusingDeps(store, ds, r, communicators, ranks[r]);
        Placement cpu;
        ranks[r].result = TrainRank(GangEnv(r, r == 0 ? c.image0 : c.image1), config, cpu, deps);
      });
    }
    for (auto& t : threads) t.join();
    ExpectRefusedAlike(ranks, communicators.load(), c.named);
  }
}

// The case that matters: rank 1 is lost, the operator replaces it in place, and the replacement
// runs another release (an upgrade between). The survivor, which trained in round 0, refuses it
// in the recovery round rather than hand its state to it, and both exit with the same cause.
TEST(TrainRank, AReplacementOfAnotherReleaseIsRefusedInTheRecoveryRound) {
  model::SetKernelThreads(1);
  const data::Dataset ds = testing::SyntheticImages(16, 28, 28, 3);
  rendezvous::MemoryStore store;
  std::atomic<int> communicators{0};
  std::vector<Refused> ranks(2);
  // Rank 1 of round 0 ran what rank 0 runs, then was lost.
  const std::string same = rendezvous::EncodeFingerprint(FingerprintOf(GangEnv(1), Small()));
  ASSERT_TRUE(store.Set("fingerprint/1", same).ok());
  ASSERT_TRUE(store.Set("arrived/1", "1").ok());
  std::thread survivor([&] {
    const RankDeps deps = RefusingDeps(store, ds, 0, communicators, ranks[0]);
    Placement cpu;
    ranks[0].result = TrainRank(GangEnv(0, "", "20"), Small(), cpu, deps);
  });
  // The survivor trained in round 0 (its communicator lost rank 1) and waits in round 1.
  const Status waiting = store.Wait({"r1/arrived/0"}, std::chrono::seconds(20));
  if (waiting.ok()) {
    EXPECT_EQ(communicators.load(), 1) << "the survivor never trained in round 0";
    communicators = 0;
    RankDeps deps = RefusingDeps(store, ds, 1, communicators, ranks[1]);
    deps.fingerprint = FingerprintOf(GangEnv(1), Small());
    deps.fingerprint->runner = "0.2.0";
    Placement cpu;
    ranks[1].result = TrainRank(GangEnv(1), Small(), cpu, deps);
  }
  survivor.join();
  ASSERT_TRUE(waiting.ok()) << "the survivor never joined the recovery round: "
                            << waiting.ToString();
  ExpectRefusedAlike(ranks, communicators.load(),
                     {"rank 1 runs runner 0.2.0 protocol " + std::to_string(kGangProtocolVersion),
                      "but rank 0 runs runner " + std::string(BuildVersion())});
  EXPECT_TRUE(store.Get("r1/abort", std::chrono::milliseconds(0)).ok())
      << "the refusal was not recorded in the recovery round";
}

TEST(MakeCommunicator, AGpuRankOnTheTcpBackendJoinsTheRingACpuRankForms) {
  rendezvous::MemoryStore store;
  Placement cpu;
  Placement gpu_tcp;
  gpu_tcp.cuda = true;
  gpu_tcp.backend = Backend::kTcp;
  gpu_tcp.device = 0;
  std::vector<StatusOr<std::unique_ptr<comm::Communicator>>> comms;
  comms.reserve(2);
  for (int r = 0; r < 2; ++r) comms.emplace_back(Internal("not created"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const train::RankEnv env =
          testing::RankEnvOf({{"RINGTRAIN_RANK", std::to_string(r)},
                              {"RINGTRAIN_WORLD_SIZE", "2"},
                              {"RINGTRAIN_TOKEN", "t"},
                              {"RINGTRAIN_BIND_ADDR", "127.0.0.1"},
                              {"RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS", "30"}});
      comms[r] = MakeCommunicator(store, env, r == 0 ? cpu : gpu_tcp, "127.0.0.1");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(comms[r].ok()) << comms[r].status().ToString();
  // Both ranks advertised what the environment says, through the same options.
  for (int r = 0; r < 2; ++r) {
    auto addr = store.Get("comm/addr/" + std::to_string(r), std::chrono::seconds(0));
    ASSERT_TRUE(addr.ok()) << addr.status().ToString();
    EXPECT_EQ(addr->rfind("127.0.0.1:", 0), 0u) << *addr;
  }
  float a[2] = {1, 2};
  float b[2] = {10, 20};
  std::thread t0([&] { EXPECT_TRUE((*comms[0])->AllReduce(a, 2, comm::ReduceOp::kSum).ok()); });
  EXPECT_TRUE((*comms[1])->AllReduce(b, 2, comm::ReduceOp::kSum).ok());
  t0.join();
  EXPECT_EQ(a[0], 11);
  EXPECT_EQ(b[1], 22);
}

}  // namespace
}  // namespace ringtrain::rank
