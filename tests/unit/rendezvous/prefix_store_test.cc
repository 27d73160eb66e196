#include "runner/rendezvous/prefix_store.h"

#include <gtest/gtest.h>

#include "runner/rendezvous/memory_store.h"

namespace ringtrain::rendezvous {
namespace {

using namespace std::chrono_literals;

TEST(PrefixStoreTest, AttemptsDoNotSeeEachOther) {
  rendezvous::MemoryStore base;
  PrefixStore attempt0(base, "job/0/");
  PrefixStore attempt1(base, "job/1/");
  ASSERT_TRUE(attempt0.Set("arrived/0", "1").ok());
  EXPECT_EQ(attempt1.Get("arrived/0", 20ms).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(attempt1.Wait({"arrived/0"}, 20ms).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(*attempt1.Add("n", 1), 1);
  EXPECT_EQ(*attempt0.Add("n", 1), 1);
  EXPECT_EQ(*attempt1.CompareSet("abort", "", "x"), "x");
  EXPECT_EQ(*attempt0.CompareSetWithin("abort", "", "y", 1s), "y");
  EXPECT_TRUE(attempt0.Wait({"arrived/0", "n"}, 20ms).ok());
  // The prefix is applied verbatim to the wrapped store.
  EXPECT_EQ(*base.Get("job/0/arrived/0", 0ms), "1");
  EXPECT_EQ(*base.Get("job/1/abort", 0ms), "x");
}

TEST(PrefixStoreTest, TimeoutNamesTheFullKey) {
  rendezvous::MemoryStore base;
  PrefixStore store(base, "job/3/");
  Status s = store.Wait({"a"}, 10ms);
  EXPECT_NE(s.message().find("job/3/a"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ringtrain::rendezvous
