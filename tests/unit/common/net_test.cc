// Every blocking socket call ends at its deadline with an error naming what it waited for, and a
// peer that goes away is an error, not a hang. All on loopback; no test asserts how long a call
// took, only that it returned with the right status.
#include "common/net.h"

#include <gtest/gtest.h>

#include <vector>

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

}  // namespace
}  // namespace ringtrain::net
