// Lease leader election against the fake API server: one leader at a time, takeover after expiry
// or release, stepping down when renewal fails. Short durations; only eventual outcomes asserted.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "controller/kube/leader_election.h"
#include "tests/integration/kube/kube_test_util.h"

namespace ringtrain::kube {
namespace {

using testing::Eventually;
using testing::KubeTest;

// Passes every call through to `inner`, except that once Hang() was called a Get of a Lease
// blocks until Release(): an API server that accepts the request and never answers.
class HangingLeaseClient final : public KubeClient {
 public:
  explicit HangingLeaseClient(KubeClient* inner) : inner_(inner) {}

  void Hang() {
    std::lock_guard<std::mutex> lock(mu_);
    hang_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hang_ = false;
    }
    cv_.notify_all();
  }
  // How many Gets are blocked now.
  int Hanging() {
    std::lock_guard<std::mutex> lock(mu_);
    return hanging_;
  }

  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    if (r.plural == kLeases.plural) {
      std::unique_lock<std::mutex> lock(mu_);
      if (hang_) {
        ++hanging_;
        cv_.wait(lock, [&] { return !hang_; });
        --hanging_;
      }
    }
    return inner_->Get(r, ns, name);
  }
  StatusOr<Json> List(const Resource& r, const std::string& ns,
                      const ListOptions& options) override {
    return inner_->List(r, ns, options);
  }
  StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) override {
    return inner_->Create(r, ns, object);
  }
  StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) override {
    return inner_->Update(r, ns, object);
  }
  StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                              const Json& object) override {
    return inner_->UpdateStatus(r, ns, object);
  }
  StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                       const Json& patch, PatchType type, bool status) override {
    return inner_->Patch(r, ns, name, patch, type, status);
  }
  Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                const DeleteOptions& options) override {
    return inner_->Delete(r, ns, name, options);
  }
  StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                               const WatchOptions& options) override {
    return inner_->Watch(r, ns, options);
  }

 private:
  KubeClient* inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool hang_ = false;
  int hanging_ = 0;
};

struct Candidate {
  std::atomic<int> started{0}, stopped{0};
  std::function<void()> on_started;  // also called when it starts leading; set before Start()
  std::unique_ptr<LeaderElector> elector;
};

class LeaderElectionTest : public KubeTest {
 protected:
  std::unique_ptr<Candidate> NewCandidate(const std::string& identity, bool release_on_stop = true,
                                          KubeClient* client = nullptr) {
    auto c = std::make_unique<Candidate>();
    LeaderElectionConfig config;
    config.lease_namespace = "default";
    config.lease_name = "ringtrain-test-leader";
    config.identity = identity;
    // Short enough for a quick takeover, long enough that a renewal slowed by a loaded machine
    // (sanitizers, parallel tests) never reaches the renew deadline by itself.
    config.lease_duration = std::chrono::milliseconds(4000);
    config.renew_deadline = std::chrono::milliseconds(3000);
    config.retry_period = std::chrono::milliseconds(300);
    config.release_on_stop = release_on_stop;
    Candidate* raw = c.get();
    config.on_started_leading = [raw] {
      ++raw->started;
      if (raw->on_started) raw->on_started();
    };
    config.on_stopped_leading = [raw] { ++raw->stopped; };
    auto e = LeaderElector::Create(client != nullptr ? client : client_.get(), config);
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
  EXPECT_EQ((*lease)["spec"]["leaseDurationSeconds"], 4);
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
  // Each failing Get takes 4 requests (3 retries, ~1.4 s): 24 failures last far longer than the
  // 3 s renew deadline, so the leader steps down before they run out.
  server_->FailNextRequests("", "leases", 503, 24);
  // IsLeader() turns false before on_stopped_leading runs: wait for the callback itself.
  ASSERT_TRUE(Eventually([&] { return a->stopped.load() >= 1; }));
  EXPECT_EQ(a->stopped.load(), 1);
  // Once the API answers again, it campaigns and wins back the (unchanged) lease.
  ASSERT_TRUE(Eventually([&] { return a->started.load() >= 2; }, std::chrono::seconds(20)));
  EXPECT_EQ(a->started.load(), 2);
  a->elector->Stop();
}

TEST_F(LeaderElectionTest, StepsDownAtTheRenewDeadlineWhileTheApiServerHangs) {
  HangingLeaseClient hanging(client_.get());
  auto a = NewCandidate("a", /*release_on_stop=*/false, &hanging);
  // Declared after `a`, so destroyed first: a failed assertion does not leave a's Get blocked.
  struct Unblock {
    HangingLeaseClient* client;
    ~Unblock() { client->Release(); }
  } unblock{&hanging};
  a->elector->Start();
  ASSERT_TRUE(Eventually([&] { return a->elector->IsLeader(); }));
  // The next renewal's Get never answers (as a client with a long request timeout and retries
  // blocks for minutes). The leader must step down by its renew deadline (3 s after its last
  // renewal began), before the lease (4 s) expires for the follower that then takes it over.
  hanging.Hang();
  ASSERT_TRUE(Eventually([&] { return hanging.Hanging() == 1; }));
  auto b = NewCandidate("b", /*release_on_stop=*/false);
  // -1 until b's on_started ran; then whether a still led. IsLeader() turns true before the
  // callback runs, so the test waits for the callback itself, not for IsLeader().
  std::atomic<int> a_led_when_b_started{-1};
  b->on_started = [&] { a_led_when_b_started = a->elector->IsLeader() ? 1 : 0; };
  b->elector->Start();
  ASSERT_TRUE(Eventually([&] { return a->stopped.load() >= 1; }));
  EXPECT_FALSE(a->elector->IsLeader());
  EXPECT_EQ(hanging.Hanging(), 1);  // stepped down while the renewal was still waiting
  EXPECT_EQ(a->stopped.load(), 1);
  ASSERT_TRUE(Eventually([&] { return a_led_when_b_started.load() != -1; }));
  EXPECT_TRUE(b->elector->IsLeader());
  EXPECT_EQ(a_led_when_b_started.load(), 0);  // never two leaders
  hanging.Release();
  a->elector->Stop();
  b->elector->Stop();
}

}  // namespace
}  // namespace ringtrain::kube
