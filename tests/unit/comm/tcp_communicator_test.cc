// Correctness of the TCP ring collectives over world sizes × element counts, with ranks as
// threads on loopback.
#include "runner/comm/tcp/tcp_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include "runner/rendezvous/memory_store.h"
#include "runner/rendezvous/prefix_store.h"
#include "runner/rendezvous/tcp_store.h"
#include "tests/unit/comm/gang.h"

namespace ringtrain::comm {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kLarge = (std::size_t{1} << 22) + 3;

std::vector<float> RandomData(std::size_t count, int rank) {
  std::mt19937 rng(1234 + rank);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Checks every rank's result against a float64 reference; reports the first few mismatches
// only, so a broken 4M-element case does not print 4M lines.
void ExpectMatchesReference(const std::vector<std::vector<float>>& inputs,
                            const std::vector<std::vector<float>>& outputs, double scale) {
  const std::size_t n = inputs.size();
  const std::size_t count = inputs.empty() ? 0 : inputs[0].size();
  std::vector<double> ref(count, 0.0);
  for (const auto& in : inputs) {
    for (std::size_t i = 0; i < count; ++i) ref[i] += in[i];
  }
  for (std::size_t r = 0; r < n; ++r) {
    int reported = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double want = ref[i] * scale;
      double tol = 1e-5 * static_cast<double>(n) * std::max(1.0, std::abs(want));
      if (std::abs(outputs[r][i] - want) > tol && reported++ < 5) {
        ADD_FAILURE() << "rank " << r << " element " << i << ": got " << outputs[r][i] << ", want "
                      << want;
      }
    }
  }
}

void RunAllReduce(std::vector<std::unique_ptr<TcpCommunicator>>& gang, std::size_t count,
                  ReduceOp op) {
  const int n = static_cast<int>(gang.size());
  std::vector<std::vector<float>> inputs(n), outputs(n);
  for (int r = 0; r < n; ++r) outputs[r] = inputs[r] = RandomData(count, r);
  auto statuses =
      RunRanks(n, [&](int r) { return gang[r]->AllReduce(outputs[r].data(), count, op); });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].ok()) << r << ": " << statuses[r].ToString();
  ExpectMatchesReference(inputs, outputs, op == ReduceOp::kAverage ? 1.0 / n : 1.0);
}

class AllReduceTest : public ::testing::TestWithParam<std::tuple<int, std::size_t>> {};

TEST_P(AllReduceTest, SumMatchesFloat64Reference) {
  auto [n, count] = GetParam();
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, n);
  ASSERT_EQ(gang.size(), static_cast<std::size_t>(n));
  for (const auto& c : gang) ASSERT_NE(c, nullptr);
  RunAllReduce(gang, count, ReduceOp::kSum);
}

std::vector<std::tuple<int, std::size_t>> AllReduceCases() {
  std::vector<std::tuple<int, std::size_t>> cases;
  for (int n = 1; n <= 8; ++n) {
    std::vector<std::size_t> counts = {0, 1, static_cast<std::size_t>(n - 1),
                                       static_cast<std::size_t>(n), 1000};
    if (n == 2 || n == 3 || n == 8) counts.push_back(kLarge);
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    for (std::size_t c : counts) cases.emplace_back(n, c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(WorldByCount, AllReduceTest, ::testing::ValuesIn(AllReduceCases()),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_count" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(TcpCommunicatorTest, AverageDividesByWorldSize) {
  for (int n : {1, 3, 4}) {
    rendezvous::MemoryStore store;
    auto gang = MakeGang(store, n);
    RunAllReduce(gang, 1001, ReduceOp::kAverage);
  }
}

TEST(TcpCommunicatorTest, TinyChunksSplitFloatsAcrossReads) {
  // Chunks of 8 bytes (10 rounds down) make every float straddle receive boundaries often.
  rendezvous::MemoryStore store;
  TcpCommOptions o;
  o.chunk_bytes = 10;
  auto gang = MakeGang(store, 3, o);
  RunAllReduce(gang, 4099, ReduceOp::kSum);
  RunAllReduce(gang, 4099, ReduceOp::kAverage);
}

TEST(TcpCommunicatorTest, SmallSocketBuffersStillReduceExactly) {
  // 64 KiB kernel buffers under 256 KiB chunks: every send and receive is partial, and both
  // directions must keep streaming without a deadlock.
  rendezvous::MemoryStore store;
  TcpCommOptions o;
  o.socket_buffer_bytes = 64 * 1024;
  auto gang = MakeGang(store, 3, o);
  RunAllReduce(gang, 1 << 20, ReduceOp::kSum);
  RunAllReduce(gang, 4099, ReduceOp::kAverage);
}

TEST(TcpCommunicatorTest, ManyCollectivesInSequenceStayAligned) {
  constexpr int n = 4;
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, n);
  for (std::size_t count : {7u, 1u, 0u, 100000u, 3u, 65537u}) {
    RunAllReduce(gang, count, ReduceOp::kSum);
    auto s = RunRanks(n, [&](int r) { return gang[r]->Barrier(); });
    for (const auto& st : s) ASSERT_TRUE(st.ok()) << st.ToString();
  }
}

TEST(TcpCommunicatorTest, BroadcastFromEveryKindOfRoot) {
  for (int n : {1, 2, 3, 5}) {
    rendezvous::MemoryStore store;
    auto gang = MakeGang(store, n);
    for (int root : {0, n / 2, n - 1}) {
      for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{1000003}}) {
        std::vector<std::vector<char>> bufs(n, std::vector<char>(bytes, 0));
        std::mt19937 rng(static_cast<unsigned>(bytes + root));
        for (auto& b : bufs[root]) b = static_cast<char>(rng());
        auto s =
            RunRanks(n, [&](int r) { return gang[r]->Broadcast(bufs[r].data(), bytes, root); });
        for (int r = 0; r < n; ++r) {
          ASSERT_TRUE(s[r].ok()) << s[r].ToString();
          EXPECT_EQ(bufs[r], bufs[root]) << "world " << n << " root " << root << " rank " << r;
        }
      }
    }
    EXPECT_EQ(gang[0]->Broadcast(nullptr, 0, n).code(), StatusCode::kInvalidArgument);
  }
}

TEST(TcpCommunicatorTest, BarrierWaitsForEveryRank) {
  constexpr int n = 5;
  rendezvous::MemoryStore store;
  auto gang = MakeGang(store, n);
  std::atomic<int> entered{0};
  for (int round = 0; round < 3; ++round) {
    auto s = RunRanks(n, [&](int r) {
      // Ranks enter one after another (rank r once r others of this round have), so the last
      // rank to enter is the one every other rank's barrier must wait for.
      while (entered.load() < n * round + r) std::this_thread::yield();
      entered.fetch_add(1);
      Status st = gang[r]->Barrier();
      // Nobody leaves round k before everybody entered it.
      EXPECT_GE(entered.load(), n * (round + 1)) << "rank " << r;
      return st;
    });
    for (const auto& st : s) ASSERT_TRUE(st.ok()) << st.ToString();
    // Keep the next round's increments from racing this round's checks.
    auto again = RunRanks(n, [&](int r) { return gang[r]->Barrier(); });
    for (const auto& st : again) ASSERT_TRUE(st.ok()) << st.ToString();
  }
}

TEST(TcpCommunicatorTest, AllGatherIsRankMajor) {
  for (int n : {1, 2, 3, 5}) {
    rendezvous::MemoryStore store;
    auto gang = MakeGang(store, n);
    for (std::size_t bytes : {std::size_t{1}, std::size_t{7}, std::size_t{100001}}) {
      std::vector<std::vector<char>> in(n), out(n, std::vector<char>(n * bytes));
      for (int r = 0; r < n; ++r) {
        in[r].resize(bytes);
        for (std::size_t i = 0; i < bytes; ++i) in[r][i] = static_cast<char>(r * 31 + i);
      }
      auto s = RunRanks(
          n, [&](int r) { return gang[r]->AllGather(in[r].data(), bytes, out[r].data()); });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(s[r].ok()) << s[r].ToString();
        for (int src = 0; src < n; ++src) {
          ASSERT_EQ(std::memcmp(out[r].data() + src * bytes, in[src].data(), bytes), 0)
              << "world " << n << " rank " << r << " block " << src;
        }
      }
    }
    // In place: the input already sits in this rank's block.
    std::vector<std::vector<int>> buf(n, std::vector<int>(n, -1));
    for (int r = 0; r < n; ++r) buf[r][r] = r * 10;
    auto s = RunRanks(
        n, [&](int r) { return gang[r]->AllGather(&buf[r][r], sizeof(int), buf[r].data()); });
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(s[r].ok());
      for (int src = 0; src < n; ++src) EXPECT_EQ(buf[r][src], src * 10);
    }
  }
}

TEST(TcpCommunicatorTest, WorksOverTheTcpStore) {
  constexpr int n = 4;
  auto server = rendezvous::TcpStoreServer::Create("127.0.0.1", 0, "tok");
  ASSERT_TRUE(server.ok());
  std::vector<std::unique_ptr<rendezvous::TcpStoreClient>> clients;
  std::vector<std::unique_ptr<rendezvous::PrefixStore>> stores;
  std::vector<std::unique_ptr<TcpCommunicator>> gang(n);
  for (int r = 0; r < n; ++r) {
    auto c = rendezvous::TcpStoreClient::Create({"127.0.0.1", (*server)->port(), "tok", 5s, 5s});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    clients.push_back(std::move(c).value());
    stores.push_back(std::make_unique<rendezvous::PrefixStore>(*clients.back(), "job/0/"));
  }
  auto s = RunRanks(n, [&](int r) -> Status {
    TcpCommOptions o;
    o.rank = r;
    o.size = n;
    o.connect_timeout = 20s;
    ASSIGN_OR_RETURN(gang[r], TcpCommunicator::Create(*stores[r], o));
    return Status::Ok();
  });
  for (const auto& st : s) ASSERT_TRUE(st.ok()) << st.ToString();
  RunAllReduce(gang, 300001, ReduceOp::kSum);
}

TEST(TcpCommunicatorTest, RankThatFinishesFirstMayExitAtOnce) {
  // The last rank to get its result must not mistake a neighbour that is already done and
  // gone for a lost peer.
  for (int n : {2, 3, 4}) {
    for (int round = 0; round < 3; ++round) {
      rendezvous::MemoryStore store;
      auto gang = MakeGang(store, n);
      std::vector<std::vector<float>> bufs(n, std::vector<float>(1 << 18, 1.0f));
      auto s = RunRanks(n, [&](int r) {
        Status st = gang[r]->AllReduce(bufs[r].data(), bufs[r].size(), ReduceOp::kSum);
        gang[r].reset();
        return st;
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(s[r].ok()) << "world " << n << " rank " << r << ": " << s[r].ToString();
        ASSERT_EQ(bufs[r][12345], static_cast<float>(n));
      }
    }
  }
}

TEST(TcpCommunicatorTest, BadOptionsAreInvalid) {
  rendezvous::MemoryStore store;
  TcpCommOptions o;
  o.rank = 2;
  o.size = 2;
  EXPECT_EQ(TcpCommunicator::Create(store, o).status().code(), StatusCode::kInvalidArgument);
  o.rank = 0;
  o.chunk_bytes = 2;
  EXPECT_EQ(TcpCommunicator::Create(store, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringtrain::comm
