// The process-wide stop request wakes every wait: a deleted pod (SIGTERM) or Ctrl-C must not
// wait out a 300 s rendezvous or connect timeout. Waits here are far longer than any test may
// take, so a wait that ignores the stop fails by the test's own timeout, not by a clock assert.
#include "common/stop.h"

#include <gtest/gtest.h>
#include <ucontext.h>

#include <csignal>
#include <cstdint>
#include <thread>
#include <vector>

#include "common/net.h"

namespace ringtrain {
namespace {

using namespace std::chrono_literals;

constexpr Duration kForever = std::chrono::hours(1);
// Only turns a waiter that never blocks into a failure instead of a hang.
constexpr Duration kBound = std::chrono::minutes(1);

class StopTest : public ::testing::Test {
 protected:
  void SetUp() override { ResetStopForTest(); }
  void TearDown() override {
    if (stopper_.joinable()) stopper_.join();
    ResetStopForTest();
  }
  // Requests a stop from another thread once the caller is blocked on the stop descriptor: it
  // has checked StopRequested() and polls, so only the wake-up can end its wait (a stop that
  // came first would pass the test without testing it).
  void StopSoon(int signal = SIGTERM) {
    const std::uint64_t seen = StopFdPollsForTest().value();
    stopper_ = std::thread([signal, seen] {
      EXPECT_TRUE(StopFdPollsForTest().AwaitAbove(seen, kBound)) << "the waiter never blocked";
      RequestStop(signal);
    });
  }
  std::thread stopper_;
};

TEST_F(StopTest, SleepWakes) {
  StopSoon();
  EXPECT_FALSE(SleepOrStop(kForever));
  EXPECT_TRUE(StopRequested());
  EXPECT_EQ(StopSignal(), SIGTERM);
}

TEST_F(StopTest, AcceptWakesWithCancelled) {
  auto listener = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  StopSoon();
  auto in = net::Accept(*listener, DeadlineAfter(kForever));
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kCancelled) << in.status().ToString();
  EXPECT_NE(in.status().message().find("SIGTERM"), std::string::npos) << in.status().message();
}

TEST_F(StopTest, ConnectRetriesWake) {
  // A port nobody listens on: the retry loop's backoff sleeps must wake too.
  auto listener = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  int port = *net::LocalPort(*listener);
  listener->Close();
  StopSoon(SIGINT);
  auto s = net::ConnectWithRetry("127.0.0.1", port, DeadlineAfter(kForever));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kCancelled) << s.status().ToString();
  EXPECT_NE(s.status().message().find("SIGINT"), std::string::npos) << s.status().message();
}

TEST_F(StopTest, RecvWakes) {
  auto listener = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  auto out = net::Connect("127.0.0.1", *net::LocalPort(*listener), DeadlineAfter(5s));
  ASSERT_TRUE(out.ok());
  StopSoon();
  char byte;
  Status s = net::RecvAll(*out, &byte, 1, DeadlineAfter(kForever));
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
}

TEST_F(StopTest, ExemptThreadStillWaitsItsOwnDeadline) {
  RequestStop(SIGTERM);
  auto listener = net::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  StopExemptScope exempt;
  EXPECT_FALSE(StopRequested());
  auto in = net::Accept(*listener, DeadlineAfter(50ms));
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kDeadlineExceeded) << in.status().ToString();
}

TEST_F(StopTest, SignalHandlerRequestsTheStop) {
  InstallStopSignalHandlers();
  ASSERT_EQ(std::raise(SIGTERM), 0);
  EXPECT_TRUE(StopRequested());
  EXPECT_EQ(StopSignal(), SIGTERM);
  EXPECT_EQ(StoppedStatus("rendezvous").ToString(),
            "CANCELLED: stopped by SIGTERM during rendezvous");
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
}

// A SIGTERM while draining is a request to stop at an agreed step boundary, not a stop.
TEST_F(StopTest, ASignalWhileDrainingOnlyAsksAndASecondOneStops) {
  InstallStopSignalHandlers();
  {
    DrainScope draining;
    ASSERT_EQ(std::raise(SIGTERM), 0);
    EXPECT_TRUE(DrainFlag().load());
    EXPECT_FALSE(StopRequested()) << "the first signal asks the gang to stop together";
    ASSERT_EQ(std::raise(SIGTERM), 0);
    EXPECT_TRUE(StopRequested()) << "a second signal stops at once";
    EXPECT_EQ(StopSignal(), SIGTERM);
  }
}

TEST_F(StopTest, EscalatingADrainStopsWithItsSignal) {
  InstallStopSignalHandlers();
  DrainScope draining;
  ASSERT_EQ(std::raise(SIGINT), 0);
  EXPECT_FALSE(StopRequested());
  EscalateDrain();
  EXPECT_TRUE(StopRequested());
  EXPECT_EQ(StopSignal(), SIGINT);
  EXPECT_NE(StoppedStatus("x").message().find("SIGINT"), std::string::npos);
}

TEST_F(StopTest, ADrainRequestNobodyActedOnStopsWhenDrainingEnds) {
  InstallStopSignalHandlers();
  {
    DrainScope draining;
    ASSERT_EQ(std::raise(SIGTERM), 0);
    EXPECT_FALSE(StopRequested());
  }
  EXPECT_TRUE(StopRequested());
}

// oneDNN's JIT gemm kernels run with the stack pointer inside a heap block. A SIGTERM that
// arrives there must not have its frame written below that pointer, over the heap: it goes to
// the alternate signal stack. Here the "heap block" is a 16 KiB stack at the top of a buffer
// whose lower 64 KiB must stay as they were; the signal is raised with the stack pointer near
// the bottom of that stack, where any signal frame (1-4 KiB, with the CPU's vector state)
// would reach below it.
constexpr std::size_t kGuardBytes = 64 * 1024;
constexpr std::size_t kForeignStackBytes = 16 * 1024;
constexpr unsigned char kUntouched = 0xA5;
ucontext_t g_test_context;
ucontext_t g_foreign_context;

void RaiseNearTheBottomOfTheStack() {
  volatile unsigned char pad[kForeignStackBytes - 1536];
  pad[0] = 1;
  pad[sizeof(pad) - 1] = 1;
  std::raise(SIGTERM);
  pad[1] = pad[0];
}

TEST_F(StopTest, ASignalOnAHeapStackLeavesTheHeapBelowItAlone) {
  InstallStopSignalHandlers();
  // Signal 0 sends nothing: this only binds raise() now, so that the dynamic linker's lazy
  // binding (which needs stack of its own) does not run on the small stack below.
  ASSERT_EQ(std::raise(0), 0);
  std::vector<unsigned char> block(kGuardBytes + kForeignStackBytes, kUntouched);
  ASSERT_EQ(::getcontext(&g_foreign_context), 0);
  g_foreign_context.uc_stack.ss_sp = block.data() + kGuardBytes;
  g_foreign_context.uc_stack.ss_size = kForeignStackBytes;
  g_foreign_context.uc_link = &g_test_context;
  ::makecontext(&g_foreign_context, RaiseNearTheBottomOfTheStack, 0);
  ASSERT_EQ(::swapcontext(&g_test_context, &g_foreign_context), 0);
  EXPECT_TRUE(StopRequested());
  std::size_t written = 0;
  for (std::size_t i = 0; i < kGuardBytes; ++i) written += block[i] != kUntouched ? 1 : 0;
  EXPECT_EQ(written, 0u) << "the signal's frame was written over the memory below the stack";
}

TEST_F(StopTest, OutsideADrainScopeASignalStopsAtOnce) {
  InstallStopSignalHandlers();
  ASSERT_EQ(std::raise(SIGTERM), 0);
  EXPECT_TRUE(StopRequested());
  EXPECT_FALSE(DrainFlag().load());
}

}  // namespace
}  // namespace ringtrain
