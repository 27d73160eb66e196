// MemoryStore: the in-process store of a world of one and of the tests that run ranks as
// threads. Blocking is proved with its waiter count, never with sleeps.
#include "runner/rendezvous/memory_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/stop.h"

namespace ringtrain::rendezvous {
namespace {

using namespace std::chrono_literals;

// A generous bound for calls that a Set or a stop must end first: reaching it fails the test.
constexpr Duration kLong = std::chrono::minutes(5);

// Returns once `n` Get/Wait calls are blocked in `store`.
void AwaitWaiters(const MemoryStore& store, int n) {
  while (store.waiters() != n) std::this_thread::yield();
}

TEST(MemoryStoreTest, GetBlocksUntilSet) {
  MemoryStore store;
  std::optional<StatusOr<std::string>> got;
  std::thread getter([&] { got = store.Get("late", kLong); });
  AwaitWaiters(store, 1);  // the Get is inside its wait: the key is not there yet
  ASSERT_TRUE(store.Set("late", "here").ok());
  getter.join();
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->status().ToString();
  EXPECT_EQ(**got, "here");
  EXPECT_EQ(store.waiters(), 0);
}

TEST(MemoryStoreTest, GetOfAnotherKeyKeepsWaiting) {
  MemoryStore store;
  std::optional<StatusOr<std::string>> got;
  std::thread getter([&] { got = store.Get("wanted", kLong); });
  AwaitWaiters(store, 1);
  ASSERT_TRUE(store.Set("other", "x").ok());
  // The Set woke the getter; it must go back to waiting rather than return.
  ASSERT_TRUE(store.Set("other", "y").ok());
  EXPECT_EQ(store.waiters(), 1);
  ASSERT_TRUE(store.Set("wanted", "v").ok());
  getter.join();
  ASSERT_TRUE(got->ok()) << got->status().ToString();
  EXPECT_EQ(**got, "v");
}

TEST(MemoryStoreTest, GetTimesOutNamingTheKey) {
  MemoryStore store;
  ASSERT_TRUE(store.Set("other", "1").ok());
  auto got = store.Get("never/set", 20ms);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(got.status().message(), "store get timed out after 20ms waiting for key never/set");
  EXPECT_EQ(store.Get("never/set", 0ms).status().code(), StatusCode::kDeadlineExceeded);
}

TEST(MemoryStoreTest, GetWakesOnStopRequest) {
  MemoryStore store;
  std::optional<StatusOr<std::string>> got;
  std::thread getter([&] { got = store.Get("never/set", kLong); });
  AwaitWaiters(store, 1);
  RequestStop(0);
  getter.join();
  ResetStopForTest();
  ASSERT_FALSE(got->ok());
  EXPECT_EQ(got->status().code(), StatusCode::kCancelled) << got->status().ToString();
  EXPECT_NE(got->status().message().find("never/set"), std::string::npos);
}

TEST(MemoryStoreTest, StopExemptCallerIsNotCancelled) {
  MemoryStore store;
  RequestStop(0);
  Status exempt_get = [&] {
    StopExemptScope exempt;  // a failing rank reporting its cause after a SIGTERM
    return store.Get("missing", 10ms).status();
  }();
  Status stopped_get = store.Get("missing", kLong).status();
  ResetStopForTest();
  EXPECT_EQ(exempt_get.code(), StatusCode::kDeadlineExceeded) << exempt_get.ToString();
  EXPECT_EQ(stopped_get.code(), StatusCode::kCancelled) << stopped_get.ToString();
}

TEST(MemoryStoreTest, AddCountsFromZeroAndRejectsNonIntegers) {
  MemoryStore store;
  EXPECT_EQ(*store.Add("n", 5), 5);
  EXPECT_EQ(*store.Add("n", -7), -2);
  EXPECT_EQ(*store.Get("n", 0ms), "-2");

  constexpr int kThreads = 4, kAdds = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) EXPECT_TRUE(store.Add("counter", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*store.Add("counter", 0), kThreads * kAdds);

  ASSERT_TRUE(store.Set("s", "12x").ok());
  auto bad = store.Add("s", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("key s"), std::string::npos) << bad.status().message();
  EXPECT_EQ(*store.Get("s", 0ms), "12x");
}

TEST(MemoryStoreTest, AddWakesAWaitingGet) {
  MemoryStore store;
  std::optional<StatusOr<std::string>> got;
  std::thread getter([&] { got = store.Get("count", kLong); });
  AwaitWaiters(store, 1);
  ASSERT_TRUE(store.Add("count", 3).ok());
  getter.join();
  EXPECT_EQ(**got, "3");
}

TEST(MemoryStoreTest, CompareSetOnlyWhenExpected) {
  MemoryStore store;
  EXPECT_EQ(*store.CompareSet("c", "", "first"), "first");
  EXPECT_EQ(*store.CompareSet("c", "", "second"), "first");
  EXPECT_EQ(*store.CompareSet("c", "nope", "second"), "first");
  EXPECT_EQ(*store.CompareSet("c", "first", "second"), "second");
  EXPECT_EQ(*store.Get("c", 0ms), "second");
  EXPECT_EQ(*store.CompareSet("d", "x", "y"), "");
  EXPECT_EQ(store.size(), 1u) << "a failed CompareSet on a missing key must not create it";
  EXPECT_EQ(*store.CompareSetWithin("e", "", "z", 0ms), "z");
}

TEST(MemoryStoreTest, WaitReturnsOnlyOnceEveryKeyExists) {
  MemoryStore store;
  EXPECT_TRUE(store.Wait({}, 0ms).ok());
  std::optional<Status> waited;
  std::thread waiter([&] { waited = store.Wait({"a", "b"}, kLong); });
  AwaitWaiters(store, 1);
  ASSERT_TRUE(store.Set("a", "1").ok());
  EXPECT_EQ(store.waiters(), 1) << "one of two keys must not end the wait";
  ASSERT_TRUE(store.Set("b", "1").ok());
  waiter.join();
  ASSERT_TRUE(waited.has_value());
  EXPECT_TRUE(waited->ok()) << waited->ToString();
}

TEST(MemoryStoreTest, WaitTimeoutListsMissingKeys) {
  MemoryStore store;
  ASSERT_TRUE(store.Set("present", "1").ok());
  Status s = store.Wait({"present", "gone/1", "gone/2"}, 20ms);
  ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_EQ(s.message(), "store wait timed out after 20ms; missing keys: gone/1, gone/2");
}

}  // namespace
}  // namespace ringtrain::rendezvous
