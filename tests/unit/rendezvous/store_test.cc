// Store semantics that every implementation must share, run against MemoryStore and the TCP
// store alike so the two cannot drift apart.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "runner/rendezvous/memory_store.h"
#include "runner/rendezvous/tcp_store.h"

namespace ringtrain::rendezvous {
namespace {

using namespace std::chrono_literals;

// Owns whatever a store kind needs (a server for TCP) and hands out clients.
class StoreKind {
 public:
  virtual ~StoreKind() = default;
  virtual std::unique_ptr<Store> NewClient() = 0;
  // Returns once `n` Get/Wait calls are blocked in the store, true; false when this kind
  // cannot observe that (the TCP server does not say which requests it has parked).
  virtual bool AwaitBlockedCalls(int n) = 0;
};

class InMemoryKind final : public StoreKind {
 public:
  std::unique_ptr<Store> NewClient() override {
    // Every client of one in-memory store is the store itself.
    struct Alias final : Store {
      explicit Alias(Store& s) : s(s) {}
      Status Set(const std::string& k, const std::string& v) override { return s.Set(k, v); }
      StatusOr<std::string> Get(const std::string& k, Duration t) override { return s.Get(k, t); }
      StatusOr<std::int64_t> Add(const std::string& k, std::int64_t d) override {
        return s.Add(k, d);
      }
      StatusOr<std::string> CompareSet(const std::string& k, const std::string& e,
                                       const std::string& d) override {
        return s.CompareSet(k, e, d);
      }
      Status Wait(const std::vector<std::string>& k, Duration t) override { return s.Wait(k, t); }
      Store& s;
    };
    return std::make_unique<Alias>(store_);
  }
  bool AwaitBlockedCalls(int n) override {
    while (store_.waiters() != n) std::this_thread::yield();
    return true;
  }

 private:
  rendezvous::MemoryStore store_;
};

class TcpKind final : public StoreKind {
 public:
  TcpKind() {
    auto server = TcpStoreServer::Create("127.0.0.1", 0, "job-token");
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  std::unique_ptr<Store> NewClient() override {
    auto c = TcpStoreClient::Create({"127.0.0.1", server_->port(), "job-token", 5s, 5s});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(c).value();
  }
  bool AwaitBlockedCalls(int /*n*/) override { return false; }

 private:
  std::unique_ptr<TcpStoreServer> server_;
};

class StoreTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "tcp") {
      kind_ = std::make_unique<TcpKind>();
    } else {
      kind_ = std::make_unique<InMemoryKind>();
    }
    store_ = kind_->NewClient();
  }
  std::unique_ptr<StoreKind> kind_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGet) {
  ASSERT_TRUE(store_->Set("k", "v").ok());
  auto got = store_->Get("k", 1s);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "v");
  ASSERT_TRUE(store_->Set("k", std::string("\0bin\xff", 5)).ok());
  EXPECT_EQ(*store_->Get("k", 1s), std::string("\0bin\xff", 5));
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  auto got = store_->Get("never/set", 50ms);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("never/set"), std::string::npos) << got.status().message();
}

// The Set is ordered after the Get has started (and, where the kind can see it, after the Get
// is blocked): a Get that did not block would return DeadlineExceeded, not the value.
TEST_P(StoreTest, GetBlocksUntilAnotherClientSets) {
  auto other = kind_->NewClient();
  std::atomic<bool> started{false};
  std::atomic<bool> returned{false};
  std::optional<StatusOr<std::string>> got;
  std::thread getter([&] {
    started = true;
    got = store_->Get("late", 60s);
    returned = true;
  });
  while (!started) std::this_thread::yield();
  if (kind_->AwaitBlockedCalls(1)) {
    EXPECT_FALSE(returned) << "Get returned before any Set";
  }
  ASSERT_TRUE(other->Set("late", "here").ok());
  getter.join();
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->status().ToString();
  EXPECT_EQ(**got, "here");
}

TEST_P(StoreTest, AddStartsAtZeroAndIsAtomic) {
  auto first = store_->Add("n", 5);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 5);
  EXPECT_EQ(*store_->Add("n", -2), 3);
  EXPECT_EQ(*store_->Get("n", 1s), "3");

  constexpr int kThreads = 4, kAdds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto client = kind_->NewClient();
      for (int i = 0; i < kAdds; ++i) EXPECT_TRUE(client->Add("counter", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*store_->Add("counter", 0), kThreads * kAdds);
}

TEST_P(StoreTest, AddOnNonIntegerIsInvalid) {
  ASSERT_TRUE(store_->Set("s", "abc").ok());
  auto r = store_->Add("s", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, CompareSetOnlyWhenExpected) {
  // Missing key matches "".
  EXPECT_EQ(*store_->CompareSet("c", "", "first"), "first");
  // Mismatch leaves the value and returns it.
  EXPECT_EQ(*store_->CompareSet("c", "", "second"), "first");
  EXPECT_EQ(*store_->CompareSet("c", "nope", "second"), "first");
  EXPECT_EQ(*store_->CompareSet("c", "first", "second"), "second");
  EXPECT_EQ(*store_->Get("c", 1s), "second");
  // Missing key with a non-empty expectation stays missing.
  EXPECT_EQ(*store_->CompareSet("d", "x", "y"), "");
  EXPECT_FALSE(store_->Get("d", 10ms).ok());
  EXPECT_EQ(*store_->CompareSetWithin("e", "", "z", 1s), "z");
}

TEST_P(StoreTest, WaitReturnsOnceAllKeysExist) {
  EXPECT_TRUE(store_->Wait({}, 10ms).ok());
  auto other = kind_->NewClient();
  ASSERT_TRUE(other->Set("a", "1").ok());
  std::atomic<bool> started{false};
  std::optional<Status> waited;
  std::thread waiter([&] {
    started = true;
    waited = store_->Wait({"a", "b"}, 60s);
  });
  while (!started) std::this_thread::yield();
  (void)kind_->AwaitBlockedCalls(1);
  ASSERT_TRUE(other->Set("b", "1").ok());
  waiter.join();
  ASSERT_TRUE(waited.has_value());
  EXPECT_TRUE(waited->ok()) << waited->ToString();
}

TEST_P(StoreTest, WaitTimeoutListsMissingKeys) {
  ASSERT_TRUE(store_->Set("present", "1").ok());
  Status s = store_->Wait({"present", "gone/1", "gone/2"}, 50ms);
  ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("gone/1, gone/2"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("present"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Kinds, StoreTest, ::testing::Values("memory", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ringtrain::rendezvous
