// Every blocking socket call ends at its deadline with an error naming what it waited for, and a
// peer that goes away is an error, not a hang. All on loopback; no test asserts how long a call
// took, only that it returned with the right status.
#include "common/net.h"

#include <gtest/gtest.h>
#include <netdb.h>

#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>
#include <vector>

#include "common/stop.h"

namespace ringtrain::net {
namespace {

SteadyTime Soon() { return DeadlineAfter(Duration(100)); }

struct Pair {
  Socket listener, client, server;
};

Pair Connected() {
  Pair p;
  auto l = Listen("127.0.0.1", 0);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  p.listener = std::move(l).value();
  const int port = *LocalPort(p.listener);
  auto c = Connect("127.0.0.1", port, DeadlineAfter(std::chrono::seconds(10)));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  p.client = std::move(c).value();
  auto s = Accept(p.listener, DeadlineAfter(std::chrono::seconds(10)));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  p.server = std::move(s).value();
  return p;
}

TEST(Net, AcceptWithNoClientEndsAtItsDeadline) {
  auto l = Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  auto s = Accept(*l, Soon());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded) << s.status().ToString();
}

TEST(Net, RecvFromASilentPeerEndsAtItsDeadline) {
  Pair p = Connected();
  char buf[16];
  Status s = RecvAll(p.client, buf, sizeof(buf), Soon());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  auto some = RecvSome(p.client, buf, sizeof(buf), Soon());
  EXPECT_EQ(some.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(Net, SendToAPeerThatNeverReadsEndsAtItsDeadline) {
  Pair p = Connected();
  std::vector<char> big(64 << 20);  // more than both socket buffers hold
  Status s = SendAll(p.client, big.data(), big.size(), Soon());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
}

TEST(Net, APeerThatClosesIsAnErrorNotAHang) {
  Pair p = Connected();
  p.server.Close();
  char buf[16];
  Status s = RecvAll(p.client, buf, sizeof(buf), DeadlineAfter(std::chrono::seconds(30)));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_TRUE(s.retryable()) << s.ToString();  // a lost peer: the gang restarts
}

TEST(Net, ConnectWithNothingListeningFailsAndRetryNamesTheAttempts) {
  int port = 0;
  {
    auto l = Listen("127.0.0.1", 0);
    ASSERT_TRUE(l.ok());
    port = *LocalPort(*l);
  }  // closed: nothing listens there now
  auto once = Connect("127.0.0.1", port, DeadlineAfter(std::chrono::seconds(10)));
  ASSERT_FALSE(once.ok());
  EXPECT_TRUE(once.status().retryable()) << once.status().ToString();
  auto retried = ConnectWithRetry("127.0.0.1", port, DeadlineAfter(Duration(300)));
  ASSERT_FALSE(retried.ok());
  EXPECT_NE(retried.status().message().find("attempt"), std::string::npos)
      << retried.status().ToString();
}

TEST(Net, AnAddressInUseSaysSo) {
  auto a = Listen("127.0.0.1", 0);
  ASSERT_TRUE(a.ok());
  auto b = Listen("127.0.0.1", *LocalPort(*a));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("already in use"), std::string::npos)
      << b.status().ToString();
}

// A resolver that hangs like getaddrinfo with the cluster's DNS down, until released.
struct HangingResolver {
  static std::mutex mu;
  static std::condition_variable cv;
  static bool released;
  static int Resolve(const char*, const char*, const addrinfo*, addrinfo**) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [] { return released; });
    return EAI_AGAIN;
  }
  HangingResolver() {
    {
      std::lock_guard<std::mutex> lock(mu);
      released = false;
    }
    previous = SetResolverForTest(&Resolve);
  }
  ~HangingResolver() {  // the lookups given up on end now, on their own threads
    {
      std::lock_guard<std::mutex> lock(mu);
      released = true;
    }
    cv.notify_all();
    SetResolverForTest(previous);
  }
  Resolver previous = nullptr;
};
std::mutex HangingResolver::mu;
std::condition_variable HangingResolver::cv;
bool HangingResolver::released = false;

TEST(Net, ANameLookupThatHangsEndsAtTheDeadline) {
  HangingResolver dns;
  auto c = Connect("rank-0.job.default.svc", 29500, Soon());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().ToString();
  EXPECT_NE(c.status().message().find("resolve rank-0.job.default.svc"), std::string::npos)
      << c.status().ToString();
  // An address needs no lookup.
  auto l = Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(Connect("127.0.0.1", *LocalPort(*l), DeadlineAfter(std::chrono::seconds(10))).ok());
}

TEST(Net, ANameLookupThatHangsWakesOnAStop) {
  ResetStopForTest();
  HangingResolver dns;
  // The stop comes once the lookup's waiter is blocked on the stop descriptor.
  const std::uint64_t seen = StopFdPollsForTest().value();
  std::thread stopper([seen] {
    EXPECT_TRUE(StopFdPollsForTest().AwaitAbove(seen, std::chrono::seconds(60)));
    RequestStop(SIGTERM);
  });
  auto c = Connect("rank-0.job.default.svc", 29500, DeadlineAfter(std::chrono::hours(1)));
  stopper.join();
  ResetStopForTest();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kCancelled) << c.status().ToString();
}

TEST(Net, ANameResolvesThroughItsLookupThread) {
  auto l = Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  auto c = Connect("localhost", *LocalPort(*l), DeadlineAfter(std::chrono::seconds(10)));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  // A name the resolver does not know (answered here, not by whatever DNS the machine has).
  const Resolver real = SetResolverForTest(
      [](const char*, const char*, const addrinfo*, addrinfo**) { return EAI_NONAME; });
  auto none = Connect("no-such-host.invalid", 1, DeadlineAfter(std::chrono::seconds(30)));
  SetResolverForTest(real);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable) << none.status().ToString();
  EXPECT_NE(none.status().message().find("resolve no-such-host.invalid"), std::string::npos);
}

}  // namespace
}  // namespace ringtrain::net
