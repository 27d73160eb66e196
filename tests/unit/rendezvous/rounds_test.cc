// Recovery rounds: a fresh gang meets in round 0 (the attempt's own keys), survivors and a lost
// rank's replacement meet in the next round whatever order they arrive in, a waiting rank
// follows a round that moved on, and a new store (rank 0 lost) is found again.
#include "runner/rendezvous/rounds.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include <csignal>

#include "common/stop.h"
#include "runner/rendezvous/memory_store.h"

namespace ringtrain::rendezvous {
namespace {

using namespace std::chrono_literals;

RoundOptions Opts(int rank, int world, std::optional<int> failed = std::nullopt,
                  Duration timeout = 20s) {
  RoundOptions o;
  o.rank = rank;
  o.world_size = world;
  o.failed_round = failed;
  o.timeout = timeout;
  return o;
}

std::future<StatusOr<int>> JoinAsync(Store& store, RoundOptions o) {
  return std::async(std::launch::async, [&store, o] { return JoinRound(store, o); });
}

TEST(Rounds, AFreshGangMeetsInRoundZeroUnderTheAttemptsOwnKeys) {
  rendezvous::MemoryStore store;
  auto a = JoinAsync(store, Opts(0, 2));
  auto b = JoinAsync(store, Opts(1, 2));
  ASSERT_EQ(*a.get(), 0);
  ASSERT_EQ(*b.get(), 0);
  EXPECT_TRUE(store.Get("arrived/1", 0ms).ok()) << "round 0 keeps today's keys";
  EXPECT_FALSE(store.Get("round", 0ms).ok()) << "a gang that never recovers writes no round";
}

TEST(Rounds, ASurvivorAndTheReplacementMeetInTheNextRoundInEitherOrder) {
  for (bool replacement_first : {false, true}) {
    rendezvous::MemoryStore store;
    {
      auto a = JoinAsync(store, Opts(0, 2));
      auto b = JoinAsync(store, Opts(1, 2));
      ASSERT_EQ(*a.get(), 0);
      ASSERT_EQ(*b.get(), 0);
    }
    // Rank 1 is lost in round 0; rank 0 survives it, a fresh rank 1 replaces it.
    std::future<StatusOr<int>> survivor, replacement;
    if (replacement_first) {
      replacement = JoinAsync(store, Opts(1, 2));
      survivor = JoinAsync(store, Opts(0, 2, /*failed=*/0));
    } else {
      survivor = JoinAsync(store, Opts(0, 2, /*failed=*/0));
      replacement = JoinAsync(store, Opts(1, 2));
    }
    auto s = survivor.get();
    auto r = replacement.get();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*s, 1) << "replacement first: " << replacement_first;
    EXPECT_EQ(*r, 1);
    EXPECT_TRUE(store.Get("r1/arrived/0", 0ms).ok());
  }
}

TEST(Rounds, TwoSurvivorsAndTwoReplacementsFormOneRound) {
  rendezvous::MemoryStore store;
  {
    std::vector<std::future<StatusOr<int>>> gang;
    for (int r = 0; r < 4; ++r) gang.push_back(JoinAsync(store, Opts(r, 4)));
    for (auto& f : gang) ASSERT_EQ(*f.get(), 0);
  }
  std::vector<std::future<StatusOr<int>>> next;
  next.push_back(JoinAsync(store, Opts(1, 4)));     // replacement of rank 1
  next.push_back(JoinAsync(store, Opts(0, 4, 0)));  // survivor
  next.push_back(JoinAsync(store, Opts(3, 4)));     // replacement of rank 3
  next.push_back(JoinAsync(store, Opts(2, 4, 0)));  // survivor
  for (auto& f : next) {
    auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, 1);
  }
}

TEST(Rounds, ARankWaitingInARoundThatMovedOnFollowsIt) {
  rendezvous::MemoryStore store;
  auto waiting = JoinAsync(store, Opts(0, 2));  // rank 1 never comes to round 0
  ASSERT_TRUE(store.Wait({"arrived/0"}, 10s).ok());
  ASSERT_TRUE(store.Set("round", "3").ok());
  auto other = JoinAsync(store, Opts(1, 2, /*failed=*/2));
  auto w = waiting.get();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(*w, 3);
  EXPECT_EQ(*other.get(), 3);
}

TEST(Rounds, AFreshStoreHostedByRankZerosReplacementIsFoundAgain) {
  // Rank 0 (the store's host) was lost in round 5: the store is new and empty.
  rendezvous::MemoryStore fresh;
  auto rank0 = JoinAsync(fresh, Opts(0, 2));                   // knows no round: starts at 0
  auto survivor = JoinAsync(fresh, Opts(1, 2, /*failed=*/5));  // moves the new store to 6
  auto a = rank0.get();
  auto b = survivor.get();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*a, 6);
  EXPECT_EQ(*b, 6);
}

TEST(Rounds, TimeoutNamesTheRanksThatNeverArrived) {
  rendezvous::MemoryStore store;
  auto r = JoinRound(store, Opts(0, 3, /*failed=*/0, 1500ms));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("ranks 1, 2"), std::string::npos) << r.status().message();
}

// A store that is unreachable for its first `outage` calls (its host restarting).
class FlakyStore final : public Store {
 public:
  FlakyStore(Store& inner, int outage) : inner_(inner), outage_(outage) {}
  Status Set(const std::string& k, const std::string& v) override {
    RETURN_IF_ERROR(Down());
    return inner_.Set(k, v);
  }
  StatusOr<std::string> Get(const std::string& k, Duration t) override {
    RETURN_IF_ERROR(Down());
    return inner_.Get(k, t);
  }
  StatusOr<std::int64_t> Add(const std::string& k, std::int64_t d) override {
    RETURN_IF_ERROR(Down());
    return inner_.Add(k, d);
  }
  StatusOr<std::string> CompareSet(const std::string& k, const std::string& e,
                                   const std::string& d) override {
    RETURN_IF_ERROR(Down());
    return inner_.CompareSet(k, e, d);
  }
  Status Wait(const std::vector<std::string>& keys, Duration t) override {
    RETURN_IF_ERROR(Down());
    return inner_.Wait(keys, t);
  }
  int failed() const { return failed_.load(); }

 private:
  Status Down() {
    if (failed_.load() >= outage_) return Status::Ok();
    ++failed_;
    return Unavailable("connect: connection refused");
  }
  Store& inner_;
  const int outage_;
  std::atomic<int> failed_{0};
};

TEST(Rounds, AStoreOutageIsRetriedWithinTheTimeout) {
  rendezvous::MemoryStore inner;
  FlakyStore flaky(inner, 3);
  auto r = JoinRound(flaky, Opts(0, 1, /*failed=*/0));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, 1);
  EXPECT_EQ(flaky.failed(), 3);
}

TEST(Rounds, AStoreThatNeverComesBackEndsTheJoinAtTheDeadline) {
  rendezvous::MemoryStore inner;
  FlakyStore flaky(inner, 1 << 30);
  auto r = JoinRound(flaky, Opts(0, 2, /*failed=*/0, 600ms));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

// SIGTERM while a rank waits in a rendezvous (a fresh gang's, or a survivor's for its
// replacement): it leaves at once with Cancelled (exit 143), not at the timeout.
TEST(Rounds, ASigtermWhileWaitingEndsTheJoinAtOnce) {
  for (const std::optional<int> failed : {std::optional<int>(), std::optional<int>(0)}) {
    ResetStopForTest();
    rendezvous::MemoryStore store;
    auto waiting = JoinAsync(store, Opts(0, 2, failed, 600s));
    const std::string arrived = failed ? "r1/arrived/0" : "arrived/0";
    ASSERT_TRUE(store.Wait({arrived}, 20s).ok()) << "rank 0 never arrived";
    RequestStop(SIGTERM);
    ASSERT_EQ(waiting.wait_for(20s), std::future_status::ready) << "still waiting after SIGTERM";
    auto r = waiting.get();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  }
  ResetStopForTest();
}

// Answers one call with a connection reset (rank 0's store, seen from another rank): a Wait, or
// a Set the store applied before the reset (its reply was lost).
class ResetsOnce final : public Store {
 public:
  enum class Call { kWait, kSetAfterApplying };
  ResetsOnce(Store& inner, Call call) : inner_(inner), call_(call) {}
  Status Set(const std::string& k, const std::string& v) override {
    Status s = inner_.Set(k, v);
    if (s.ok() && call_ == Call::kSetAfterApplying && !reset_.exchange(true)) return Reset();
    return s;
  }
  StatusOr<std::string> Get(const std::string& k, Duration t) override { return inner_.Get(k, t); }
  StatusOr<std::int64_t> Add(const std::string& k, std::int64_t d) override {
    return inner_.Add(k, d);
  }
  StatusOr<std::string> CompareSet(const std::string& k, const std::string& e,
                                   const std::string& d) override {
    return inner_.CompareSet(k, e, d);
  }
  Status Wait(const std::vector<std::string>& keys, Duration t) override {
    if (call_ == Call::kWait && !reset_.exchange(true)) return Reset();
    return inner_.Wait(keys, t);
  }
  bool reset() const { return reset_.load(); }

 private:
  static Status Reset() { return Unavailable("recv: connection reset by peer"); }
  Store& inner_;
  const Call call_;
  std::atomic<bool> reset_{false};
};

// A fresh rank whose arrival landed before a store error retries into the same round: it finds
// its own arrival there, not a lost rank's, so it does not start round 1 alone (and leave the
// gang to a connect timeout and a restart).
TEST(Rounds, ATransientStoreErrorAfterArrivingKeepsAFreshRankInRoundZero) {
  for (const auto call : {ResetsOnce::Call::kWait, ResetsOnce::Call::kSetAfterApplying}) {
    rendezvous::MemoryStore store;
    auto a = JoinAsync(store, Opts(0, 2, std::nullopt, 3s));
    ASSERT_TRUE(store.Wait({"arrived/0"}, 20s).ok());
    ResetsOnce flaky(store, call);
    auto b = JoinAsync(flaky, Opts(1, 2, std::nullopt, 3s));
    auto ra = a.get();
    auto rb = b.get();
    const bool on_wait = call == ResetsOnce::Call::kWait;
    ASSERT_TRUE(ra.ok()) << ra.status().ToString() << " (reset on wait: " << on_wait << ")";
    ASSERT_TRUE(rb.ok()) << rb.status().ToString() << " (reset on wait: " << on_wait << ")";
    EXPECT_TRUE(flaky.reset()) << "the store error was never injected";
    EXPECT_EQ(*ra, 0);
    EXPECT_EQ(*rb, 0) << "rank 1 moved the gang to round " << *rb << " (reset on wait: " << on_wait
                      << ")";
    EXPECT_FALSE(store.Get("round", 0ms).ok()) << "no recovery round was started";
  }
}

// An arrival written by a runner that stored no incarnation ("1") is another process's: a fresh
// rank finding it is still a replacement.
TEST(Rounds, AnArrivalWithoutAnIncarnationMakesAFreshRankAReplacement) {
  rendezvous::MemoryStore store;
  ASSERT_TRUE(store.Set("arrived/0", "1").ok());
  ASSERT_TRUE(store.Set("arrived/1", "1").ok());
  auto survivor = JoinAsync(store, Opts(0, 2, /*failed=*/0));
  auto replacement = JoinAsync(store, Opts(1, 2));
  auto s = survivor.get();
  auto r = replacement.get();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*s, 1);
  EXPECT_EQ(*r, 1);
}

}  // namespace
}  // namespace ringtrain::rendezvous
