#include "runner/rendezvous/rendezvous.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "common/stop.h"
#include "runner/rendezvous/memory_store.h"
#include "runner/rendezvous/prefix_store.h"
#include "runner/rendezvous/tcp_store.h"

namespace ringtrain::rendezvous {
namespace {

using namespace std::chrono_literals;

std::vector<Status> JoinAsThreads(Store& store, const std::vector<int>& ranks, int world,
                                  Duration timeout) {
  std::vector<Status> out(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = JoinRendezvous(store, ranks[i], world, timeout); });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(RendezvousTest, AllRanksJoin) {
  rendezvous::MemoryStore store;
  for (const Status& s : JoinAsThreads(store, {0, 1, 2, 3}, 4, 5s)) {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

TEST(RendezvousTest, TimeoutNamesTheMissingRanks) {
  rendezvous::MemoryStore store;
  // Long enough for every present rank's thread to arrive on a loaded machine (a sanitizer run
  // beside others): rank 0 names the ranks missing at its deadline.
  for (const Status& s : JoinAsThreads(store, {0, 1}, 4, 2s)) {
    ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_TRUE(s.retryable());
    EXPECT_NE(s.message().find("waiting for ranks 2, 3 (world size 4)"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("after 2s"), std::string::npos) << s.message();
  }
}

TEST(RendezvousTest, OneMissingRankAndLongRuns) {
  rendezvous::MemoryStore store;
  auto one = JoinAsThreads(store, {0, 2}, 3, 1s);
  EXPECT_NE(one[0].message().find("waiting for rank 1 (world size 3)"), std::string::npos)
      << one[0].message();

  rendezvous::MemoryStore big;
  auto many = JoinAsThreads(big, {0, 5}, 10, 1s);
  EXPECT_NE(many[0].message().find("waiting for ranks 1-4, 6-9 (world size 10)"), std::string::npos)
      << many[0].message();
}

TEST(RendezvousTest, BadRankIsInvalid) {
  rendezvous::MemoryStore store;
  EXPECT_EQ(JoinRendezvous(store, 4, 4, 1s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(JoinRendezvous(store, -1, 4, 1s).code(), StatusCode::kInvalidArgument);
}

// A deleted pod (SIGTERM) must not wait out a 300 s rendezvous for a rank that never comes.
TEST(RendezvousTest, StopRequestEndsTheWait) {
  ResetStopForTest();
  auto server = TcpStoreServer::Create("127.0.0.1", 0, "tok");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto client = TcpStoreClient::Create({"127.0.0.1", (*server)->port(), "tok", 5s, 5s});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto watcher = TcpStoreClient::Create({"127.0.0.1", (*server)->port(), "tok", 5s, 5s});
  ASSERT_TRUE(watcher.ok()) << watcher.status().ToString();
  std::thread stopper([&] {
    // Once rank 0 has arrived (its next step is the wait for rank 1), not after a guessed delay.
    EXPECT_TRUE((*watcher)->Get("arrived/0", 60s).ok());
    RequestStop(15);
  });
  Status s = JoinRendezvous(**client, 0, 2, std::chrono::hours(1));
  stopper.join();
  ResetStopForTest();
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  EXPECT_NE(s.message().find("SIGTERM"), std::string::npos) << s.message();
}

TEST(RendezvousTest, OverTcpStoreWithAttemptPrefixes) {
  auto server = TcpStoreServer::Create("127.0.0.1", 0, "tok");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  constexpr int kWorld = 4;
  // Attempt 0 leaves all its keys behind; attempt 1 must not be fooled by them.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<Status> out(kWorld);
    std::vector<std::thread> threads;
    int joining = attempt == 0 ? kWorld : 2;
    for (int r = 0; r < joining; ++r) {
      threads.emplace_back([&, r] {
        auto client = TcpStoreClient::Create({"127.0.0.1", (*server)->port(), "tok", 5s, 5s});
        if (!client.ok()) {
          out[r] = client.status();
          return;
        }
        PrefixStore store(**client, "job/" + std::to_string(attempt) + "/");
        out[r] = JoinRendezvous(store, r, kWorld, attempt == 0 ? 5s : 2s);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < joining; ++r) {
      if (attempt == 0) {
        EXPECT_TRUE(out[r].ok()) << out[r].ToString();
      } else {
        EXPECT_NE(out[r].message().find("ranks 2, 3"), std::string::npos) << out[r].ToString();
      }
    }
  }
}

}  // namespace
}  // namespace ringtrain::rendezvous
