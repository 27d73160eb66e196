// The counter tests wait on instead of sleeping: a wait ends on the event, whichever thread
// bumps it and whether it came before or during the wait.
#include "common/event_counter.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ringtrain {
namespace {

using namespace std::chrono_literals;

TEST(EventCounter, AnEventBeforeTheWaitIsSeen) {
  EventCounter c;
  EXPECT_EQ(c.value(), 0u);
  c.Bump();
  c.Bump();
  EXPECT_EQ(c.value(), 2u);
  EXPECT_TRUE(c.AwaitAbove(1, 0ms));
  EXPECT_FALSE(c.AwaitAbove(2, 0ms)) << "no third event yet";
}

TEST(EventCounter, AnEventDuringTheWaitWakesIt) {
  EventCounter c;
  EventCounter waiting;  // the waiter's own "about to wait", so the bump is not early by luck
  std::thread bumper([&] {
    ASSERT_TRUE(waiting.AwaitAbove(0, 60s));
    for (int i = 0; i < 3; ++i) c.Bump();
  });
  waiting.Bump();
  EXPECT_TRUE(c.AwaitAbove(2, 60s));
  bumper.join();
  EXPECT_EQ(c.value(), 3u);
}

TEST(EventCounter, ManyBumpersNoLostWakeUp) {
  EventCounter c;
  std::vector<std::thread> bumpers;
  for (int t = 0; t < 4; ++t) {
    bumpers.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) c.Bump();
    });
  }
  EXPECT_TRUE(c.AwaitAbove(3999, 60s));
  for (auto& b : bumpers) b.join();
  EXPECT_EQ(c.value(), 4000u);
}

}  // namespace
}  // namespace ringtrain
