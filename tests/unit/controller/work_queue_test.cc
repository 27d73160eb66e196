// The work queue's timing rules (delayed adds, per-key exponential backoff) and the
// expectations' expiry, on a fake clock: exact outcomes, no sleeps.
#include "controller/runtime/work_queue.h"

#include <gtest/gtest.h>

#include "controller/runtime/expectations.h"
#include "tests/fakes/fake_clock.h"

namespace ringtrain::op {
namespace {

using ringtrain::testing::FakeClock;
using std::chrono::milliseconds;

TEST(WorkQueue, DelayedKeyIsReadyExactlyWhenItsTimeComes) {
  FakeClock clock;
  WorkQueue q({}, &clock);
  q.AddAfter("ns/a", milliseconds(500));
  EXPECT_EQ(q.TryGet(), std::nullopt);
  clock.Advance(milliseconds(499));
  EXPECT_EQ(q.TryGet(), std::nullopt);
  clock.Advance(milliseconds(1));
  EXPECT_EQ(q.TryGet(), "ns/a");
  q.Done("ns/a");
  EXPECT_EQ(q.TryGet(), std::nullopt);
}

TEST(WorkQueue, EarlierAddWinsAndAnImmediateAddCancelsTheDelay) {
  FakeClock clock;
  WorkQueue q({}, &clock);
  q.AddAfter("k", milliseconds(1000));
  q.AddAfter("k", milliseconds(200));   // earlier: wins
  q.AddAfter("k", milliseconds(5000));  // later: ignored
  clock.Advance(milliseconds(200));
  EXPECT_EQ(q.TryGet(), "k");
  q.Done("k");
  q.AddAfter("j", milliseconds(1000));
  q.Add("j");
  EXPECT_EQ(q.TryGet(), "j");
}

TEST(WorkQueue, RateLimitedBackoffDoublesToTheCapAndForgetResetsIt) {
  FakeClock clock;
  WorkQueue q(WorkQueueOptions{milliseconds(20), milliseconds(100)}, &clock);
  const long expected[] = {20, 40, 80, 100, 100};
  for (long delay : expected) {
    q.AddRateLimited("k");
    clock.Advance(milliseconds(delay - 1));
    EXPECT_EQ(q.TryGet(), std::nullopt) << "delay " << delay;
    clock.Advance(milliseconds(1));
    ASSERT_EQ(q.TryGet(), "k") << "delay " << delay;
    q.Done("k");
  }
  EXPECT_EQ(q.NumRequeues("k"), 5);
  q.Forget("k");
  EXPECT_EQ(q.NumRequeues("k"), 0);
  q.AddRateLimited("k");
  clock.Advance(milliseconds(20));
  EXPECT_EQ(q.TryGet(), "k");
}

TEST(WorkQueue, AKeyBeingProcessedIsNotHandedOutTwice) {
  FakeClock clock;
  WorkQueue q({}, &clock);
  q.Add("k");
  ASSERT_EQ(q.TryGet(), "k");
  q.Add("k");  // while processing: queued again on Done
  EXPECT_EQ(q.TryGet(), std::nullopt);
  q.Done("k");
  EXPECT_EQ(q.TryGet(), "k");
}

TEST(Expectations, UnmetExpectationsExpireAfterTheTimeout) {
  FakeClock clock;
  Expectations e(std::chrono::seconds(30), &clock);
  e.ExpectCreate("ns/job", "job-a0-0");
  EXPECT_FALSE(e.Satisfied("ns/job", {}, ""));
  clock.Advance(std::chrono::seconds(30));
  EXPECT_FALSE(e.Satisfied("ns/job", {}, ""));
  clock.Advance(milliseconds(1));
  EXPECT_TRUE(e.Satisfied("ns/job", {}, ""));  // gave up waiting for the cache
}

TEST(Expectations, MetByTheCacheBeforeTheTimeout) {
  FakeClock clock;
  Expectations e(std::chrono::seconds(30), &clock);
  e.ExpectCreate("ns/job", "job-a0-0");
  e.ExpectDelete("ns/job", "job-a0-1");
  EXPECT_FALSE(e.Satisfied("ns/job", {{"job-a0-1", false}}, ""));
  EXPECT_TRUE(e.Satisfied("ns/job", {{"job-a0-0", false}}, ""));
}

}  // namespace
}  // namespace ringtrain::op
