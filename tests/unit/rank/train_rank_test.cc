// One wiring for every engine: a rank's failure reaches the gang's store while its
// communicator is still up (whatever failed: engine creation or a collective), and a GPU rank
// on the TCP backend forms the very ring a CPU rank does (same bind address and advertised
// host: one code path, MakeCommunicator).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <thread>

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
  PeerLosingComm(std::shared_ptr<std::atomic<int>> calls, int lose_after)
      : calls_(std::move(calls)), lose_after_(lose_after) {}
  Status AllReduce(float*, std::size_t, comm::ReduceOp) override {
    if (++*calls_ > lose_after_ && lose_after_ >= 0) {
      return Unavailable("all-reduce: lost peer rank 1");
    }
    return Status::Ok();
  }

 private:
  std::shared_ptr<std::atomic<int>> calls_;
  int lose_after_;
};

// Seen on a cluster: rank 0 held the gang's state at step 6913 while it waited for a lost
// peer's replacement, the job was suspended (SIGTERM), and rank 0 exited without saving it: the
// next attempt resumed from the checkpoint at step 6500. Now rank 0, stopped while it recovers
// in place, writes the checkpoint a gang stopping at its last completed step would have written,
// and exits as promptly, with the stop's status.
TEST(TrainRank, AStopWhileRecoveringInPlaceSavesTheStateRankZeroKept) {
  using namespace std::chrono_literals;
  model::SetKernelThreads(1);
  ResetStopForTest();
  const data::Dataset ds = testing::SyntheticImages(64, 28, 28, 3);
  constexpr std::int64_t kSteps = 5;
  train::TrainConfig config = Small();
  config.checkpoint_every = 1000;  // no checkpoint while training
  const std::string dirs = ::testing::TempDir() + "stop_recovering_" + std::to_string(::getpid()) +
                           "_" + std::to_string(std::random_device{}());
  // The same kSteps steps by a gang that then ends: the state rank 0 holds after them, and the
  // checkpoint a gang writes at that step. Its all-reduces are the steps' (no test set).
  train::TrainConfig reference = config;
  reference.checkpoint_dir = dirs + "_reference";
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::vector<float> params;
  std::vector<float> state;
  std::int64_t optimizer_steps = 0;
  {
    PeerLosingComm peer_stays(calls, -1);
    train::EngineDeps ed;
    ed.comm = &peer_stays;
    ed.train = &ds;
    auto trainer = Trainer::Create(reference, ed);
    ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
    auto r = (*trainer)->Run(kSteps);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->steps, kSteps);
    ASSERT_TRUE((*trainer)->engine().Snapshot(params, state, optimizer_steps).ok());
  }
  const int step_allreduces = calls->load();
  ASSERT_GT(step_allreduces, 0);
  auto expected =
      train::LoadNewestCheckpoint(reference.checkpoint_dir, params.size(), state.size());
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  ASSERT_EQ(expected->global_step, kSteps);

  // Rank 0 trains kSteps steps, loses rank 1 in the next one, keeps its state and waits for the
  // next round (up to 30 s); the job is stopped meanwhile.
  config.checkpoint_dir = dirs + "_stopped";
  rendezvous::MemoryStore store;
  const train::RankEnv env = testing::RankEnvOf({{"RINGTRAIN_RANK", "0"},
                                                 {"RINGTRAIN_WORLD_SIZE", "2"},
                                                 {"RINGTRAIN_TOKEN", "t"},
                                                 {"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS", "30"},
                                                 {"RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS", "20"}});
  const std::string same = rendezvous::EncodeFingerprint(FingerprintOf(env, config));
  ASSERT_TRUE(store.Set("fingerprint/1", same).ok());
  ASSERT_TRUE(store.Set("arrived/1", "1").ok());
  RankDeps deps;
  deps.store = &store;
  deps.train = &ds;
  deps.stop = &StopFlag();
  auto lost_calls = std::make_shared<std::atomic<int>>(0);
  deps.make_communicator =
      [&](rendezvous::Store&, const train::RankEnv&, const Placement&,
          const std::string&) -> StatusOr<std::unique_ptr<comm::Communicator>> {
    return std::unique_ptr<comm::Communicator>(new PeerLosingComm(lost_calls, step_allreduces));
  };
  int reports = 0;
  deps.report_failure = [&](rendezvous::Store&, const Status&) { ++reports; };
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
  EXPECT_EQ(reports, 1);

  // The checkpoint at the last step rank 0 completed, of the state it held, recording what a
  // checkpoint written there while training records.
  ASSERT_TRUE(std::filesystem::exists(train::CheckpointPath(config.checkpoint_dir, kSteps)))
      << "rank 0 was stopped while recovering and did not save the state it kept";
  auto saved = train::LoadNewestCheckpoint(config.checkpoint_dir, params.size(), state.size());
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->global_step, kSteps);
  EXPECT_EQ(saved->epoch, expected->epoch);
  EXPECT_EQ(saved->step_in_epoch, expected->step_in_epoch);
  EXPECT_EQ(saved->epoch_samples, expected->epoch_samples);
  EXPECT_EQ(saved->world_size, expected->world_size);
  EXPECT_EQ(saved->optimizer_steps, optimizer_steps);
  EXPECT_EQ(saved->model, expected->model);
  EXPECT_TRUE(saved->params == params) << "the saved parameters are not the ones rank 0 held";
  EXPECT_TRUE(saved->optimizer_state == state) << "the saved optimizer state is not rank 0's";
  EXPECT_TRUE(saved->params == expected->params);
  std::filesystem::remove_all(reference.checkpoint_dir);
  std::filesystem::remove_all(config.checkpoint_dir);
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
