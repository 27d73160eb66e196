// Work one rank does while the others wait (rank 0's checkpoint read or write) may outlast the
// collective timeout without failing anyone, while a root that dies, or whose work hangs past its
// own timeout, still fails every rank. Assertions are on statuses, never on wall-clock time.
#include "runner/comm/root_work.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <latch>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "common/stop.h"
#include "runner/rendezvous/memory_store.h"
#include "tests/unit/comm/gang.h"

namespace ringtrain::comm {
namespace {

using namespace std::chrono_literals;

// Long enough that a thread descheduled on a loaded machine (a sanitizer run beside others) does
// not miss a heartbeat by it; the heartbeats themselves are set short.
constexpr Duration kCollectiveTimeout = 2s;

TcpCommOptions Options() {
  TcpCommOptions o;
  o.collective_timeout = kCollectiveTimeout;
  return o;
}

RootWorkOptions Work(Duration timeout = 60s) {
  RootWorkOptions o;
  o.heartbeat = Duration{50};
  o.timeout = timeout;
  o.what = "checkpoint write at step 7";
  o.timeout_name = "RINGTRAIN_CHECKPOINT_TIMEOUT_SECONDS";
  return o;
}

// Blocks until Open(); shared, so that a work left behind by a timeout can still be released.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
  }
};

TEST(RootWorkTest, HeartbeatsStayWellUnderTheCollectiveTimeout) {
  EXPECT_EQ(HeartbeatFor(60s), Duration{1000});
  EXPECT_EQ(HeartbeatFor(2s), Duration{500});
  EXPECT_EQ(HeartbeatFor(Duration{2}), Duration{1});
}

TEST(RootWorkTest, WorkLongerThanTheCollectiveTimeoutFailsNoRank) {
  constexpr int n = 3;
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, n, Options());
  std::atomic<int> calls{0};
  auto s = RunRanks(n, [&](int r) -> Status {
    RETURN_IF_ERROR(WhileRootWorks(
        *gang[r],
        [&] {
          ++calls;
          std::this_thread::sleep_for(5s);  // a slow volume: longer than the collective timeout
          return Status::Ok();
        },
        Work()));
    // The gang is still whole: a collective after the work succeeds.
    float one = 1.0f;
    RETURN_IF_ERROR(gang[r]->AllReduce(&one, 1, ReduceOp::kSum));
    return one == static_cast<float>(n) ? Status::Ok() : Internal("wrong sum");
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(s[r].ok()) << "rank " << r << ": " << s[r].ToString();
  EXPECT_EQ(calls.load(), 1) << "only the root works";
}

TEST(RootWorkTest, TheWorksErrorIsTheRootsAlone) {
  constexpr int n = 2;
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, n, Options());
  auto s = RunRanks(n, [&](int r) -> Status {
    return WhileRootWorks(
        *gang[r], [] { return Unavailable("write /ckpt/x: Input/output error"); }, Work());
  });
  EXPECT_EQ(s[0].code(), StatusCode::kUnavailable) << s[0].ToString();
  EXPECT_NE(s[0].message().find("Input/output error"), std::string::npos);
  EXPECT_TRUE(s[1].ok()) << s[1].ToString();
}

TEST(RootWorkTest, WorkPastItsTimeoutFailsTheRootAndThenEveryPeer) {
  constexpr int n = 3;
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, n, Options());
  auto gate = std::make_shared<Gate>();
  auto s = RunRanks(n, [&](int r) -> Status {
    return WhileRootWorks(
        *gang[r],
        [gate] {
          gate->Wait();  // a write into a volume that hangs
          return Status::Ok();
        },
        Work(/*timeout=*/Duration{500}));
  });
  // The root gives up (retryable, and not taken for a lost peer); the others, no longer hearing
  // from it, fail within the collective timeout.
  EXPECT_EQ(s[0].code(), StatusCode::kResourceExhausted) << s[0].ToString();
  EXPECT_TRUE(s[0].retryable());
  EXPECT_EQ(s[0].message().rfind("checkpoint write at step 7: not done after 500ms "
                                 "(RINGTRAIN_CHECKPOINT_TIMEOUT_SECONDS); giving up",
                                 0),
            0u)
      << s[0].message();
  for (int r = 1; r < n; ++r) {
    EXPECT_FALSE(s[r].ok()) << "rank " << r;
    EXPECT_TRUE(s[r].retryable()) << s[r].ToString();
    EXPECT_EQ(s[r].message().rfind("waiting for rank 0's checkpoint write at step 7: ", 0), 0u)
        << s[r].message();
  }
  gate->Open();  // the work left behind ends
}

TEST(RootWorkTest, ARootThatDiesFailsThePeersAndStillFinishesItsWork) {
  constexpr int n = 3;
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, n, Options());
  std::atomic<bool> finished{false};
  std::latch working(1);
  Gate gate;
  std::thread killer([&] {
    working.wait();
    gang[0]->Abort();  // the root's communicator dies while it writes
    gate.Open();
  });
  auto s = RunRanks(n, [&](int r) -> Status {
    return WhileRootWorks(
        *gang[r],
        [&] {
          working.count_down();
          gate.Wait();
          finished = true;
          return Status::Ok();
        },
        Work());
  });
  killer.join();
  EXPECT_TRUE(finished.load()) << "the root waits for its work (a write that completes is kept)";
  EXPECT_FALSE(s[0].ok()) << "the root reports the broken gang";
  for (int r = 1; r < n; ++r) {
    EXPECT_FALSE(s[r].ok()) << "rank " << r;
    EXPECT_TRUE(s[r].retryable()) << s[r].ToString();
  }
}

// A stop request (SIGTERM) ends the heartbeats on every rank, and the root's wait for its work
// after the stop grace: nothing waits out a long checkpoint write.
TEST(RootWorkTest, AStopEndsTheWaitOnEveryRank) {
  constexpr int n = 2;
  ResetStopForTest();
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, n, Options());
  auto gate = std::make_shared<Gate>();
  std::latch working(1);
  std::thread stopper([&] {
    working.wait();
    RequestStop(15);
  });
  RootWorkOptions o = Work();
  o.stop_grace = Duration{200};
  auto s = RunRanks(n, [&](int r) -> Status {
    return WhileRootWorks(
        *gang[r],
        [gate, &working] {
          working.count_down();
          gate->Wait();  // a write that would take an hour
          return Status::Ok();
        },
        o);
  });
  stopper.join();
  ResetStopForTest();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(s[r].code(), StatusCode::kCancelled) << "rank " << r << ": " << s[r].ToString();
    EXPECT_NE(s[r].message().find("SIGTERM"), std::string::npos) << s[r].message();
  }
  gate->Open();
}

// Rank 0 alone (its peers gone), asked to stop while it recovers in place: it waits for its
// checkpoint write past the stop grace, a stop being what the write is for; past its timeout it
// gives up as WhileRootWorks does; a further SIGTERM ends the wait at once.
TEST(RootWorkTest, WorkAloneOutlastsTheStopUntilItsTimeoutOrASecondSignal) {
  ResetStopForTest();
  RequestStop(SIGTERM);
  RootWorkOptions o = Work();
  o.stop_grace = Duration{1};
  EXPECT_TRUE(WorkAlone(
                  [] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(100));
                    return Status::Ok();
                  },
                  o)
                  .ok())
      << "the work was cut short by the stop it runs for";
  EXPECT_EQ(WorkAlone([] { return Unavailable("EIO"); }, o).ToString(), "UNAVAILABLE: EIO");

  auto gate = std::make_shared<Gate>();
  Status s = WorkAlone(
      [gate] {
        gate->Wait();
        return Status::Ok();
      },
      Work(/*timeout=*/Duration{200}));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.message(),
            "checkpoint write at step 7: not done after 200ms "
            "(RINGTRAIN_CHECKPOINT_TIMEOUT_SECONDS); giving up");

  InstallStopSignalHandlers();
  std::latch working(1);
  std::thread again([&] {
    working.wait();
    ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);  // the kubelet's, or Ctrl-C twice
  });
  s = WorkAlone(
      [gate, &working] {
        working.count_down();
        gate->Wait();  // a write that would take an hour
        return Status::Ok();
      },
      Work());
  again.join();
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  ResetStopForTest();
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_EQ(s.message(), "checkpoint write at step 7: not done; asked to stop again, giving up");
  gate->Open();
}

// Rank 0 alone and not stopped (its in-place recovery failed: no round within the timeout)
// saves the state it kept: the first SIGTERM during the write (the gang restart deleting its
// pod, Ctrl-C) asks it to stop, and the write comes first, as it does for a stop requested
// before it; it ended the wait at once, and the state was not saved. A second signal ends it.
TEST(RootWorkTest, WorkAloneWithoutAStopOutlastsTheFirstSignalNotASecond) {
  ResetStopForTest();
  InstallStopSignalHandlers();
  Status s = WorkAlone(
      [] {
        if (::kill(::getpid(), SIGTERM) != 0) return Internal("kill");
        for (int i = 0; i < 10000 && StopSignalCount() < 1; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        // Time for the wait to notice the signal (it looks every 50 ms), were it to end there.
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        return Status::Ok();
      },
      Work());
  EXPECT_TRUE(s.ok()) << "the signal that asks the rank to stop cut its work short: "
                      << s.ToString();
  EXPECT_EQ(StopSignalCount(), 1);
  EXPECT_TRUE(StopFlag().load());

  auto gate = std::make_shared<Gate>();
  std::latch working(1);
  std::thread again([&] {
    working.wait();
    ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);  // the second
  });
  s = WorkAlone(
      [gate, &working] {
        working.count_down();
        gate->Wait();
        return Status::Ok();
      },
      Work());
  again.join();
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  ResetStopForTest();
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  gate->Open();
}

// An exception from the work is its error, not a terminated process.
TEST(RootWorkTest, AnExceptionFromTheWorkIsItsError) {
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, 1, Options());
  const Status s = WhileRootWorks(
      *gang[0], []() -> Status { throw std::bad_alloc(); }, Work());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("out of memory"), std::string::npos) << s.message();
}

TEST(RootWorkTest, AWorldOfOneJustWorks) {
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, 1, Options());
  bool ran = false;
  EXPECT_TRUE(WhileRootWorks(
                  *gang[0],
                  [&] {
                    ran = true;
                    return Status::Ok();
                  },
                  Work())
                  .ok());
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace ringtrain::comm
