#include <gtest/gtest.h>

#include "common/time_format.h"
#include "controller/reconcile/planner.h"

namespace ringtrain::reconcile {
namespace {

using Kind = Action::Kind;

const WallTime kT0 = *ParseRfc3339("2026-11-21T10:00:00Z");
WallTime At(int seconds) { return kT0 + std::chrono::seconds(seconds); }

api::TrainingJob Job(int replicas = 2) {
  api::TrainingJob j;
  j.metadata.name = "job";
  j.spec.replicas = replicas;
  j.spec.run_policy.backoff_limit = 2;
  j.spec.run_policy.progress_deadline_seconds = 0;
  return j;
}

ObservedReplica Replica(int rank, int attempt, ReplicaPhase phase, int exit_code = 0,
                        std::string reason = "") {
  ObservedReplica r;
  r.name = ReplicaName("job", attempt, rank);
  r.rank = rank;
  r.attempt = attempt;
  r.phase = phase;
  r.exit_code = exit_code;
  r.reason = std::move(reason);
  return r;
}

Plan PlanAt(const api::TrainingJob& job, std::vector<ObservedReplica> replicas, WallTime now) {
  PlanInput in;
  in.job = &job;
  in.replicas = std::move(replicas);
  in.now = now;
  return PlanReconcile(in);
}

int Count(const Plan& p, Kind k) {
  int n = 0;
  for (const auto& a : p.actions) n += a.kind == k ? 1 : 0;
  return n;
}

const api::Condition* Cond(const api::JobStatus& s, const std::string& type) {
  for (const auto& c : s.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

TEST(Planner, NewJobCreatesTheWholeGang) {
  auto job = Job(3);
  Plan p = PlanAt(job, {}, kT0);
  EXPECT_EQ(p.status.phase, "Pending");
  EXPECT_EQ(p.status.start_time, "2026-11-21T10:00:00Z");
  ASSERT_EQ(Count(p, Kind::kCreateReplica), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(p.actions[r].rank, r);
    EXPECT_EQ(p.actions[r].attempt, 0);
  }
  ASSERT_NE(Cond(p.status, "Created"), nullptr);
}

TEST(Planner, IdempotentOnceTheGangExists) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  std::vector<ObservedReplica> running = {Replica(0, 0, ReplicaPhase::kRunning),
                                          Replica(1, 0, ReplicaPhase::kRunning)};
  Plan p1 = PlanAt(job, running, At(5));
  EXPECT_TRUE(p1.actions.empty());
  EXPECT_EQ(p1.status.phase, "Running");
  EXPECT_EQ(p1.status.replicas.running, 2);
  job.status = p1.status;
  Plan p2 = PlanAt(job, running, At(6));
  EXPECT_TRUE(p2.actions.empty());
  EXPECT_EQ(p2.status, p1.status) << "status must not change without a change in the world";
  EXPECT_TRUE(p2.events.empty());
}

TEST(Planner, OnlyMissingRanksAreCreated) {
  auto job = Job(3);
  job.status = PlanAt(job, {}, kT0).status;
  Plan p = PlanAt(job, {Replica(1, 0, ReplicaPhase::kPending)}, At(1));
  ASSERT_EQ(Count(p, Kind::kCreateReplica), 2);
  EXPECT_EQ(p.actions[0].rank, 0);
  EXPECT_EQ(p.actions[1].rank, 2);
  EXPECT_EQ(p.status.phase, "Pending");
}

struct FailureCase {
  const char* name;
  int exit_code;
  const char* reason;
  bool disruption;
  int restarts_before;
  const char* phase;
  int restarts_after;
  int attempt_after;
};

class PlannerFailure : public ::testing::TestWithParam<FailureCase> {};

TEST_P(PlannerFailure, ClassifiesAndActs) {
  const auto& c = GetParam();
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.start_time = "2026-11-21T10:00:00Z";
  job.status.restarts = c.restarts_before;
  job.status.attempt = c.restarts_before;
  auto failed = Replica(1, c.restarts_before, ReplicaPhase::kFailed, c.exit_code, c.reason);
  failed.disruption = c.disruption;
  failed.message = "boom";
  Plan p = PlanAt(job, {Replica(0, c.restarts_before, ReplicaPhase::kRunning), failed}, At(10));
  EXPECT_EQ(p.status.phase, c.phase);
  EXPECT_EQ(p.status.restarts, c.restarts_after);
  EXPECT_EQ(p.status.attempt, c.attempt_after);
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 1);
  EXPECT_EQ(p.status.last_failure->exit_code, c.exit_code);
  EXPECT_EQ(p.status.last_failure->message, "boom");
  if (std::string(c.phase) == "Restarting") {
    EXPECT_EQ(Count(p, Kind::kDeleteReplica), 2) << "the whole gang goes";
    EXPECT_EQ(Count(p, Kind::kCreateReplica), 0) << "new gang only after the old one is gone";
  } else {
    EXPECT_EQ(p.status.completion_time, "2026-11-21T10:00:10Z");
    EXPECT_EQ(Count(p, Kind::kDeleteReplica), 1) << "cleanPodPolicy Running: the running rank";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, PlannerFailure,
    ::testing::Values(FailureCase{"retryable_exit", 138, "Error", false, 0, "Restarting", 1, 1},
                      FailureCase{"sigkill", 137, "Killed", false, 1, "Restarting", 2, 2},
                      FailureCase{"oom", 137, "OOMKilled", false, 0, "Restarting", 1, 1},
                      FailureCase{"permanent_exit", 1, "Error", false, 0, "Failed", 0, 0},
                      FailureCase{"exit_127", 127, "Error", false, 0, "Failed", 0, 0},
                      FailureCase{"backoff_exhausted", 143, "Error", false, 2, "Failed", 2, 2},
                      FailureCase{"eviction_not_counted", 0, "Evicted", true, 2, "Restarting", 2,
                                  3},
                      FailureCase{"deleted_pod", 0, "Deleted", false, 0, "Restarting", 1, 1}),
    [](const auto& info) { return info.param.name; });

TEST(Planner, PermanentFailureWinsOverRetryable) {
  auto job = Job(3);
  job.status.phase = "Running";
  Plan p = PlanAt(job,
                  {Replica(0, 0, ReplicaPhase::kFailed, 138), Replica(1, 0, ReplicaPhase::kRunning),
                   Replica(2, 0, ReplicaPhase::kFailed, 2)},
                  kT0);
  EXPECT_EQ(p.status.phase, "Failed");
  EXPECT_EQ(p.status.last_failure->rank, 2);
  EXPECT_EQ(Cond(p.status, "Failed")->reason, "PermanentFailure");
}

TEST(Planner, RestartWaitsForTheOldGangThenCreatesTheNext) {
  auto job = Job(2);
  job.status.phase = "Restarting";
  job.status.attempt = 1;
  job.status.restarts = 1;
  job.status.conditions.push_back({"Restarting", "True", "RetryableFailure", "", "t"});
  auto old0 = Replica(0, 0, ReplicaPhase::kRunning);
  old0.terminating = true;
  Plan waiting = PlanAt(job, {old0}, kT0);
  EXPECT_TRUE(waiting.actions.empty()) << "terminating replica: nothing to do but wait";
  Plan next = PlanAt(job, {}, At(1));
  ASSERT_EQ(Count(next, Kind::kCreateReplica), 2);
  EXPECT_EQ(next.actions[0].attempt, 1);
  EXPECT_EQ(next.actions[0].name, "job-a1-0");
  EXPECT_EQ(next.status.phase, "Restarting");
  job.status = next.status;
  Plan running = PlanAt(
      job, {Replica(0, 1, ReplicaPhase::kRunning), Replica(1, 1, ReplicaPhase::kRunning)}, At(2));
  EXPECT_EQ(running.status.phase, "Running");
  ASSERT_NE(Cond(running.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(running.status, "Restarting")->status, "False");
}

TEST(Planner, SucceedsWhenEveryRankSucceeded) {
  auto job = Job(2);
  job.status.phase = "Running";
  Plan partial = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kSucceeded), Replica(1, 0, ReplicaPhase::kRunning)}, kT0);
  EXPECT_EQ(partial.status.phase, "Running");
  Plan done = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kSucceeded), Replica(1, 0, ReplicaPhase::kSucceeded)},
      At(3));
  EXPECT_EQ(done.status.phase, "Succeeded");
  EXPECT_EQ(done.status.completion_time, "2026-11-21T10:00:03Z");
  EXPECT_TRUE(done.actions.empty());
}

TEST(Planner, ActiveDeadlineFailsTheJob) {
  auto job = Job(2);
  job.spec.run_policy.active_deadline_seconds = 60;
  job.status.phase = "Running";
  job.status.start_time = "2026-11-21T10:00:00Z";
  std::vector<ObservedReplica> running = {Replica(0, 0, ReplicaPhase::kRunning),
                                          Replica(1, 0, ReplicaPhase::kRunning)};
  Plan before = PlanAt(job, running, At(30));
  EXPECT_EQ(before.status.phase, "Running");
  ASSERT_TRUE(before.requeue_after.has_value());
  EXPECT_EQ(*before.requeue_after, std::chrono::seconds(30));
  Plan after = PlanAt(job, running, At(60));
  EXPECT_EQ(after.status.phase, "Failed");
  EXPECT_EQ(Cond(after.status, "Failed")->reason, "DeadlineExceeded");
  EXPECT_EQ(Count(after, Kind::kDeleteReplica), 2);
}

TEST(Planner, SuspendDeletesAndResumeRecreates) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.spec.run_policy.suspend = true;
  Plan s = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)}, kT0);
  EXPECT_EQ(s.status.phase, "Suspended");
  EXPECT_EQ(Count(s, Kind::kDeleteReplica), 2);
  job.status = s.status;
  job.spec.run_policy.suspend = false;
  Plan r = PlanAt(job, {}, At(100));
  EXPECT_EQ(r.status.phase, "Pending");
  EXPECT_EQ(r.status.attempt, 1);
  EXPECT_EQ(r.status.start_time, "2026-11-21T10:01:40Z");
  EXPECT_EQ(Count(r, Kind::kCreateReplica), 2);
  ASSERT_NE(Cond(r.status, "Suspended"), nullptr);
  EXPECT_EQ(Cond(r.status, "Suspended")->status, "False");
}

TEST(Planner, TtlDeletesTheFinishedJob) {
  auto job = Job(1);
  job.spec.run_policy.ttl_seconds_after_finished = 30;
  job.status.phase = "Succeeded";
  job.status.completion_time = "2026-11-21T10:00:00Z";
  Plan early = PlanAt(job, {}, At(10));
  EXPECT_EQ(Count(early, Kind::kDeleteJob), 0);
  EXPECT_EQ(*early.requeue_after, std::chrono::seconds(20));
  Plan late = PlanAt(job, {}, At(30));
  EXPECT_EQ(Count(late, Kind::kDeleteJob), 1);
}

TEST(Planner, CleanPodPolicyAllDeletesFinishedReplicasToo) {
  auto job = Job(2);
  job.spec.run_policy.clean_pod_policy = "All";
  job.status.phase = "Succeeded";
  Plan p = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kSucceeded), Replica(1, 0, ReplicaPhase::kSucceeded)}, kT0);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 2);
  job.spec.run_policy.clean_pod_policy = "None";
  EXPECT_EQ(Count(PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning)}, kT0), Kind::kDeleteReplica),
            0);
}

TEST(Planner, StalledGangIsRestarted) {
  auto job = Job(2);
  job.spec.run_policy.progress_deadline_seconds = 60;
  job.status.phase = "Running";
  job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
  std::vector<ObservedReplica> running = {Replica(0, 0, ReplicaPhase::kRunning),
                                          Replica(1, 0, ReplicaPhase::kRunning)};
  PlanInput in;
  in.job = &job;
  in.replicas = running;
  in.progress = ObservedProgress{10, 0, 100, 1.5};
  in.now = At(30);
  Plan moving = PlanReconcile(in);
  EXPECT_EQ(moving.status.phase, "Running");
  EXPECT_EQ(moving.status.progress->step, 10);
  EXPECT_EQ(moving.status.progress->updated_at, "2026-11-21T10:00:30Z");
  job.status = moving.status;
  in.now = At(80);  // same step, 50 s later: within the deadline
  EXPECT_EQ(PlanReconcile(in).status.phase, "Running");
  in.now = At(91);
  Plan stalled = PlanReconcile(in);
  EXPECT_EQ(stalled.status.phase, "Restarting");
  EXPECT_EQ(stalled.status.restarts, 1);
  EXPECT_EQ(Cond(stalled.status, "Stalled")->status, "True");
  EXPECT_EQ(Count(stalled, Kind::kDeleteReplica), 2);
}

// Issue 10.4: a /status that cannot be read is not "no progress". A healthy gang whose
// endpoint is unreachable past the deadline is reported (Stalled=Unknown), never restarted;
// a gang that really stalls is still restarted on the next read that succeeds.
TEST(Planner, UnreachableStatusIsReportedNotRestarted) {
  auto job = Job(2);
  job.spec.run_policy.progress_deadline_seconds = 60;
  job.status.phase = "Running";
  job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
  PlanInput in;
  in.job = &job;
  in.replicas = {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)};
  in.progress = ObservedProgress{10, 0, 100, 1.5};
  in.now = At(30);
  job.status = PlanReconcile(in).status;
  ObservedProgress unreachable;
  unreachable.reachable = false;
  unreachable.error = "GET /status: deadline exceeded";
  in.progress = unreachable;
  for (int t : {60, 95, 200, 1000}) {
    in.now = At(t);
    Plan p = PlanReconcile(in);
    EXPECT_EQ(p.status.phase, "Running") << "t=" << t;
    EXPECT_EQ(p.status.restarts, 0) << "t=" << t;
    EXPECT_EQ(Count(p, Kind::kDeleteReplica), 0) << "t=" << t;
    ASSERT_TRUE(p.status.progress.has_value());
    EXPECT_EQ(p.status.progress->step, 10) << "the last known progress is kept";
    EXPECT_EQ(p.status.progress->updated_at, "2026-11-21T10:00:30Z");
    if (t > 90) {
      const auto* stalled = Cond(p.status, "Stalled");
      ASSERT_NE(stalled, nullptr) << "t=" << t;
      EXPECT_EQ(stalled->status, "Unknown");
      EXPECT_EQ(stalled->reason, "ProgressUnknown");
      EXPECT_NE(stalled->message.find("deadline exceeded"), std::string::npos);
    }
    job.status = p.status;
  }
  // Not asked this time (between polls): nothing is decided either way.
  in.progress.reset();
  in.now = At(1100);
  EXPECT_EQ(PlanReconcile(in).status.phase, "Running");
  // The endpoint answers again with the same step: that is a real stall, restarted.
  in.progress = ObservedProgress{10, 0, 0, 1.5};
  in.now = At(1200);
  Plan stalled = PlanReconcile(in);
  EXPECT_EQ(stalled.status.phase, "Restarting");
  EXPECT_EQ(Cond(stalled.status, "Stalled")->status, "True");
}

TEST(Planner, UnreachableStatusThenProgressClearsTheUnknown) {
  auto job = Job(1);
  job.spec.run_policy.progress_deadline_seconds = 60;
  job.status.phase = "Running";
  job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
  PlanInput in;
  in.job = &job;
  in.replicas = {Replica(0, 0, ReplicaPhase::kRunning)};
  ObservedProgress unreachable;
  unreachable.reachable = false;
  in.progress = unreachable;
  in.now = At(100);
  Plan unknown = PlanReconcile(in);
  EXPECT_EQ(unknown.status.phase, "Running");
  EXPECT_EQ(Cond(unknown.status, "Stalled")->status, "Unknown");
  EXPECT_FALSE(unknown.status.progress.has_value());
  job.status = unknown.status;
  in.progress = ObservedProgress{42, 1, 10, 0.5};
  in.now = At(110);
  Plan moving = PlanReconcile(in);
  EXPECT_EQ(moving.status.phase, "Running");
  EXPECT_EQ(moving.status.progress->step, 42);
  EXPECT_EQ(Cond(moving.status, "Stalled")->status, "False");
}

TEST(Planner, ReplicasOutsideTheGangAreDeleted) {
  auto job = Job(2);
  job.status.phase = "Running";
  Plan p = PlanAt(job,
                  {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning),
                   Replica(5, 0, ReplicaPhase::kRunning)},
                  kT0);
  ASSERT_EQ(Count(p, Kind::kDeleteReplica), 1);
  EXPECT_EQ(p.actions[0].rank, 5);
}

TEST(RetryableCodes, FollowTheContract) {
  EXPECT_FALSE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 1)));
  EXPECT_FALSE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 127)));
  EXPECT_TRUE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 128)));
  EXPECT_TRUE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 255)));
  EXPECT_TRUE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 0, "Evicted")));
}

}  // namespace
}  // namespace ringtrain::reconcile
