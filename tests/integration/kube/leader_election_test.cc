// Lease leader election against the fake API server: one leader at a time, takeover after expiry
// or release, stepping down when renewal fails. Short durations; only eventual outcomes asserted.
#include <gtest/gtest.h>

#include <atomic>

#include "controller/kube/leader_election.h"
#include "tests/integration/kube/kube_test_util.h"

namespace ringtrain::kube {
namespace {

using testing::Eventually;
using testing::KubeTest;

struct Candidate {
  std::atomic<int> started{0}, stopped{0};
  std::unique_ptr<LeaderElector> elector;
};

class LeaderElectionTest : public KubeTest {
 protected:
  std::unique_ptr<Candidate> NewCandidate(const std::string& identity,
                                          bool release_on_stop = true) {
    auto c = std::make_unique<Candidate>();
    LeaderElectionConfig config;
    config.lease_namespace = "default";
    config.lease_name = "ringtrain-test-leader";
    config.identity = identity;
    config.lease_duration = std::chrono::milliseconds(2000);
    config.renew_deadline = std::chrono::milliseconds(1500);
    config.retry_period = std::chrono::milliseconds(300);
    config.release_on_stop = release_on_stop;
    Candidate* raw = c.get();
    config.on_started_leading = [raw] { ++raw->started; };
    config.on_stopped_leading = [raw] { ++raw->stopped; };
    auto e = LeaderElector::Create(client_.get(), config);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    c->elector = std::move(e).value();
    return c;
  }

  std::string Holder() {
    auto lease =
        server_->GetObject({"coordination.k8s.io", "leases"}, "default", "ringtrain-test-leader");
    if (!lease) return "<none>";
    return (*lease)["spec"].value("holderIdentity", "");
  }
};

TEST(MicroTimeTest, SixFractionalDigits) {
  WallTime t{std::chrono::microseconds(1'500'000)};
  EXPECT_EQ(FormatMicroTime(t), "1970-01-01T00:00:01.500000Z");
  WallTime u{std::chrono::seconds(1'795'000'000) + std::chrono::microseconds(859018)};
  EXPECT_EQ(FormatMicroTime(u), "2026-11-18T11:06:40.859018Z");
}

TEST_F(LeaderElectionTest, ConfigIsChecked) {
  LeaderElectionConfig config;
  EXPECT_FALSE(LeaderElector::Create(client_.get(), config).ok());  // no identity
  config.identity = "a";
  config.renew_deadline = config.lease_duration;
  EXPECT_FALSE(LeaderElector::Create(client_.get(), config).ok());
}

TEST_F(LeaderElectionTest, ExactlyOneLeaderAndTakeoverAfterExpiry) {
  auto a = NewCandidate("a", /*release_on_stop=*/false);
  auto b = NewCandidate("b", /*release_on_stop=*/false);
  a->elector->Start();
  b->elector->Start();
  ASSERT_TRUE(Eventually([&] { return a->elector->IsLeader() || b->elector->IsLeader(); }));
  // Over several renewals (counted at the server, not timed), never two leaders, and the
  // lease names the one that leads.
  const std::int64_t updates_before = server_->RequestCount("PUT", "leases");
  bool two_leaders = false;
  ASSERT_TRUE(Eventually([&] {
    if (a->elector->IsLeader() && b->elector->IsLeader()) two_leaders = true;
    return server_->RequestCount("PUT", "leases") >= updates_before + 4;
  }));
  EXPECT_FALSE(two_leaders);
  Candidate* leader = a->elector->IsLeader() ? a.get() : b.get();
  Candidate* follower = leader == a.get() ? b.get() : a.get();
  std::string leader_id = leader == a.get() ? "a" : "b";
  EXPECT_EQ(Holder(), leader_id);
  EXPECT_EQ(follower->elector->CurrentLeader(), leader_id);
  EXPECT_EQ(leader->started.load(), 1);
  EXPECT_EQ(follower->started.load(), 0);

  // The leader vanishes without releasing (a crash): the follower waits out the lease.
  leader->elector->Stop();
  EXPECT_EQ(leader->stopped.load(), 1);
  EXPECT_EQ(Holder(), leader_id);
  ASSERT_TRUE(Eventually([&] { return follower->elector->IsLeader(); }));
  EXPECT_NE(Holder(), leader_id);
  auto lease =
      server_->GetObject({"coordination.k8s.io", "leases"}, "default", "ringtrain-test-leader");
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
  EXPECT_EQ((*lease)["spec"]["leaseDurationSeconds"], 2);
  follower->elector->Stop();
}

TEST_F(LeaderElectionTest, GracefulStopReleasesTheLease) {
  auto a = NewCandidate("a");
  a->elector->Start();
  ASSERT_TRUE(Eventually([&] { return a->elector->IsLeader(); }));
  auto b = NewCandidate("b");
  b->elector->Start();
  // b has read the lease and found it held: while a renews, b must not lead.
  ASSERT_TRUE(Eventually([&] { return b->elector->CurrentLeader() == "a"; }));
  EXPECT_FALSE(b->elector->IsLeader());
  a->elector->Stop();
  EXPECT_FALSE(a->elector->IsLeader());
  EXPECT_EQ(a->stopped.load(), 1);
  ASSERT_TRUE(Eventually([&] { return b->elector->IsLeader(); }));
  EXPECT_EQ(Holder(), "b");
  b->elector->Stop();
  EXPECT_EQ(Holder(), "");
}

TEST_F(LeaderElectionTest, StepsDownWhenRenewalFails) {
  auto a = NewCandidate("a");
  a->elector->Start();
  ASSERT_TRUE(Eventually([&] { return a->elector->IsLeader(); }));
  // Each failing Get takes 4 requests (3 retries, ~1.4 s), more than the 1.5 s renew deadline
  // allows twice over: the leader steps down well before the 12 failures run out.
  server_->FailNextRequests("", "leases", 503, 12);
  ASSERT_TRUE(Eventually([&] { return !a->elector->IsLeader(); }));
  EXPECT_EQ(a->stopped.load(), 1);
  // Once the API answers again, it campaigns and wins back the (unchanged) lease.
  ASSERT_TRUE(Eventually([&] { return a->elector->IsLeader(); }, std::chrono::seconds(20)));
  EXPECT_EQ(a->started.load(), 2);
  a->elector->Stop();
}

}  // namespace
}  // namespace ringtrain::kube
