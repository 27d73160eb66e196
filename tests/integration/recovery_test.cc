// In-place recovery end to end, ranks as threads over real TCP rings and one shared store: a
// rank is lost mid-step, the survivors keep their state, its replacement (a fresh TrainRank)
// takes the most advanced survivor's state, and training ends exactly where an undisturbed run
// ends (bit-identical test loss: no step lost, none taken twice). Covers a lost rank 0, two
// lost ranks, and a replacement lost during the state transfer.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include "common/runner_status.h"
#include "runner/metrics/runner_metrics.h"
#include "runner/model/gemm.h"
#include "runner/rank/rank.h"
#include "runner/rendezvous/memory_store.h"
#include "tests/fakes/rank_fixtures.h"

namespace ringtrain::rank {
namespace {

constexpr int kWorld = 3;

train::RankEnv EnvFor(int rank, int world, bool recover) {
  std::map<std::string, std::string> vars = {{"RINGTRAIN_RANK", std::to_string(rank)},
                                             {"RINGTRAIN_WORLD_SIZE", std::to_string(world)},
                                             {"RINGTRAIN_TOKEN", "t"},
                                             {"RINGTRAIN_MASTER_ADDR", "127.0.0.1"},
                                             {"RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS", "30"},
                                             {"RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS", "30"}};
  if (recover) vars["RINGTRAIN_RECOVERY_TIMEOUT_SECONDS"] = "30";
  return testing::RankEnvOf(vars);
}

train::TrainConfig Config() {
  train::TrainConfig c;
  c.model.hidden = 16;
  c.optimizer.name = "adam";
  c.batch_size = 8;
  c.epochs = 3;
  c.warmup_epochs = 0.5;
  return c;
}

// Forwards to the rank's real communicator until its `die_at`-th collective, where the rank
// dies: its sockets are shut (the peers see what a killed process leaves) and it fails.
// At its `drain_at`-th collective the rank is asked to stop (what a SIGTERM does while it
// trains), and goes on.
class Mortal final : public comm::Communicator {
 public:
  Mortal(std::unique_ptr<comm::Communicator> inner, int die_at, std::atomic<bool>* drain = nullptr,
         int drain_at = -1, Duration hang = Duration{0})
      : inner_(std::move(inner)),
        die_at_(die_at),
        drain_(drain),
        drain_at_(drain_at),
        hang_(hang) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status AllReduce(float* d, std::size_t n, comm::ReduceOp op) override {
    RETURN_IF_ERROR(Tick());
    return inner_->AllReduce(d, n, op);
  }
  Status Broadcast(void* d, std::size_t n, int root) override {
    RETURN_IF_ERROR(Tick());
    return inner_->Broadcast(d, n, root);
  }
  Status Barrier() override { return inner_->Barrier(); }
  Status AllGather(const void* in, std::size_t n, void* out) override {
    return inner_->AllGather(in, n, out);
  }
  void Abort() override { inner_->Abort(); }

 private:
  Status Tick() {
    const int n = ++calls_;
    if (drain_ != nullptr && n == drain_at_) drain_->store(true);
    if (die_at_ < 0 || n < die_at_) return Status::Ok();
    // A rank that hangs first (its peers wait in the collective) and is then killed.
    if (hang_ > Duration{0}) std::this_thread::sleep_for(hang_);
    inner_->Abort();
    return Internal("rank " + std::to_string(inner_->rank()) + " died");
  }
  std::unique_ptr<comm::Communicator> inner_;
  const int die_at_;
  std::atomic<bool>* drain_;
  const int drain_at_;
  const Duration hang_;
  std::atomic<int> calls_{0};
};

// A user-defined model with dropout on a Table: the state a rank keeps is the same flat
// parameters, and the masks of a step come from (seed, rank, position), so a replacement draws
// exactly the masks the rank it replaces would have drawn.
train::TrainConfig TableConfig() {
  train::TrainConfig c = Config();
  auto spec = model::ParseModelSpec(R"({"input": [12], "layers": [{"dense": {"units": 16}},
      "gelu", {"dropout": {"rate": 0.25}}, {"dense": {"units": 4}}]})");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (spec.ok()) c.model_spec = *spec;
  return c;
}

struct Gang {
  explicit Gang(bool tables = false) : tables(tables) {}
  const bool tables;  // train TableConfig() on the tables instead of the images
  Duration hang{0};   // how long a rank hangs at its `die_at`-th collective before it dies
  rendezvous::MemoryStore store;
  data::Dataset train = testing::SyntheticImages(480, 28, 28, 1);
  data::Dataset test = testing::SyntheticImages(96, 28, 28, 2);
  data::Table train_table = testing::SyntheticTable(480, 12, 4, 1);
  data::Table test_table = testing::SyntheticTable(96, 12, 4, 2);

  // One rank's whole life; dies at its `die_at`-th collective of its first round (-1: never),
  // or is asked to stop at its `drain_at`-th.
  StatusOr<train::TrainResult> RunRank(int rank, int world, bool recover, int die_at,
                                       int drain_at = -1,
                                       const train::TrainConfig& config = Config(),
                                       metrics::RunnerMetrics* metrics = nullptr) {
    std::atomic<bool> drain{false};
    RankDeps deps;
    deps.metrics = metrics;
    deps.drain = &drain;
    deps.store = &store;
    deps.train = tables ? nullptr : &train;
    deps.test = tables ? nullptr : &test;
    deps.train_table = tables ? &train_table : nullptr;
    deps.test_table = tables ? &test_table : nullptr;
    deps.advertise_host = "127.0.0.1";
    bool first = true;
    deps.make_communicator =
        [&](rendezvous::Store& s, const train::RankEnv& env, const Placement& p,
            const std::string& host) -> StatusOr<std::unique_ptr<comm::Communicator>> {
      ASSIGN_OR_RETURN(auto c, MakeCommunicator(s, env, p, host));
      const int at = first ? die_at : -1;
      const bool first_round = first;
      first = false;
      const int asked_at = first_round ? drain_at : -1;
      return std::unique_ptr<comm::Communicator>(
          new Mortal(std::move(c), at, &drain, asked_at, at >= 0 ? hang : Duration{0}));
    };
    return TrainRank(EnvFor(rank, world, recover), tables ? TableConfig() : config, Placement{},
                     deps);
  }
};

train::TrainResult Undisturbed(int world, bool tables = false) {
  Gang g(tables);
  std::vector<StatusOr<train::TrainResult>> r(world, Internal("not run"));
  std::vector<std::thread> t;
  for (int i = 0; i < world; ++i) t.emplace_back([&, i] { r[i] = g.RunRank(i, world, false, -1); });
  for (auto& x : t) x.join();
  for (int i = 0; i < world; ++i) EXPECT_TRUE(r[i].ok()) << r[i].status().ToString();
  return r[0].ok() ? *r[0] : train::TrainResult{};
}

// The gang loses `victims` (each at its `die_at`-th collective); each is replaced by a fresh
// rank once it is gone, and a replacement in `doomed` itself dies at its first collective
// (during the state transfer), to be replaced again.
std::vector<StatusOr<train::TrainResult>> WithLosses(int world, const std::vector<int>& victims,
                                                     int die_at, const std::vector<int>& doomed,
                                                     bool tables = false,
                                                     Duration hang = Duration{0}) {
  Gang g(tables);
  g.hang = hang;
  std::vector<StatusOr<train::TrainResult>> r(world, Internal("not run"));
  std::vector<std::thread> t;
  for (int i = 0; i < world; ++i) {
    const bool victim = std::find(victims.begin(), victims.end(), i) != victims.end();
    t.emplace_back([&, i, victim] {
      if (!victim) {
        r[i] = g.RunRank(i, world, true, -1);
        return;
      }
      auto died = g.RunRank(i, world, false, die_at);
      EXPECT_FALSE(died.ok()) << "rank " << i << " was to die";
      if (std::find(doomed.begin(), doomed.end(), i) != doomed.end()) {
        auto again = g.RunRank(i, world, false, 1);  // dies at the state transfer
        EXPECT_FALSE(again.ok());
      }
      r[i] = g.RunRank(i, world, true, -1);  // the replacement
    });
  }
  for (auto& x : t) x.join();
  return r;
}

void ExpectSameEndAs(const std::vector<StatusOr<train::TrainResult>>& r,
                     const train::TrainResult& base, int recoveries) {
  for (std::size_t i = 0; i < r.size(); ++i) {
    ASSERT_TRUE(r[i].ok()) << "rank " << i << ": " << r[i].status().ToString();
    EXPECT_EQ(r[i]->steps, base.steps) << "rank " << i;
    // Bit-identical: the gang trained exactly the undisturbed run's steps on the same batches.
    EXPECT_EQ(r[i]->test_loss, base.test_loss) << "rank " << i;
    EXPECT_EQ(r[i]->test_accuracy, base.test_accuracy) << "rank " << i;
    EXPECT_EQ(r[i]->recoveries, recoveries) << "rank " << i;
    // The gang's account of its recoveries, the same on every rank, replacements included.
    EXPECT_EQ(r[i]->recovery_seconds, r[0]->recovery_seconds) << "rank " << i;
    EXPECT_EQ(r[i]->recovery_steps_lost, r[0]->recovery_steps_lost) << "rank " << i;
    EXPECT_EQ(r[i]->last_recovery_step, r[0]->last_recovery_step) << "rank " << i;
  }
}

class RecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model::SetKernelThreads(1);
    base_ = new train::TrainResult(Undisturbed(kWorld));
  }
  static void TearDownTestSuite() { delete base_; }
  static train::TrainResult* base_;
};
train::TrainResult* RecoveryTest::base_ = nullptr;

TEST_F(RecoveryTest, ALostRankIsReplacedAndOnlyTheStepInFlightIsRedone) {
  ASSERT_EQ(base_->steps, 60);  // 480 samples / (8 × 3) × 3 epochs
  auto r = WithLosses(kWorld, {1}, 40, {});
  ExpectSameEndAs(r, *base_, 1);
  // Every rank counts the time the gang did not train, and the one step that was in flight
  // when rank 1 died (its all-reduce failed): its work is done again.
  for (int i = 0; i < kWorld; ++i) {
    ASSERT_TRUE(r[i].ok());
    EXPECT_GT(r[i]->recovery_seconds, 0) << "rank " << i;
    EXPECT_EQ(r[i]->recovery_steps_lost, 1) << "rank " << i;
    EXPECT_GT(r[i]->last_recovery_step, 0) << "rank " << i;
  }
}

// A peer that hangs before it dies is noticed only when it dies (or at the collective timeout),
// but the gang stopped training when it hung: the time without training counts from the last
// step, on every rank.
TEST_F(RecoveryTest, TheOutageCountsFromTheLastProgressNotFromNoticingTheLoss) {
  constexpr Duration kHang = std::chrono::seconds(2);
  auto r = WithLosses(kWorld, {1}, 40, {}, /*tables=*/false, kHang);
  ExpectSameEndAs(r, *base_, 1);
  for (int i = 0; i < kWorld; ++i) {
    ASSERT_TRUE(r[i].ok());
    EXPECT_GE(r[i]->recovery_seconds, 2.0) << "rank " << i << ": the hang is part of the outage";
  }
  // A survivor's throughput is the run's, the outage included (a review: it was the last
  // stretch's alone, after the recovery, and read higher than the run ever trained).
  for (int i : {0, 2}) {
    EXPECT_LE(r[i]->samples_per_second,
              static_cast<double>(r[i]->samples_this_run) / r[i]->recovery_seconds)
        << "rank " << i;
  }
}

TEST_F(RecoveryTest, AUserModelWithDropoutOnATableRecoversBitIdentically) {
  const train::TrainResult base = Undisturbed(kWorld, /*tables=*/true);
  ASSERT_EQ(base.steps, 60);
  EXPECT_GT(base.test_accuracy, 0);
  auto r = WithLosses(kWorld, {1}, 40, {}, /*tables=*/true);
  ExpectSameEndAs(r, base, 1);
}

TEST_F(RecoveryTest, RankZeroLostIsReplacedFromASurvivor) {
  auto r = WithLosses(kWorld, {0}, 40, {});
  ExpectSameEndAs(r, *base_, 1);
}

// What the operator reads from rank 0's /status: the gang's account, even when rank 0 is the
// replacement (it takes the survivors' totals).
TEST_F(RecoveryTest, ARankZeroReplacementReportsTheGangsRecoveryAccount) {
  Gang g;
  metrics::RunnerMetrics replacement_metrics({"job", "ns", 0});
  std::vector<StatusOr<train::TrainResult>> r(kWorld, Internal("not run"));
  std::vector<std::thread> t;
  for (int i = 0; i < kWorld; ++i) {
    t.emplace_back([&, i] {
      if (i != 0) {
        r[i] = g.RunRank(i, kWorld, true, -1);
        return;
      }
      EXPECT_FALSE(g.RunRank(0, kWorld, false, 40).ok());
      r[0] = g.RunRank(0, kWorld, true, -1, -1, Config(), &replacement_metrics);
    });
  }
  for (auto& x : t) x.join();
  ExpectSameEndAs(r, *base_, 1);
  auto status = contract::ParseRunnerStatus(replacement_metrics.FinalStatusJson());
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->recoveries, 1);
  EXPECT_EQ(status->recovery_steps_lost, 1);
  EXPECT_GT(status->recovery_seconds, 0) << "the survivors' time without training";
  EXPECT_EQ(status->last_recovery_step, r[0]->last_recovery_step);
  EXPECT_EQ(status->start_step, r[0]->last_recovery_step);
}

// The value of a counter or gauge of one rank in Prometheus text (-1: no such series).
double SampleOf(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// While a survivor waits for the lost rank's replacement, it is not training and says so: its
// /status is "recovering" with 0 samples/s at the last step it reported, its samples/s gauge
// reads 0, and ringtrain_recovery_seconds_total grows as the outage goes on (its rate() is the
// time lost while it is lost, not a lump once training resumes).
TEST_F(RecoveryTest, ASurvivorSaysRecoveringAndCountsTheOutageWhileItWaits) {
  Gang g;
  metrics::RunnerMetrics survivor({"job", "ns", 0});
  std::vector<StatusOr<train::TrainResult>> r(kWorld, Internal("not run"));
  contract::RunnerStatus during;
  double gauge_during = -1;
  double counter_first = -1;
  double counter_later = -1;
  std::vector<std::thread> t;
  for (int i = 0; i < kWorld; ++i) {
    t.emplace_back([&, i] {
      if (i != 1) {
        r[i] = g.RunRank(i, kWorld, true, -1, -1, Config(), i == 0 ? &survivor : nullptr);
        return;
      }
      EXPECT_FALSE(g.RunRank(1, kWorld, false, 40).ok());
      // The replacement joins only once rank 0 was seen recovering, with its counter moving.
      // A hang guard, well inside the survivors' 30 s recovery timeout.
      const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (std::chrono::steady_clock::now() < guard) {
        auto s = contract::ParseRunnerStatus(survivor.RenderStatusJson());
        ASSERT_TRUE(s.ok()) << s.status().ToString();
        const std::string text = survivor.RenderText();
        const double counter = SampleOf(text, "ringtrain_recovery_seconds_total");
        if (s->state == "recovering" && counter_first < 0) {
          during = *s;
          gauge_during = SampleOf(text, "ringtrain_samples_per_second");
          counter_first = counter;
        } else if (counter_first >= 0 && counter > counter_first) {
          counter_later = counter;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      r[1] = g.RunRank(1, kWorld, true, -1);  // the replacement
    });
  }
  for (auto& x : t) x.join();
  ExpectSameEndAs(r, *base_, 1);
  EXPECT_EQ(during.state, "recovering") << "rank 0's /status while it waited for the replacement";
  EXPECT_EQ(during.samples_per_second, 0);
  EXPECT_GT(during.step, 0) << "the last step it reported";
  // The loss in its words, for the operator to show while every pod may still run.
  EXPECT_NE(during.recovery_cause.find("rank 1"), std::string::npos) << during.recovery_cause;
  EXPECT_EQ(gauge_during, 0);
  EXPECT_GT(counter_first, 0) << "the counter accrues from the failure on";
  EXPECT_GT(counter_later, counter_first) << "the counter accrues while the outage lasts";
  // Training again: the counter holds at least the gang's account of the outage, and stops.
  ASSERT_TRUE(r[0].ok());
  const double total = SampleOf(survivor.RenderText(), "ringtrain_recovery_seconds_total");
  EXPECT_GE(total, r[0]->recovery_seconds - 1e-6);
  EXPECT_EQ(SampleOf(survivor.RenderText(), "ringtrain_recovery_seconds_total"), total);
  auto end = contract::ParseRunnerStatus(survivor.RenderStatusJson());
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->state, "succeeded");
  EXPECT_EQ(end->recovery_cause, "") << "said only while it recovers";
  EXPECT_EQ(end->recovery_seconds, r[0]->recovery_seconds) << "/status: the gang's account";
}

TEST_F(RecoveryTest, TwoRanksLostAtOnceAreBothReplaced) {
  auto r = WithLosses(4, {1, 3}, 30, {});
  const train::TrainResult base4 = Undisturbed(4);
  ExpectSameEndAs(r, base4, 1);
}

TEST_F(RecoveryTest, AReplacementLostDuringTheStateTransferIsReplacedAgain) {
  auto r = WithLosses(kWorld, {2}, 40, {2});
  // Survivors recovered once (the round with the doomed replacement never trained).
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(r[i].ok()) << r[i].status().ToString();
    EXPECT_EQ(r[i]->test_loss, base_->test_loss);
    EXPECT_EQ(r[i]->steps, base_->steps);
  }
  ASSERT_TRUE(r[2].ok()) << r[2].status().ToString();
  EXPECT_EQ(r[2]->test_loss, base_->test_loss);
}

// SIGTERM is a handshake: the asked rank and the gang stop after the same step, the asked rank
// leaves (Cancelled: exit 143), the others keep their state, and the replacement continues
// from exactly there.
TEST_F(RecoveryTest, ARankAskedToStopLeavesAtAStepTheGangAgreesOnAndNoStepIsLost) {
  Gang g;
  std::vector<StatusOr<train::TrainResult>> r(kWorld, Internal("not run"));
  std::vector<std::thread> t;
  for (int i = 0; i < kWorld; ++i) {
    t.emplace_back([&, i] {
      if (i != 1) {
        r[i] = g.RunRank(i, kWorld, true, -1);
        return;
      }
      auto left = g.RunRank(1, kWorld, true, -1, /*drain_at=*/25);
      EXPECT_FALSE(left.ok());
      EXPECT_EQ(left.status().code(), StatusCode::kCancelled) << left.status().ToString();
      EXPECT_NE(left.status().message().find("the gang stopped with this rank after step"),
                std::string::npos)
          << left.status().message();
      r[i] = g.RunRank(1, kWorld, true, -1);  // the replacement
    });
  }
  for (auto& x : t) x.join();
  ExpectSameEndAs(r, *base_, 1);
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(r[0]->recovery_steps_lost, 0) << "the gang stopped at a step boundary";
  EXPECT_GT(r[0]->last_recovery_step, 0);
}

// A gang without in-place recovery whose rank `asked` is asked to stop at its 25th collective.
std::vector<StatusOr<train::TrainResult>> DrainedGang(int asked, const train::TrainConfig& c) {
  Gang g;
  std::vector<StatusOr<train::TrainResult>> r(kWorld, Internal("not run"));
  std::vector<std::thread> t;
  for (int i = 0; i < kWorld; ++i) {
    t.emplace_back([&, i] { r[i] = g.RunRank(i, kWorld, false, -1, i == asked ? 25 : -1, c); });
  }
  for (auto& x : t) x.join();
  return r;
}

// The next attempt resumes from the drain's checkpoint (a vote step, short of the end) and ends
// where an undisturbed run does.
void ExpectTheNextAttemptResumesFromTheDrain(const train::TrainConfig& c,
                                             const train::TrainResult& base) {
  Gang again;
  std::vector<StatusOr<train::TrainResult>> r(kWorld, Internal("not run"));
  std::vector<std::thread> t;
  for (int i = 0; i < kWorld; ++i) {
    t.emplace_back([&, i] { r[i] = again.RunRank(i, kWorld, false, -1, -1, c); });
  }
  for (auto& x : t) x.join();
  for (int i = 0; i < kWorld; ++i) {
    ASSERT_TRUE(r[i].ok()) << r[i].status().ToString();
    EXPECT_TRUE(r[i]->resumed);
    EXPECT_EQ(r[i]->steps, base.steps);
    const std::int64_t resumed_at = base.steps - r[i]->steps_this_run;
    EXPECT_GT(resumed_at, 0);
    EXPECT_EQ(resumed_at % train::kDrainVoteSteps, 0) << resumed_at;
    EXPECT_EQ(r[i]->test_loss, base.test_loss) << "rank " << i;
  }
}

// Without in-place recovery the gang stops together as well, and rank 0's checkpoint of that
// step lets the next attempt resume with nothing lost.
TEST_F(RecoveryTest, WithoutRecoveryTheGangStopsTogetherAndResumesFromThatStep) {
  const std::string dir = ::testing::TempDir() + "ringtrain-drain-ckpt";
  std::filesystem::remove_all(dir);
  train::TrainConfig c = Config();
  c.checkpoint_dir = dir;
  c.checkpoint_every = 1000;  // only the drain and the end write one
  auto r = DrainedGang(2, c);
  EXPECT_EQ(r[2].status().code(), StatusCode::kCancelled) << r[2].status().ToString();
  for (int i : {0, 1}) {
    EXPECT_EQ(r[i].status().code(), StatusCode::kAborted) << r[i].status().ToString();
    EXPECT_NE(r[i].status().message().find("rank(s) 2 left the gang after step"), std::string::npos)
        << r[i].status().message();
  }
  ExpectTheNextAttemptResumesFromTheDrain(c, *base_);
  std::filesystem::remove_all(dir);
}

// SIGTERM to rank 0 while it writes checkpoints (one after every step here): the handler only
// asks, so the write under way runs to its end; the gang stops together at the next vote, rank 0
// writes that step's checkpoint, and the next attempt resumes from it with nothing lost and no
// torn or temporary file left behind.
TEST_F(RecoveryTest, ASigtermToRankZeroWhileItWritesACheckpointLosesNothing) {
  const std::string dir = ::testing::TempDir() + "ringtrain-drain-during-ckpt";
  std::filesystem::remove_all(dir);
  train::TrainConfig c = Config();
  c.checkpoint_dir = dir;
  c.checkpoint_every = 1;
  auto r = DrainedGang(0, c);
  EXPECT_EQ(r[0].status().code(), StatusCode::kCancelled) << r[0].status().ToString();
  for (int i : {1, 2}) {
    EXPECT_NE(r[i].status().message().find("rank(s) 0 left the gang after step"), std::string::npos)
        << r[i].status().ToString();
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
    EXPECT_EQ(name.find(".corrupt"), std::string::npos) << name;
  }
  ExpectTheNextAttemptResumesFromTheDrain(c, *base_);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ringtrain::rank
