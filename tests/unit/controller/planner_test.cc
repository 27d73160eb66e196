#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "common/runner_contract.h"
#include "common/time_format.h"
#include "controller/reconcile/observe_status.h"
#include "controller/reconcile/planner.h"
#include "tests/fakes/fake_clock.h"

namespace ringtrain::reconcile {
namespace {

using Kind = Action::Kind;

const WallTime kT0 = *ParseRfc3339("2026-11-21T10:00:00Z");
WallTime At(int seconds) { return kT0 + std::chrono::seconds(seconds); }

// Gang-restart semantics unless a test asks for in-place recovery (InPlaceJob).
api::TrainingJob Job(int replicas = 2) {
  api::TrainingJob j;
  j.metadata.name = "job";
  j.spec.replicas = replicas;
  j.spec.run_policy.backoff_limit = 2;
  j.spec.run_policy.progress_deadline_seconds = 0;
  j.spec.run_policy.recovery = "GangRestart";
  return j;
}

api::TrainingJob InPlaceJob(int replicas) {
  api::TrainingJob j = Job(replicas);
  j.spec.run_policy.recovery = "InPlace";
  j.status.phase = "Running";
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
                      FailureCase{"deleted_pod", 0, "Deleted", false, 0, "Restarting", 0, 1}),
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

// A pod of the old gang whose node stopped answering stays Terminating for good (v1.28 keeps it
// until its Node object goes): the restart waited for it forever (review). Past its deletion
// deadline by kStuckTerminatingAfter it is force-deleted, said in an event naming its node; a
// pod that ended (a finalizer keeps it) is not.
TEST(Planner, APodStuckTerminatingIsForceDeletedPastItsDeadline) {
  auto job = Job(2);
  job.status.phase = "Restarting";
  job.status.attempt = 1;
  job.status.restarts = 1;
  auto lost = Replica(1, 0, ReplicaPhase::kRunning);
  lost.terminating = true;
  lost.node = "n-lost";
  lost.deletion_deadline = At(30);
  auto ended = Replica(0, 0, ReplicaPhase::kFailed, 143);
  ended.terminating = true;
  ended.deletion_deadline = At(30);
  Plan waiting = PlanAt(job, {ended, lost}, At(149));
  EXPECT_TRUE(waiting.actions.empty());
  ASSERT_TRUE(waiting.requeue_after.has_value());
  EXPECT_LE(*waiting.requeue_after, std::chrono::seconds(1)) << "back when it is due";
  Plan forced = PlanAt(job, {ended, lost}, At(150));
  ASSERT_EQ(forced.actions.size(), 1u);
  EXPECT_EQ(forced.actions[0].kind, Kind::kDeleteReplica);
  EXPECT_EQ(forced.actions[0].name, "job-a0-1");
  EXPECT_TRUE(forced.actions[0].force);
  ASSERT_EQ(forced.events.size(), 1u);
  EXPECT_EQ(forced.events[0].reason, "ForceDeleted");
  EXPECT_EQ(forced.events[0].message,
            "pod job-a0-1 on node n-lost was still terminating 120s past its deletion deadline, "
            "its containers not reported stopped (its node does not answer): deleted without "
            "waiting for the node (grace 0)");
  job.status = forced.status;
  // A runner that ended while a sidecar keeps its pod running: its node reported nothing either.
  auto sidecar = ended;
  sidecar.pod_running = true;
  EXPECT_EQ(Count(PlanAt(job, {sidecar}, At(150)), Kind::kDeleteReplica), 1);
  // Deleted with grace 0 already (a finalizer keeps it): not again, pass after pass.
  auto held = lost;
  held.deletion_forced = true;
  const Plan again = PlanAt(job, {held}, At(400));
  EXPECT_EQ(Count(again, Kind::kDeleteReplica), 0);
  EXPECT_TRUE(again.events.empty());
  // Once it is gone, the next gang is created (the ended one meets no one).
  EXPECT_EQ(Count(PlanAt(job, {ended}, At(151)), Kind::kCreateReplica), 2);
  EXPECT_EQ(Count(PlanAt(job, {}, At(152)), Kind::kCreateReplica), 2);
}

// Recorded on the real cluster (s35): from a gang restart until the new gang's pods existed,
// kubectl get tj showed an empty PODS column (PodsReady's reason): the restart erased the
// condition. It now says the old pods terminate; the new attempt's placement wait still starts
// when its gang is created, as runPolicy.schedulingTimeoutSeconds counts it.
TEST(Planner, APodsColumnSaysTheOldPodsTerminateDuringARestart) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 100;
  job.status.phase = "Running";
  job.status.conditions.push_back({kPodsReadyCondition, "True", "AllPodsRunning",
                                   "all 2 replicas are running", "2026-11-21T10:00:00Z"});
  auto old1 = Replica(1, 0, ReplicaPhase::kFailed, 137);
  Plan restart = PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning), old1}, At(10));
  ASSERT_EQ(restart.status.phase, "Restarting");
  const api::Condition* pods = Cond(restart.status, kPodsReadyCondition);
  ASSERT_NE(pods, nullptr) << "PODS must not go blank";
  EXPECT_EQ(pods->status, "False");
  EXPECT_EQ(pods->reason, kOldPodsTerminatingReason);
  EXPECT_EQ(pods->message, "attempt 1 is created once the pods of earlier attempts are gone");
  job.status = restart.status;
  auto old0 = Replica(0, 0, ReplicaPhase::kRunning);
  old0.terminating = true;
  old1.terminating = true;
  Plan terminating = PlanAt(job, {old0, old1}, At(20));
  EXPECT_EQ(Cond(terminating.status, kPodsReadyCondition)->reason, kOldPodsTerminatingReason);
  job.status = terminating.status;
  Plan created = PlanAt(job, {}, At(40));
  ASSERT_EQ(Count(created, Kind::kCreateReplica), 2);
  pods = Cond(created.status, kPodsReadyCondition);
  EXPECT_EQ(pods->reason, kPodsStartingReason);
  EXPECT_EQ(pods->last_transition_time, "2026-11-21T10:00:40Z")
      << "the placement wait starts with the new gang";
  job.status = created.status;
  const std::vector<ObservedReplica> pending = {Replica(0, 1, ReplicaPhase::kPending),
                                                Replica(1, 1, ReplicaPhase::kPending)};
  EXPECT_EQ(PlanAt(job, pending, At(140)).status.phase, "Restarting");
  EXPECT_EQ(PlanAt(job, pending, At(141)).status.phase, "Failed");
  // A job that ends meanwhile says its pods no longer run.
  job.status = terminating.status;
  job.spec.run_policy.active_deadline_seconds = 25;
  job.status.start_time = "2026-11-21T10:00:00Z";
  Plan expired = PlanAt(job, {old0, old1}, At(30));
  ASSERT_EQ(expired.status.phase, "Failed");
  EXPECT_EQ(Cond(expired.status, kPodsReadyCondition)->reason, "JobFinished");
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

// Recorded on the real cluster (s35): after a gang restart the gang ran again, then succeeded,
// and the final status read Restarting=False reason Succeeded "all 2 replicas succeeded..." with
// a lastTransitionTime 71 s before the success: a condition's reason is the one of its last
// transition (metav1.Condition), and that one was the gang running again. The end only rewrites
// the conditions it turns False (Running; Restarting when it ends a restart).
TEST(Planner, TheEndRewritesOnlyTheConditionsItTurnsFalse) {
  auto job = Job(2);
  job.status.phase = "Running";
  Plan restart = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kFailed, 137)},
      At(10));
  ASSERT_EQ(restart.status.phase, "Restarting");
  job.status = restart.status;
  const std::vector<ObservedReplica> next = {Replica(0, 1, ReplicaPhase::kRunning),
                                             Replica(1, 1, ReplicaPhase::kRunning)};
  Plan running = PlanAt(job, next, At(20));
  ASSERT_EQ(running.status.phase, "Running");
  job.status = running.status;
  Plan done = PlanAt(
      job, {Replica(0, 1, ReplicaPhase::kSucceeded), Replica(1, 1, ReplicaPhase::kSucceeded)},
      At(91));
  ASSERT_EQ(done.status.phase, "Succeeded");
  const api::Condition* restarting = Cond(done.status, "Restarting");
  ASSERT_NE(restarting, nullptr);
  EXPECT_EQ(restarting->status, "False");
  EXPECT_EQ(restarting->reason, "Running") << "False since the gang ran";
  EXPECT_EQ(restarting->message, "gang running");
  EXPECT_EQ(restarting->last_transition_time, "2026-11-21T10:00:20Z");
  const api::Condition* ran = Cond(done.status, "Running");
  EXPECT_EQ(ran->status, "False");
  EXPECT_EQ(ran->reason, "Succeeded");
  EXPECT_EQ(ran->last_transition_time, "2026-11-21T10:01:31Z");
  // A job that ends while it restarts ends the restart, with the end's reason.
  job.status = running.status;
  restart = PlanAt(
      job, {Replica(0, 1, ReplicaPhase::kRunning), Replica(1, 1, ReplicaPhase::kFailed, 137)},
      At(30));
  ASSERT_EQ(restart.status.phase, "Restarting");
  ASSERT_EQ(Cond(restart.status, "Running")->status, "False");
  job.status = restart.status;
  job.spec.run_policy.active_deadline_seconds = 60;
  job.status.start_time = "2026-11-21T10:00:00Z";
  Plan expired = PlanAt(job, {}, At(61));
  ASSERT_EQ(expired.status.phase, "Failed");
  restarting = Cond(expired.status, "Restarting");
  EXPECT_EQ(restarting->status, "False");
  EXPECT_EQ(restarting->reason, "DeadlineExceeded");
  EXPECT_EQ(restarting->last_transition_time, "2026-11-21T10:01:01Z");
  const api::Condition* stopped = Cond(expired.status, "Running");
  EXPECT_EQ(stopped->status, "False");
  EXPECT_EQ(stopped->reason, "RetryableFailure") << "False since the restart";
  EXPECT_EQ(stopped->message, Cond(restart.status, "Running")->message);
  EXPECT_EQ(stopped->last_transition_time, "2026-11-21T10:00:30Z");
}

// kubectl get tj shows PodsReady's reason as PODS: a finished gang no longer says it runs.
TEST(Planner, AFinishedJobsPodsNoLongerReadAsRunning) {
  auto job = Job(2);
  const std::vector<ObservedReplica> running = {Replica(0, 0, ReplicaPhase::kRunning),
                                                Replica(1, 0, ReplicaPhase::kRunning)};
  job.status = PlanAt(job, {}, kT0).status;
  job.status = PlanAt(job, running, At(1)).status;
  ASSERT_EQ(job.status.phase, "Running");
  ASSERT_NE(Cond(job.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(job.status, kPodsReadyCondition)->reason, "AllPodsRunning");
  Plan done = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kSucceeded), Replica(1, 0, ReplicaPhase::kSucceeded)},
      At(3));
  EXPECT_EQ(done.status.phase, "Succeeded");
  const api::Condition* ready = Cond(done.status, kPodsReadyCondition);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->status, "False");
  EXPECT_EQ(ready->reason, "JobFinished");
  EXPECT_NE(ready->message.find("succeeded"), std::string::npos) << ready->message;

  // Ended while a pod was still starting (PodsStarting): that says nothing of the end either.
  auto starting = Job(2);
  starting.status = PlanAt(starting, {}, kT0).status;
  starting.status =
      PlanAt(starting,
             {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kPending)}, At(1))
          .status;
  ASSERT_NE(Cond(starting.status, kPodsReadyCondition), nullptr);
  ASSERT_EQ(Cond(starting.status, kPodsReadyCondition)->reason, kPodsStartingReason);
  Plan ended = PlanAt(
      starting, {Replica(0, 0, ReplicaPhase::kFailed, 1), Replica(1, 0, ReplicaPhase::kPending)},
      At(2));
  EXPECT_EQ(ended.status.phase, "Failed");
  ASSERT_NE(Cond(ended.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(ended.status, kPodsReadyCondition)->reason, "JobFinished");

  // cleanPodPolicy None keeps a survivor running: the PODS column does not say it stopped.
  auto kept = Job(2);
  kept.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kNone;
  kept.status = PlanAt(kept, {}, kT0).status;
  kept.status = PlanAt(kept, running, At(1)).status;
  Plan failed =
      PlanAt(kept, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kFailed, 1)},
             At(2));
  EXPECT_EQ(failed.status.phase, "Failed");
  EXPECT_EQ(Count(failed, Kind::kDeleteReplica), 0);
  ASSERT_NE(Cond(failed.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(failed.status, kPodsReadyCondition)->message,
            "the job has failed: its gang no longer trains (cleanPodPolicy None leaves 1 "
            "replica(s) running)");
  kept.status = failed.status;
  Plan later = PlanAt(
      kept, {Replica(0, 0, ReplicaPhase::kSucceeded), Replica(1, 0, ReplicaPhase::kFailed, 1)},
      At(60));
  ASSERT_NE(Cond(later.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(later.status, kPodsReadyCondition)->message,
            "the job has failed: its replicas no longer run")
      << "said again once the survivor ended";

  // A deadline deletes every replica whatever cleanPodPolicy says: none is said left running.
  auto timed = Job(2);
  timed.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kNone;
  timed.spec.run_policy.active_deadline_seconds = 30;
  timed.status = PlanAt(timed, {}, kT0).status;
  timed.status = PlanAt(timed, running, At(1)).status;
  Plan expired = PlanAt(timed, running, At(40));
  EXPECT_EQ(expired.status.phase, "Failed");
  EXPECT_EQ(Count(expired, Kind::kDeleteReplica), 2);
  ASSERT_NE(Cond(expired.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(expired.status, kPodsReadyCondition)->message,
            "the job has failed: its replicas no longer run");
}

// A sidecar (istio-proxy) keeps each pod Running after its runner ended: the job succeeds, and
// the pods go under cleanPodPolicy Running, at once and on every later pass.
TEST(Planner, SucceedsAndDeletesPodsWhoseSidecarOutlivesTheRunner) {
  auto job = Job(2);
  job.status.phase = "Running";
  std::vector<ObservedReplica> ended;
  for (int rank = 0; rank < 2; ++rank) {
    ObservedReplica r = Replica(rank, 0, ReplicaPhase::kSucceeded);
    r.pod_running = true;
    ended.push_back(r);
  }
  Plan done = PlanAt(job, ended, At(3));
  EXPECT_EQ(done.status.phase, "Succeeded");
  EXPECT_EQ(Count(done, Kind::kDeleteReplica), 2);
  job.status = done.status;
  EXPECT_EQ(Count(PlanAt(job, ended, At(4)), Kind::kDeleteReplica), 2);
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kNone;
  EXPECT_EQ(Count(PlanAt(job, ended, At(5)), Kind::kDeleteReplica), 0);
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
  // The stored start is a whole second: counted from that second's end.
  EXPECT_EQ(*before.requeue_after, std::chrono::seconds(31));
  EXPECT_EQ(PlanAt(job, running, At(60)).status.phase, "Running");
  Plan after = PlanAt(job, running, At(61));
  EXPECT_EQ(after.status.phase, "Failed");
  EXPECT_EQ(Cond(after.status, "Failed")->reason, "DeadlineExceeded");
  EXPECT_EQ(Count(after, Kind::kDeleteReplica), 2);
}

// status.startTime keeps whole seconds: a job created 0.9 s into a second is stored as started
// at the second's beginning. Its activeDeadlineSeconds never ends it before it ran that long
// (at most 1 s after).
TEST(Planner, ActiveDeadlineIsNeverEarlyForAStartTimeStoredToTheSecond) {
  auto job = Job(2);
  job.spec.run_policy.active_deadline_seconds = 10;
  const WallTime created = At(0) + std::chrono::milliseconds(900);
  job.status = PlanAt(job, {}, created).status;
  ASSERT_EQ(job.status.start_time, "2026-11-21T10:00:00Z");
  const std::vector<ObservedReplica> running = {Replica(0, 0, ReplicaPhase::kRunning),
                                                Replica(1, 0, ReplicaPhase::kRunning)};
  job.status = PlanAt(job, running, At(1)).status;
  ASSERT_EQ(job.status.phase, "Running");
  // 9.6 s after the job was created.
  Plan early = PlanAt(job, running, At(10) + std::chrono::milliseconds(500));
  EXPECT_EQ(early.status.phase, "Running") << "ran 9.6 s of its 10";
  EXPECT_EQ(Count(early, Kind::kDeleteReplica), 0);
  ASSERT_TRUE(early.requeue_after.has_value());
  EXPECT_EQ(*early.requeue_after, std::chrono::milliseconds(500));
  Plan late = PlanAt(job, running, At(11));
  EXPECT_EQ(late.status.phase, "Failed") << "10.1 s: the deadline is at most 1 s late";
  ASSERT_NE(Cond(late.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(late.status, "Failed")->reason, "DeadlineExceeded");
}

// A job created suspended says so in PodsReady (kubectl get tj's PODS column) as a job suspended
// while running does: it had no PodsReady at all, and the column was empty (review). Its resume
// creates the gang, and the column then says the pods start.
TEST(Planner, AJobCreatedSuspendedShowsItInThePodsColumn) {
  auto job = Job(2);
  job.spec.run_policy.suspend = true;
  Plan s = PlanAt(job, {}, kT0);
  EXPECT_EQ(s.status.phase, "Suspended");
  EXPECT_EQ(Count(s, Kind::kCreateReplica), 0);
  const api::Condition* pods = Cond(s.status, kPodsReadyCondition);
  ASSERT_NE(pods, nullptr) << "PODS must not be blank";
  EXPECT_EQ(pods->status, "False");
  EXPECT_EQ(pods->reason, "Suspended");
  EXPECT_EQ(pods->message, "the job is suspended: its replicas are deleted");
  job.status = s.status;
  job.spec.run_policy.suspend = false;
  Plan r = PlanAt(job, {}, At(10));
  EXPECT_EQ(Count(r, Kind::kCreateReplica), 2);
  ASSERT_NE(Cond(r.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(r.status, kPodsReadyCondition)->reason, kPodsStartingReason);
}

// A review found: a job created suspended (a queue that admits jobs by resuming them, as Kueue
// does) was resumed as a gang restart: attempt 1, gangRestarts 1, its seconds waiting for the
// first gang counted as time without training, and a startTime from before its admission. No
// gang of it ran: the first starts as attempt 0, and startTime is set when it is admitted.
TEST(Planner, AJobCreatedSuspendedStartsItsFirstGangOnResumeNotARestart) {
  auto job = Job(2);
  job.spec.run_policy.suspend = true;
  Plan s = PlanAt(job, {}, kT0);
  EXPECT_EQ(s.status.start_time, "") << "not started while it waits";
  job.status = s.status;
  job.status = PlanAt(job, {}, At(50)).status;
  job.spec.run_policy.suspend = false;
  Plan r = PlanAt(job, {}, At(100));
  EXPECT_EQ(r.status.phase, "Pending");
  EXPECT_EQ(r.status.attempt, 0);
  EXPECT_EQ(r.status.start_time, "2026-11-21T10:01:40Z");
  EXPECT_EQ(r.status.recovery.gang_restarts, 0);
  EXPECT_EQ(r.status.recovery.restart_from_step, -1);
  EXPECT_EQ(Count(r, Kind::kCreateReplica), 2);
  for (const auto& a : r.actions) {
    if (a.kind == Kind::kCreateReplica) {
      EXPECT_EQ(a.attempt, 0) << a.name;
    }
  }
  ASSERT_NE(Cond(r.status, "Suspended"), nullptr);
  EXPECT_EQ(Cond(r.status, "Suspended")->status, "False");
  // It runs, then is suspended and resumed: that resume is a new gang, as before.
  job.status = r.status;
  job.status =
      PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)},
             At(110))
          .status;
  ASSERT_EQ(job.status.phase, "Running");
  job.spec.run_policy.suspend = true;
  job.status = PlanAt(job, {}, At(120)).status;
  job.spec.run_policy.suspend = false;
  EXPECT_EQ(PlanAt(job, {}, At(130)).status.attempt, 1);
}

TEST(Planner, SuspendDeletesAndResumeRecreates) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.start_time = "2026-11-21T09:00:00Z";  // started (not one created suspended)
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

// Seen on the cluster: a suspended job said "its replicas are deleted" while a rank that could
// not answer SIGTERM stayed Terminating for its 30 s grace. Deleted once none is there.
TEST(Planner, ASuspendSaysItsReplicasAreDeletedOnlyOnceTheyAreGone) {
  auto job = Job(2);
  const std::vector<ObservedReplica> running = {Replica(0, 0, ReplicaPhase::kRunning),
                                                Replica(1, 0, ReplicaPhase::kRunning)};
  job.status = PlanAt(job, running, kT0).status;
  ASSERT_EQ(job.status.phase, "Running");
  ASSERT_NE(Cond(job.status, "PodsReady"), nullptr);
  job.spec.run_policy.suspend = true;
  Plan s = PlanAt(job, running, At(1));
  ASSERT_EQ(s.status.phase, "Suspended");
  EXPECT_EQ(Cond(s.status, "PodsReady")->message,
            "the job is suspended: its replicas are being deleted (2 still there)");
  bool said = false;
  for (const auto& e : s.events) {
    said = said || e.message == "job suspended: its replicas are being deleted (2 still there)";
  }
  EXPECT_TRUE(said) << "no Suspended event that says the replicas are still there";
  job.status = s.status;
  std::vector<ObservedReplica> terminating = {running[1]};
  terminating[0].terminating = true;
  Plan still = PlanAt(job, terminating, At(20));
  EXPECT_EQ(Cond(still.status, "PodsReady")->message,
            "the job is suspended: its replicas are being deleted (1 still there)");
  job.status = still.status;
  Plan gone = PlanAt(job, {}, At(31));
  EXPECT_EQ(Cond(gone.status, "PodsReady")->message,
            "the job is suspended: its replicas are deleted");
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

// The planner's ttl rule as the Kubernetes executor shares it (a job whose spec does not parse).
TEST(Planner, TtlLeftCountsFromTheCompletionTime) {
  const std::string done = "2026-11-21T10:00:00Z";
  EXPECT_EQ(TtlLeft(done, 30, At(10)), std::chrono::seconds(20));
  EXPECT_EQ(TtlLeft(done, 30, At(30)), Duration::zero());
  EXPECT_EQ(TtlLeft(done, 30, At(3000)), Duration::zero());
  EXPECT_EQ(TtlLeft(done, 0, At(0)), Duration::zero());
  // Never looked at again before it expired, never further than the longest spec duration.
  EXPECT_EQ(TtlLeft(done, 30, At(10) + std::chrono::microseconds(1)), std::chrono::seconds(20));
  EXPECT_EQ(TtlLeft(done, 30, At(30) - std::chrono::microseconds(1)), Duration(1));
  EXPECT_EQ(TtlLeft(done, INT64_MAX, At(10)), std::chrono::seconds(api::kMaxPolicySeconds));
  // No readable completion time: counted from now.
  EXPECT_EQ(TtlLeft("", 30, At(10)), std::chrono::seconds(30));
}

// Durations past the parser's cap (a spec built elsewhere): above ~9.2e9 s, seconds overflow
// nanoseconds, and a wrapped time point lies in the past.
TEST(Planner, HugeDurationsSaturateInsteadOfWrappingIntoThePast) {
  auto job = Job(1);
  job.spec.run_policy.ttl_seconds_after_finished = 99999999999;
  job.status.phase = "Succeeded";
  job.status.completion_time = "2026-11-21T10:00:00Z";
  Plan kept = PlanAt(job, {}, At(10));
  EXPECT_EQ(Count(kept, Kind::kDeleteJob), 0);
  ASSERT_TRUE(kept.requeue_after.has_value());
  EXPECT_GT(*kept.requeue_after, std::chrono::hours(24 * 365));
  EXPECT_LE(*kept.requeue_after, std::chrono::seconds(api::kMaxPolicySeconds));

  for (std::int64_t deadline : {std::int64_t{99999999999}, INT64_MAX}) {
    auto fresh = Job(2);
    fresh.spec.run_policy.active_deadline_seconds = deadline;
    Plan p = PlanAt(fresh, {}, kT0);
    EXPECT_EQ(p.status.phase, "Pending") << deadline;
    EXPECT_EQ(Count(p, Kind::kCreateReplica), 2) << deadline;
    EXPECT_LE(*p.requeue_after, std::chrono::seconds(api::kMaxPolicySeconds));
  }
}

TEST(Planner, CleanPodPolicyAllDeletesFinishedReplicasToo) {
  auto job = Job(2);
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kAll;
  job.status.phase = "Succeeded";
  Plan p = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kSucceeded), Replica(1, 0, ReplicaPhase::kSucceeded)}, kT0);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 2);
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kNone;
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
// A 2-replica job Running since 10:00:00 with a 60 s progress deadline, and a pass that reads
// rank 0 at step 10 (in.now to set).
PlanInput RunningAtStep10(api::TrainingJob* job) {
  job->spec.run_policy.progress_deadline_seconds = 60;
  job->status.phase = "Running";
  job->status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
  PlanInput in;
  in.job = job;
  in.replicas = {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)};
  in.progress = ObservedProgress{10, 0, 100, 1.5};
  return in;
}

TEST(Planner, UnreachableStatusIsReportedNotRestarted) {
  auto job = Job(2);
  PlanInput in = RunningAtStep10(&job);
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

// Issue 9 item 1: a replica is a pod (a node of gpusPerReplica ranks), never a rank.
struct PodsCase {
  int replicas;
  int gpus;
  int pods;
};
class PlannerPods : public ::testing::TestWithParam<PodsCase> {};

TEST_P(PlannerPods, OnePodPerReplicaWhateverTheGpus) {
  const auto c = GetParam();
  auto job = Job(c.replicas);
  job.spec.gpus_per_replica = c.gpus;
  Plan p = PlanAt(job, {}, kT0);
  ASSERT_EQ(Count(p, Kind::kCreateReplica), c.pods);
  for (int r = 0; r < c.pods; ++r) EXPECT_EQ(p.actions[r].rank, r);
  job.status = p.status;
  std::vector<ObservedReplica> running;
  for (int r = 0; r < c.pods; ++r) {
    running.push_back(Replica(r, 0, ReplicaPhase::kRunning));
    running.back().world_size = job.spec.world_size();
  }
  Plan run = PlanAt(job, running, At(1));
  EXPECT_TRUE(run.actions.empty());
  EXPECT_EQ(run.status.phase, "Running");
  EXPECT_EQ(run.status.replicas.running, c.pods);
  job.status = run.status;
  std::vector<ObservedReplica> done;
  for (int r = 0; r < c.pods; ++r) done.push_back(Replica(r, 0, ReplicaPhase::kSucceeded));
  Plan fin = PlanAt(job, done, At(2));
  EXPECT_EQ(fin.status.phase, "Succeeded");
  EXPECT_EQ(fin.status.replicas.succeeded, c.pods);
  // A failed pod counts once, however many ranks it ran.
  done[0] = Replica(0, 0, ReplicaPhase::kFailed, 1);
  Plan failed = PlanAt(job, done, At(2));
  EXPECT_EQ(failed.status.phase, "Failed");
  EXPECT_EQ(failed.status.replicas.failed, 1);
  EXPECT_EQ(failed.status.replicas.succeeded, c.pods - 1);
}

INSTANTIATE_TEST_SUITE_P(ReplicasTimesGpus, PlannerPods,
                         ::testing::Values(PodsCase{2, 4, 2}, PodsCase{3, 1, 3}, PodsCase{1, 8, 1},
                                           PodsCase{2, 0, 2}, PodsCase{4, 2, 4}));

// Issue 9 item 7: a change of the world restarts the gang, uncounted, never mixing worlds.
struct ResizeCase {
  int old_replicas;
  int old_gpus;
  int new_replicas;
  int new_gpus;
  bool restart;
};
class PlannerResize : public ::testing::TestWithParam<ResizeCase> {};

TEST_P(PlannerResize, NewWorldIsANewAttempt) {
  const auto c = GetParam();
  auto job = Job(c.new_replicas);
  job.spec.gpus_per_replica = c.new_gpus;
  job.status.phase = "Running";
  job.status.attempt = 2;
  job.status.restarts = 1;
  const int old_world = c.old_replicas * std::max(1, c.old_gpus);
  std::vector<ObservedReplica> running;
  for (int r = 0; r < c.old_replicas; ++r) {
    running.push_back(Replica(r, 2, ReplicaPhase::kRunning));
    running.back().world_size = old_world;
    running.back().nproc_per_node = std::max(1, c.old_gpus);
  }
  Plan p = PlanAt(job, running, kT0);
  if (!c.restart) {
    EXPECT_TRUE(p.actions.empty());
    EXPECT_EQ(p.status.attempt, 2);
    return;
  }
  EXPECT_EQ(p.status.phase, "Restarting");
  EXPECT_EQ(p.status.attempt, 3);
  EXPECT_EQ(p.status.restarts, 1) << "a resize is not a failure";
  EXPECT_EQ(Count(p, Kind::kCreateReplica), 0) << "no pod of the new world beside the old";
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), c.old_replicas) << "rank 0 is never left alone";
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "Resized");
  // The event says the truth about both sizes: a resize 2 -> 1 deletes two pods, not "all 1".
  const Event* e = nullptr;
  for (const auto& ev : p.events) e = ev.reason == "GangRestart" ? &ev : e;
  ASSERT_NE(e, nullptr);
  const std::string old_n = std::to_string(c.old_replicas);
  const std::string new_n = std::to_string(c.new_replicas);
  EXPECT_TRUE(e->message.starts_with(
      c.old_replicas == c.new_replicas
          ? "restarting all " + new_n + " replicas as attempt 3: world changed"
          : "restarting with " + new_n + " replica(s) (was " + old_n + ") as attempt 3, deleting " +
                old_n + " pod(s): world changed"))
      << e->message;
  // Once the old world is gone, the new one starts whole.
  job.status = p.status;
  Plan next = PlanAt(job, {}, At(1));
  EXPECT_EQ(Count(next, Kind::kCreateReplica), c.new_replicas);
  for (const auto& a : next.actions) EXPECT_EQ(a.attempt, 3);
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, PlannerResize,
    ::testing::Values(ResizeCase{2, 0, 3, 0, true}, ResizeCase{3, 0, 1, 0, true},
                      ResizeCase{2, 0, 1, 0, true}, ResizeCase{2, 1, 2, 2, true},
                      ResizeCase{2, 4, 2, 2, true}, ResizeCase{2, 0, 2, 1, false},
                      ResizeCase{2, 2, 2, 2, false}));

// A resize under a gang one of whose replicas failed permanently (exit 1-127), seen in the same
// pass (the edit raced the failure, or the operator was down): the failure fails the job, and no
// uncounted Resized restart stands in for it. A retryable loss beside it still resizes.
TEST(PlannerResizeFailure, APermanentFailureWinsOverAResize) {
  auto job = Job(3);
  job.status.phase = "Running";
  job.status.attempt = 1;
  auto world_of_two = [](ObservedReplica r) {
    r.world_size = 2;
    r.nproc_per_node = 1;
    return r;
  };
  auto bad = world_of_two(Replica(1, 1, ReplicaPhase::kFailed, 2, "Error"));
  bad.message = "INVALID_ARGUMENT: dataset /data/fashion-mnist: no such file";
  Plan p = PlanAt(job, {world_of_two(Replica(0, 1, ReplicaPhase::kRunning)), bad}, kT0);
  EXPECT_EQ(p.status.phase, "Failed");
  EXPECT_EQ(p.status.attempt, 1);
  ASSERT_NE(Cond(p.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(p.status, "Failed")->reason, "PermanentFailure");
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->exit_code, 2);
  EXPECT_EQ(Cond(p.status, "Restarting"), nullptr);
  // Rank 1 failed retryably (a segfault): the resize restarts the gang at the new size.
  Plan q = PlanAt(job,
                  {world_of_two(Replica(0, 1, ReplicaPhase::kRunning)),
                   world_of_two(Replica(1, 1, ReplicaPhase::kFailed, 139, "Error"))},
                  kT0);
  EXPECT_EQ(q.status.attempt, 2);
  ASSERT_NE(Cond(q.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(q.status, "Restarting")->reason, "Resized");
}

// The same when the edit shrinks the gang below the failed rank (replicas 4 -> 2, rank 3 exited
// 2 while ranks 0-2 wait for its replacement in place): its pod is no replica "outside the
// gang" to delete quietly, and no Resized restart follows once it is gone.
TEST(PlannerResizeFailure, APermanentFailureBeyondTheNewSizeStillFailsTheJob) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.attempt = 1;
  auto world_of_four = [](ObservedReplica r) {
    r.world_size = 4;
    r.nproc_per_node = 1;
    return r;
  };
  auto bad = world_of_four(Replica(3, 1, ReplicaPhase::kFailed, 2, "Error"));
  bad.message = "INVALID_ARGUMENT: dataset shard 3: no such file";
  Plan p = PlanAt(job,
                  {world_of_four(Replica(0, 1, ReplicaPhase::kRunning)),
                   world_of_four(Replica(1, 1, ReplicaPhase::kRunning)),
                   world_of_four(Replica(2, 1, ReplicaPhase::kRunning)), bad},
                  kT0);
  EXPECT_EQ(p.status.phase, "Failed");
  EXPECT_EQ(p.status.attempt, 1);
  ASSERT_NE(Cond(p.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(p.status, "Failed")->reason, "PermanentFailure");
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 3);
  EXPECT_EQ(p.status.last_failure->exit_code, 2);
  EXPECT_EQ(Cond(p.status, "Restarting"), nullptr);
}

// An edit of what a replica runs (train.epochs 40 -> 20 on the real cluster) under a running
// gang: the old gang is restarted as a whole from the new spec, never joined by a replacement
// built from the new spec (which, there, exited 0 at its own end while rank 0 waited for it).
api::TrainingJob EditedJob(int replicas) {
  auto job = InPlaceJob(replicas);
  job.metadata.generation = 2;  // the edit
  job.status.progress = api::Progress{7792, 3, 0, 0, "2026-11-21T10:00:00Z"};
  return job;
}
ObservedReplica Stamped(ObservedReplica r, const std::string& hash, std::int64_t generation) {
  r.spec_hash = hash;
  r.spec_generation = generation;
  return r;
}

TEST(PlannerSpecChange, AnOldSpecGangWithALostReplicaRestartsAsAWholeNotInPlace) {
  const auto job = EditedJob(2);
  PlanInput in;
  in.job = &job;
  in.now = At(1);
  in.spec_hashes = {"new0", "new1"};
  // Rank 1's pod was deleted (it answered SIGTERM with 143); rank 0 still runs the old spec.
  auto lost = Stamped(Replica(1, 0, ReplicaPhase::kFailed, 143, "Error"), "old1", 1);
  lost.terminating = true;
  in.replicas = {Stamped(Replica(0, 0, ReplicaPhase::kRunning), "old0", 1), lost};
  Plan p = PlanReconcile(in);
  EXPECT_EQ(p.status.phase, "Restarting");
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.restarts, 0) << "an edit is not a failure";
  EXPECT_EQ(p.status.in_place_recoveries, 0) << "no replacement of the new spec in the old gang";
  EXPECT_TRUE(p.status.replaced_pods.empty());
  EXPECT_EQ(p.status.recovery.restart_from_step, 7792);
  EXPECT_EQ(Count(p, Kind::kCreateReplica), 0);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 1) << "the old rank 0 goes (rank 1 goes already)";
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "SpecChanged");
  bool event = false;
  for (const auto& e : p.events) {
    event = event || (e.reason == "SpecChanged" &&
                      e.message.find("the spec changed (generation 1 -> 2)") != std::string::npos);
  }
  EXPECT_TRUE(event);
}

TEST(PlannerSpecChange, AnEditOfARunningGangRestartsItAtOnce) {
  const auto job = EditedJob(2);
  PlanInput in;
  in.job = &job;
  in.now = At(1);
  in.spec_hashes = {"new0", "new1"};
  in.replicas = {Stamped(Replica(0, 0, ReplicaPhase::kRunning), "old0", 1),
                 Stamped(Replica(1, 0, ReplicaPhase::kPending), "old1", 1)};
  Plan p = PlanReconcile(in);
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 2);
  for (const auto& a : p.actions) {
    EXPECT_EQ(a.grace, std::nullopt) << a.name << ": a gang that trains agrees on its last step";
  }
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "SpecChanged");
}

// A review found an edit's restart of a job whose checkpoints die with its pods (the shipped
// examples) saying "from the newest checkpoint" beside CheckpointsEphemeral, and then training
// from step 0. It says where the new attempt starts; of a program of the user's, nothing.
TEST(PlannerSpecChange, TheRestartSaysWhereTheNewAttemptStarts) {
  auto message = [](bool ephemeral, bool command) {
    auto job = EditedJob(2);
    if (command) job.spec.command = {"python3", "train.py"};
    PlanInput in;
    in.job = &job;
    in.now = At(1);
    in.spec_hashes = {"new0", "new1"};
    in.checkpoints_ephemeral = ephemeral;
    in.replicas = {Stamped(Replica(0, 0, ReplicaPhase::kRunning), "old0", 1),
                   Stamped(Replica(1, 0, ReplicaPhase::kRunning), "old1", 1)};
    Plan p = PlanReconcile(in);
    for (const auto& e : p.events) {
      if (e.reason == "SpecChanged") return e.message;
    }
    return std::string("no SpecChanged event");
  };
  const std::string kept = message(false, false);
  EXPECT_NE(kept.find("new attempt of the new spec from the newest checkpoint, not counted"),
            std::string::npos)
      << kept;
  const std::string lost = message(true, false);
  EXPECT_NE(lost.find("new attempt of the new spec from step 0 (spec.checkpoint has no volume: "
                      "the checkpoints died with the old pods), not counted"),
            std::string::npos)
      << lost;
  const std::string own = message(false, true);
  EXPECT_NE(own.find("new attempt of the new spec, not counted"), std::string::npos) << own;
}

TEST(PlannerSpecChange, WhatBuildsTheSamePodOrCarriesNoStampChangesNothing) {
  const auto job = EditedJob(2);
  auto quiet = [&job](std::vector<ObservedReplica> replicas, std::vector<std::string> hashes) {
    PlanInput in;
    in.job = &job;
    in.now = At(1);
    in.spec_hashes = std::move(hashes);
    in.replicas = std::move(replicas);
    Plan p = PlanReconcile(in);
    EXPECT_EQ(p.status.attempt, 0);
    EXPECT_TRUE(p.actions.empty());
    return p;
  };
  // An edit that leaves the pods as they were (backoffLimit, say): the hashes match.
  quiet({Stamped(Replica(0, 0, ReplicaPhase::kRunning), "same0", 1),
         Stamped(Replica(1, 0, ReplicaPhase::kRunning), "same1", 1)},
        {"same0", "same1"});
  // Pods of an older operator carry no stamp: no restart on an upgrade.
  quiet({Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)},
        {"new0", "new1"});
  // Pods of this generation built by an operator that builds pods differently: no restart.
  quiet({Stamped(Replica(0, 0, ReplicaPhase::kRunning), "older-build0", 2),
         Stamped(Replica(1, 0, ReplicaPhase::kRunning), "older-build1", 2)},
        {"new0", "new1"});
  // An executor that does not stamp its replicas.
  quiet({Stamped(Replica(0, 0, ReplicaPhase::kRunning), "old0", 1),
         Stamped(Replica(1, 0, ReplicaPhase::kRunning), "old1", 1)},
        {});
  // A finished job is left as it is.
  auto done = job;
  done.status.phase = "Succeeded";
  PlanInput in;
  in.job = &done;
  in.now = At(1);
  in.spec_hashes = {"new0", "new1"};
  in.replicas = {Stamped(Replica(0, 0, ReplicaPhase::kSucceeded), "old0", 1),
                 Stamped(Replica(1, 0, ReplicaPhase::kSucceeded), "old1", 1)};
  Plan d = PlanReconcile(in);
  EXPECT_EQ(d.status.phase, "Succeeded");
  EXPECT_EQ(d.status.attempt, 0);
}

// An edit of the template's labels only (a cost label): the replicas run what the new spec
// runs (the same run hash), so they are relabeled in place, with no restart; it used to restart
// the gang as SpecChanged, losing the work since its last checkpoint. Not when another replica
// of the gang runs something else, nor for a pod without a run hash (an older operator's).
TEST(PlannerSpecChange, AnEditOfTheLabelsAloneRelabelsThePodsInPlace) {
  const auto job = EditedJob(2);
  auto plan = [&job](std::vector<std::string> run_hashes) {
    PlanInput in;
    in.job = &job;
    in.now = At(1);
    in.spec_hashes = {"new0", "new1"};
    in.run_hashes = {"run0", "run1"};
    for (int rank = 0; rank < 2; ++rank) {
      auto r = Stamped(Replica(rank, 0, ReplicaPhase::kRunning), "old" + std::to_string(rank), 1);
      r.run_hash = run_hashes[static_cast<std::size_t>(rank)];
      in.replicas.push_back(r);
    }
    return PlanReconcile(in);
  };
  Plan p = plan({"run0", "run1"});
  EXPECT_EQ(p.status.attempt, 0);
  EXPECT_EQ(p.status.phase, "Running");
  EXPECT_EQ(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 0);
  ASSERT_EQ(Count(p, Kind::kRelabel), 2);
  for (const auto& a : p.actions) {
    if (a.kind == Kind::kRelabel) {
      EXPECT_EQ(a.name, "job-a0-" + std::to_string(a.rank));
      EXPECT_EQ(a.reason, "the spec changed (generation 1 -> 2) in the pods' labels only");
    }
  }

  for (const auto& other :
       {std::vector<std::string>{"run0", "changed1"}, std::vector<std::string>{"run0", ""}}) {
    Plan restart = plan(other);
    EXPECT_EQ(restart.status.attempt, 1);
    ASSERT_NE(Cond(restart.status, "Restarting"), nullptr);
    EXPECT_EQ(Cond(restart.status, "Restarting")->reason, "SpecChanged");
    EXPECT_EQ(Count(restart, Kind::kRelabel), 0);
  }
}

// An edit under a gang one of whose replicas failed permanently (exit 1-127): the
// failure is read first and fails the job, rather than a SpecChanged restart standing in for it.
TEST(PlannerSpecChange, APermanentFailureWinsOverAnEdit) {
  const auto job = EditedJob(2);
  PlanInput in;
  in.job = &job;
  in.now = At(1);
  in.spec_hashes = {"new0", "new1"};
  auto bad = Stamped(Replica(1, 0, ReplicaPhase::kFailed, 2, "Error"), "old1", 1);
  bad.message = "INVALID_ARGUMENT: dataset /data/fashion-mnist: no such file";
  in.replicas = {Stamped(Replica(0, 0, ReplicaPhase::kRunning), "old0", 1), bad};
  Plan p = PlanReconcile(in);
  EXPECT_EQ(p.status.phase, "Failed");
  EXPECT_EQ(p.status.attempt, 0);
  ASSERT_NE(Cond(p.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(p.status, "Failed")->reason, "PermanentFailure");
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->exit_code, 2);
  EXPECT_EQ(Cond(p.status, "Restarting"), nullptr);
  // So does a replica that reports another rank's permanent failure.
  auto reported = Stamped(Replica(1, 0, ReplicaPhase::kFailed, 2, "Error"), "old1", 1);
  reported.message = std::string(contract::kCausedByPrefix) + "0: INVALID_ARGUMENT: bad shard";
  in.replicas = {Stamped(Replica(0, 0, ReplicaPhase::kRunning), "old0", 1), reported};
  Plan r = PlanReconcile(in);
  EXPECT_EQ(r.status.phase, "Failed");
  EXPECT_EQ(r.status.attempt, 0);
  // A retryable loss beside the edit still restarts the gang from the new spec.
  in.replicas = {Stamped(Replica(0, 0, ReplicaPhase::kRunning), "old0", 1),
                 Stamped(Replica(1, 0, ReplicaPhase::kFailed, 139, "Error"), "old1", 1)};
  Plan q = PlanReconcile(in);
  EXPECT_EQ(q.status.attempt, 1);
  ASSERT_NE(Cond(q.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(q.status, "Restarting")->reason, "SpecChanged");
}

// An operator upgrade (a new default runner image, another binary or checkpoint directory:
// PlanInput::options_hash) never puts two runner builds in one gang: a lost rank is not
// replaced in place beside a survivor built otherwise; the gang restarts, not counted. A gang
// that loses no rank runs on.
ObservedReplica BuiltBy(ObservedReplica r, const std::string& options_hash,
                        const std::string& image) {
  r.options_hash = options_hash;
  r.image = image;
  return r;
}

PlanInput UpgradedInput(const api::TrainingJob& job, std::vector<ObservedReplica> replicas) {
  PlanInput in;
  in.job = &job;
  in.now = At(1);
  in.options_hash = "new-options";
  in.image = "runner:2";
  in.replicas = std::move(replicas);
  return in;
}

// The upgrade costs nothing; the loss that asked for the replacement counts as it would have:
// a crash does, a pod deleted from outside (SIGTERM, 143) does not.
TEST(PlannerUpgrade, ALostRankBesideASurvivorOfAnotherBuildRestartsTheGang) {
  auto job = InPlaceJob(3);
  job.status.progress = api::Progress{500, 1, 0, 0, "2026-11-21T10:00:00Z"};
  // A crash (counted, were it replaced in place) beside survivors of the old build.
  auto crashed = BuiltBy(Replica(2, 0, ReplicaPhase::kFailed, 139, "Error"), "old", "runner:1");
  Plan p = PlanReconcile(UpgradedInput(
      job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "old", "runner:1"),
            BuiltBy(Replica(1, 0, ReplicaPhase::kRunning), "old", "runner:1"), crashed}));
  EXPECT_EQ(p.status.phase, "Restarting");
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.restarts, 1) << "a crash counts, upgrade or not";
  EXPECT_EQ(p.status.in_place_recoveries, 0);
  EXPECT_TRUE(p.status.replaced_pods.empty());
  EXPECT_EQ(p.status.recovery.restart_from_step, 500) << "from the newest checkpoint";
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->exit_code, 139);
  EXPECT_EQ(Count(p, Kind::kCreateReplica), 0);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 3);
  for (const auto& a : p.actions) {
    // A rank was lost: the gang trains no more, and only rank 0 has a save to make.
    EXPECT_EQ(a.grace, a.rank == 0 ? std::nullopt : std::optional<Duration>(kNoWorkLeftGrace))
        << a.name;
  }
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "OperatorUpgraded");
  const std::string& m = Cond(p.status, "Restarting")->message;
  EXPECT_NE(m.find("rank 2 is not replaced in place: job-a0-0 was built by another operator "
                   "configuration (runner image runner:1 -> runner:2); new attempt from the "
                   "newest checkpoint (the loss counts against backoffLimit)"),
            std::string::npos)
      << m;
  // A pod deleted from outside (SIGTERM: 143) beside them: nothing counts.
  auto deleted = BuiltBy(Replica(2, 0, ReplicaPhase::kFailed, 143, "Error"), "old", "runner:1");
  Plan free = PlanReconcile(UpgradedInput(
      job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "old", "runner:1"),
            BuiltBy(Replica(1, 0, ReplicaPhase::kRunning), "old", "runner:1"), deleted}));
  EXPECT_EQ(free.status.attempt, 1);
  EXPECT_EQ(free.status.restarts, 0);
  ASSERT_NE(Cond(free.status, "Restarting"), nullptr);
  EXPECT_NE(Cond(free.status, "Restarting")
                ->message.find("new attempt from the newest checkpoint, not counted against "
                               "backoffLimit"),
            std::string::npos);
  // The same stamps but one image: no images named.
  Plan same_image = PlanReconcile(
      UpgradedInput(job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "old", "runner:2"),
                          BuiltBy(Replica(1, 0, ReplicaPhase::kRunning), "old", "runner:2"),
                          BuiltBy(crashed, "old", "runner:2")}));
  ASSERT_NE(Cond(same_image.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(same_image.status, "Restarting")->reason, "OperatorUpgraded");
  EXPECT_EQ(Cond(same_image.status, "Restarting")->message.find("runner image"), std::string::npos);
}

TEST(PlannerUpgrade, SurvivorsOfThisConfigurationOrOfUnknownBuildAreJoinedInPlace) {
  const auto job = InPlaceJob(2);
  auto lost = [](ObservedReplica r) {
    r.phase = ReplicaPhase::kFailed;
    r.exit_code = 143;
    r.reason = "Error";
    r.terminating = true;
    return r;
  };
  const std::vector<std::pair<ObservedReplica, const char*>> survivors = {
      {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "new-options", "runner:2"), "same stamp"},
      {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "", "runner:2"), "no stamp, same image"},
      {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "", ""), "no stamp, image unknown"},
  };
  for (const auto& [survivor, what] : survivors) {
    Plan p = PlanReconcile(UpgradedInput(job, {survivor, lost(Replica(1, 0, {}))}));
    EXPECT_EQ(p.status.attempt, 0) << what;
    EXPECT_EQ(p.status.in_place_recoveries, 1) << what;
    EXPECT_EQ(p.status.replaced_pods, std::vector<std::string>{"job-a0-1"}) << what;
  }
  // No stamp and another image: built otherwise.
  Plan p = PlanReconcile(UpgradedInput(
      job,
      {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "", "runner:1"), lost(Replica(1, 0, {}))}));
  EXPECT_EQ(p.status.attempt, 1);
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "OperatorUpgraded");
  // An executor that does not stamp: nothing to compare.
  PlanInput unstamped = UpgradedInput(
      job,
      {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "old", "runner:1"), lost(Replica(1, 0, {}))});
  unstamped.options_hash.clear();
  unstamped.image.clear();
  EXPECT_EQ(PlanReconcile(unstamped).status.in_place_recoveries, 1);
}

// An admission webhook may rewrite a pod's spec.containers[].image (a registry mirror, a digest
// pinned by a policy engine); the operator reads the pod's spec, never the kubelet's resolved
// status.containerStatuses[].image. A stamped pod is judged by its stamp alone. An unstamped one
// (an older operator's) by its image: one rewritten to the same repository and tag elsewhere is
// the same runner build, not an upgrade; another tag (or digest) still is.
TEST(PlannerUpgrade, AnImageAWebhookRewroteIsTheSameBuild) {
  const auto job = InPlaceJob(2);
  auto lost = [](ObservedReplica r) {
    r.phase = ReplicaPhase::kFailed;
    r.exit_code = 143;
    r.reason = "Error";
    r.terminating = true;
    return r;
  };
  auto with_image = [](PlanInput in, const std::string& image) {
    in.image = image;
    return in;
  };
  const std::string configured = "ghcr.io/ringtrain/runner:0.3";
  const std::string digest =
      "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  for (const std::string& rewritten :
       {std::string("mirror.example.com/ghcr.io/ringtrain/runner:0.3"),
        std::string("harbor.example.com:8443/ghcr-proxy/ringtrain/runner:0.3"),
        std::string("mirror.example.com/ringtrain/runner:0.3" + digest),
        std::string("ghcr.io/ringtrain/runner:0.3" + digest)}) {
    for (const char* stamp : {"", "new-options"}) {
      Plan p = PlanReconcile(with_image(
          UpgradedInput(job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), stamp, rewritten),
                              lost(Replica(1, 0, {}))}),
          configured));
      EXPECT_EQ(p.status.attempt, 0) << rewritten << " stamp '" << stamp << "'";
      EXPECT_EQ(p.status.in_place_recoveries, 1) << rewritten << " stamp '" << stamp << "'";
    }
  }
  // Docker Hub's short names are the long ones.
  EXPECT_EQ(
      PlanReconcile(with_image(UpgradedInput(job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning),
                                                           "", "docker.io/library/runner:2"),
                                                   lost(Replica(1, 0, {}))}),
                               "runner:2"))
          .status.in_place_recoveries,
      1);
  // Another tag, another repository, another digest: another build.
  for (const std::string& other :
       {std::string("mirror.example.com/ghcr.io/ringtrain/runner:0.2"),
        std::string("ghcr.io/someone/runner:0.3"), std::string("ghcr.io/ringtrain/runner"),
        std::string("ghcr.io/ringtrain/runner@sha256:"
                    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff")}) {
    Plan p = PlanReconcile(
        with_image(UpgradedInput(job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "", other),
                                       lost(Replica(1, 0, {}))}),
                   std::string(configured + digest)));
    EXPECT_EQ(p.status.attempt, 1) << other;
    ASSERT_NE(Cond(p.status, "Restarting"), nullptr) << other;
    EXPECT_EQ(Cond(p.status, "Restarting")->reason, "OperatorUpgraded") << other;
  }
  // A reference by digest alone against one by tag alone (a policy webhook that pins tags to
  // digests, an operator configured by digest): nothing tells them the same, so another build.
  const std::string ffff =
      "@sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";
  for (const auto& [pod_image, operator_image] : std::vector<std::pair<std::string, std::string>>{
           {"ghcr.io/ringtrain/runner" + ffff, "ghcr.io/ringtrain/runner:0.4"},
           {"ghcr.io/ringtrain/runner:0.3", "ghcr.io/ringtrain/runner" + ffff}}) {
    Plan p = PlanReconcile(with_image(
        UpgradedInput(job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "", pod_image),
                            lost(Replica(1, 0, {}))}),
        operator_image));
    EXPECT_EQ(p.status.attempt, 1) << pod_image << " vs " << operator_image;
    ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
    EXPECT_EQ(Cond(p.status, "Restarting")->reason, "OperatorUpgraded");
  }
}

TEST(PlannerUpgrade, AGangThatLosesNoRankRunsOn) {
  const auto job = InPlaceJob(2);
  Plan p = PlanReconcile(
      UpgradedInput(job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "old", "runner:1"),
                          BuiltBy(Replica(1, 0, ReplicaPhase::kRunning), "", "runner:0")}));
  EXPECT_EQ(p.status.phase, "Running");
  EXPECT_EQ(p.status.attempt, 0);
  EXPECT_TRUE(p.actions.empty());
}

// The loss was planned (replaced in place, the lost pod deleted and gone) by the operator before
// the upgrade: the new one does not create the replacement beside the old build either.
TEST(PlannerUpgrade, AReplacementPlannedBeforeTheUpgradeIsNotCreatedBesideTheOldBuild) {
  auto job = InPlaceJob(2);
  job.status.phase = "Restarting";
  job.status.in_place_recoveries = 1;
  job.status.replaced_pods = {"job-a0-1"};
  Plan p = PlanReconcile(
      UpgradedInput(job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "old", "runner:1")}));
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.restarts, 0);
  EXPECT_EQ(Count(p, Kind::kCreateReplica), 0);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 1);
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "OperatorUpgraded");
  EXPECT_NE(Cond(p.status, "Restarting")
                ->message.find("lost rank 1 (job-a0-1) is not replaced in "
                               "place: job-a0-0 was built by another"),
            std::string::npos)
      << Cond(p.status, "Restarting")->message;
  // Built by this configuration: the replacement is created.
  Plan same = PlanReconcile(UpgradedInput(
      job, {BuiltBy(Replica(0, 0, ReplicaPhase::kRunning), "new-options", "runner:2")}));
  EXPECT_EQ(same.status.attempt, 0);
  EXPECT_EQ(Count(same, Kind::kCreateReplica), 1);
}

// Nor is a rank missing from a gang an operator configured otherwise began to create (it
// stopped before it created all of them).
TEST(PlannerUpgrade, AGangBegunBeforeTheUpgradeIsNotCompletedWithTheNewBuild) {
  auto job = InPlaceJob(3);
  job.status.phase = "Pending";
  Plan p = PlanReconcile(
      UpgradedInput(job, {BuiltBy(Replica(0, 0, ReplicaPhase::kPending), "old", "runner:1"),
                          BuiltBy(Replica(1, 0, ReplicaPhase::kPending), "old", "runner:1")}));
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.restarts, 0);
  EXPECT_EQ(Count(p, Kind::kCreateReplica), 0);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 2);
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "OperatorUpgraded");
  EXPECT_NE(Cond(p.status, "Restarting")
                ->message.find("missing rank 2 (job-a0-2) is not created: "
                               "job-a0-0 was built by another"),
            std::string::npos)
      << Cond(p.status, "Restarting")->message;
  // Begun by this configuration: completed.
  Plan same = PlanReconcile(UpgradedInput(
      job, {BuiltBy(Replica(0, 0, ReplicaPhase::kPending), "new-options", "runner:2"),
            BuiltBy(Replica(1, 0, ReplicaPhase::kPending), "new-options", "runner:2")}));
  EXPECT_EQ(same.status.attempt, 0);
  EXPECT_EQ(Count(same, Kind::kCreateReplica), 1);
}

// Issue 9 item 10: the root cause over its consequences, read before the gang is deleted.
ObservedReplica Failed(int rank, int exit_code, std::string message, int finished_s) {
  ObservedReplica r = Replica(rank, 0, ReplicaPhase::kFailed, exit_code, "Error");
  r.message = std::move(message);
  r.finished_at = At(finished_s);
  return r;
}

TEST(Planner, WaitsForTheRootCauseWhileOnlyAConsequenceIsKnown) {
  auto job = Job(2);
  job.status.phase = "Running";
  const std::string lost =
      "UNAVAILABLE: gradient all-reduce at step 1000: all-reduce: lost peer rank 0 (connection "
      "closed)";
  std::vector<ObservedReplica> seen = {Replica(0, 0, ReplicaPhase::kRunning),
                                       Failed(1, 138, lost, 10)};
  Plan wait = PlanAt(job, seen, At(12));
  EXPECT_TRUE(wait.actions.empty()) << "the gang must not be deleted before rank 0 says why";
  EXPECT_EQ(wait.status.phase, "Running");
  EXPECT_FALSE(wait.status.last_failure.has_value());
  ASSERT_TRUE(wait.requeue_after.has_value());
  EXPECT_EQ(*wait.requeue_after, Duration(std::chrono::seconds(28)));

  // Rank 0 ends with its own cause: it is the one reported, and it is permanent.
  seen[0] = Failed(0, 1, "PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied", 13);
  Plan root = PlanAt(job, seen, At(13));
  EXPECT_EQ(root.status.phase, "Failed");
  ASSERT_TRUE(root.status.last_failure.has_value());
  EXPECT_EQ(root.status.last_failure->rank, 0);
  EXPECT_EQ(root.status.last_failure->message,
            "PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied");
  ASSERT_FALSE(root.events.empty());
  EXPECT_NE(root.events.back().message.find("Permission denied"), std::string::npos);

  // Rank 0 never ends: after the grace the consequence is all there is.
  seen[0] = Replica(0, 0, ReplicaPhase::kRunning);
  Plan late = PlanAt(job, seen, At(40));
  EXPECT_EQ(late.status.phase, "Restarting");
  EXPECT_EQ(late.status.last_failure->rank, 1);
  EXPECT_EQ(Count(late, Kind::kDeleteReplica), 2);
}

TEST(Planner, CausedByNamesTheFirstFailingRank) {
  auto job = Job(3);
  job.status.phase = "Running";
  const std::string cause = "PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied";
  // Rank 0's pod is gone; ranks 1 and 2 both carry rank 0's cause.
  std::vector<ObservedReplica> seen = {
      Failed(1, 1, std::string(contract::kCausedByPrefix) + "0: " + cause, 10),
      Failed(2, 1, std::string(contract::kCausedByPrefix) + "0: " + cause, 11)};
  Plan p = PlanAt(job, seen, At(11));
  EXPECT_EQ(p.status.phase, "Failed");
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 0);
  EXPECT_EQ(p.status.last_failure->message, cause);
  EXPECT_EQ(p.status.last_failure->exit_code, 1);
}

TEST(Planner, OwnCausePreferredOverLostPeerWhateverTheRank) {
  auto job = Job(2);
  job.status.phase = "Running";
  Plan p = PlanAt(job,
                  {Failed(0, 138, "UNAVAILABLE: all-reduce: lost peer rank 1 (reset)", 5),
                   Failed(1, 137, "", 4)},
                  At(6));
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 1);
  EXPECT_EQ(p.status.last_failure->exit_code, 137);
}

// Issue 9 item 12: the final status is final.
TEST(Planner, SuccessTakesTheFinalStepFromRankZerosTerminationMessage) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.progress = api::Progress{4404, 9, 900, 0.5, "2026-11-21T09:59:00Z"};
  auto r0 = Replica(0, 0, ReplicaPhase::kSucceeded);
  r0.message = R"({"step":4690,"epoch":10,"samplesPerSecond":1234.5,"loss":0.31})";
  Plan p = PlanAt(job, {r0, Replica(1, 0, ReplicaPhase::kSucceeded)}, kT0);
  EXPECT_EQ(p.status.phase, "Succeeded");
  ASSERT_TRUE(p.status.progress.has_value());
  EXPECT_EQ(p.status.progress->step, 4690);
  EXPECT_EQ(p.status.progress->epoch, 10);
  EXPECT_DOUBLE_EQ(p.status.progress->samples_per_second, 1234.5);
  EXPECT_DOUBLE_EQ(p.status.progress->loss, 0.31);
  EXPECT_EQ(p.status.replicas.succeeded, 2);
  EXPECT_EQ(p.status.progress->test_accuracy, -1) << "no evaluation in the message";
  // The final model's evaluation, to a millionth, as the runner writes it.
  r0.message = R"({"step":4690,"epoch":10,"loss":0.31,"test_accuracy":0.8945000171661377})";
  Plan q = PlanAt(job, {r0, Replica(1, 0, ReplicaPhase::kSucceeded)}, kT0);
  ASSERT_TRUE(q.status.progress.has_value());
  EXPECT_DOUBLE_EQ(q.status.progress->test_accuracy, 0.8945);
  EXPECT_EQ(q.status.progress->test_mse, -1);
  ASSERT_NE(Cond(q.status, "Succeeded"), nullptr);
  EXPECT_EQ(Cond(q.status, "Succeeded")->message,
            "all 2 replicas succeeded: step 4690, test accuracy 0.8945");
  EXPECT_EQ(Cond(p.status, "Succeeded")->message, "all 2 replicas succeeded: step 4690");
}

// The last evaluation is the job's until the next one: through new steps, a restarted gang that
// has not evaluated yet, and a rank 0 that recovers.
TEST(Planner, TheLastEvaluationStaysUntilTheNextOne) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
  PlanInput in;
  in.job = &job;
  in.replicas = {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)};
  ObservedProgress read{938, 1, 100, 0.45};
  read.test_accuracy = 0.8528;
  in.progress = read;
  in.now = At(30);
  Plan first = PlanReconcile(in);
  ASSERT_TRUE(first.status.progress.has_value());
  EXPECT_DOUBLE_EQ(first.status.progress->test_accuracy, 0.8528);
  job.status = first.status;
  // A later step, no evaluation in this read (a new rank 0 after a restart): kept.
  in.progress = ObservedProgress{1200, 1, 100, 0.4};
  in.now = At(40);
  Plan later = PlanReconcile(in);
  EXPECT_EQ(later.status.progress->step, 1200);
  EXPECT_DOUBLE_EQ(later.status.progress->test_accuracy, 0.8528);
  job.status = later.status;
  // The next evaluation replaces it.
  read = ObservedProgress{1876, 2, 100, 0.35};
  read.test_accuracy = 0.8712;
  in.progress = read;
  in.now = At(50);
  Plan next = PlanReconcile(in);
  EXPECT_DOUBLE_EQ(next.status.progress->test_accuracy, 0.8712);
  EXPECT_EQ(next.status.progress->test_mse, -1);
  job.status = next.status;
  // A recovering rank 0 changes nothing of it.
  ObservedProgress idle{1876, 2, 0, 0.35};
  idle.idle = true;
  idle.training = true;
  idle.state = "recovering";
  in.progress = idle;
  in.now = At(60);
  EXPECT_DOUBLE_EQ(PlanReconcile(in).status.progress->test_accuracy, 0.8712);
  // An edit made it a regression model: its first MSE leaves no accuracy behind.
  read = ObservedProgress{1900, 2, 100, 0.2};
  read.test_mse = 0.05;
  in.progress = read;
  in.now = At(70);
  Plan other = PlanReconcile(in);
  EXPECT_EQ(other.status.progress->test_accuracy, -1);
  EXPECT_DOUBLE_EQ(other.status.progress->test_mse, 0.05);
}

TEST(Planner, ABadFinalStatusNeverBreaksTheEnd) {
  for (const std::string bad :
       {"", "not json", "[1,2]", R"({"step":"many","epoch":null})", R"({"step":)", "{}"}) {
    auto job = Job(1);
    job.status.phase = "Running";
    job.status.progress = api::Progress{10, 1, 5, 0.5, "2026-11-21T09:59:00Z"};
    auto r0 = Replica(0, 0, ReplicaPhase::kSucceeded);
    r0.message = bad;
    Plan p = PlanAt(job, {r0}, kT0);
    EXPECT_EQ(p.status.phase, "Succeeded") << bad;
    EXPECT_EQ(p.status.progress->step, 10) << bad;
  }
  EXPECT_EQ(ParseRunnerStatus(R"({"step":7,"samples_per_second":2.5})")->samples_per_second, 2.5);
}

TEST(Planner, CountsAfterFailedAreNotStale) {
  auto job = Job(2);
  job.status.phase = "Running";
  Plan failed = PlanAt(job,
                       {Replica(0, 0, ReplicaPhase::kRunning),
                        Failed(1, 1, "INVALID_ARGUMENT: dataset /data: no such file", 1)},
                       At(1));
  ASSERT_EQ(failed.status.phase, "Failed");
  EXPECT_EQ(Count(failed, Kind::kDeleteReplica), 1);  // cleanPodPolicy Running
  job.status = failed.status;
  // Rank 0 stops on the delete: stopped by the job's end, it did not fail (nor does a 137 of
  // one that ignored the SIGTERM); an OOM kill after the end is its own.
  auto r0 = Failed(0, 143, "", 2);
  r0.terminating = true;
  Plan later = PlanAt(job, {r0, Failed(1, 1, "", 1)}, At(3));
  EXPECT_EQ(later.status.replicas.running, 0);
  EXPECT_EQ(later.status.replicas.pending, 0);
  EXPECT_EQ(later.status.replicas.failed, 1);
  auto killed = Failed(0, 137, "", 2);
  killed.terminating = true;
  EXPECT_EQ(PlanAt(job, {killed, Failed(1, 1, "", 1)}, At(3)).status.replicas.failed, 1);
  killed.reason = "OOMKilled";
  EXPECT_EQ(PlanAt(job, {killed, Failed(1, 1, "", 1)}, At(3)).status.replicas.failed, 2);
  // And once the pods are gone, what ended stays counted.
  job.status = later.status;
  Plan gone = PlanAt(job, {}, At(4));
  EXPECT_EQ(gone.status.replicas.failed, 1);
  EXPECT_EQ(gone.status.replicas.running, 0);
}

TEST(RetryableCodes, FollowTheContract) {
  EXPECT_FALSE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 1)));
  EXPECT_FALSE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 127)));
  EXPECT_TRUE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 128)));
  EXPECT_TRUE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 255)));
  EXPECT_TRUE(IsRetryable(Replica(0, 0, ReplicaPhase::kFailed, 0, "Evicted")));
  // runc could not start the program: the kubelet says exit 128, a restart cannot help.
  ObservedReplica start_error = Replica(0, 0, ReplicaPhase::kFailed, 128, "StartError");
  start_error.message = "exec: \"sh\": executable file not found in $PATH";
  EXPECT_FALSE(IsRetryable(start_error));
}

// ---- placement: the gang is placed whole or waits honestly -------------------------------

ObservedReplica Waiting(int rank, int attempt, std::string reason, std::string message) {
  ObservedReplica r = Replica(rank, attempt, ReplicaPhase::kPending);
  r.wait_reason = std::move(reason);
  r.wait_message = std::move(message);
  r.gated = true;
  return r;
}

ObservedReplica GatedRunning(int rank, int attempt) {
  ObservedReplica r = Replica(rank, attempt, ReplicaPhase::kRunning);
  r.gated = true;
  return r;
}

int CountEvents(const Plan& p, const std::string& reason) {
  int n = 0;
  for (const auto& e : p.events) n += e.reason == reason ? 1 : 0;
  return n;
}

constexpr char kInsufficientCpu[] =
    "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No "
    "preemption victims found for incoming pod..";

// On the cluster a job that then succeeded got a Warning for the kubelet's passing trouble: its
// cache of the job's Secret not synced yet, a second after the pod was created, retried by the
// kubelet. That wait is a replica starting; a Secret that does not exist is still a warning.
TEST(Placement, TheKubeletsUnsyncedSecretCacheIsNoWarning) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  const Plan passing =
      PlanAt(job,
             {GatedRunning(0, 0), Waiting(1, 0, "CreateContainerConfigError",
                                          "failed to sync secret cache: timed out waiting for the "
                                          "condition")},
             At(2));
  EXPECT_EQ(CountEvents(passing, "CreateContainerConfigError"), 0);
  ASSERT_NE(Cond(passing.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(passing.status, kPodsReadyCondition)->reason, kPodsStartingReason);
  EXPECT_NE(Cond(passing.status, kPodsReadyCondition)->message.find("failed to sync secret cache"),
            std::string::npos);
  const Plan missing = PlanAt(job,
                              {GatedRunning(0, 0), Waiting(1, 0, "CreateContainerConfigError",
                                                           "secret \"creds\" not found")},
                              At(2));
  EXPECT_EQ(CountEvents(missing, "CreateContainerConfigError"), 1);
  EXPECT_EQ(Cond(missing.status, kPodsReadyCondition)->reason, "CreateContainerConfigError");
}

TEST(Placement, AnUnschedulableRankIsShownWithTheSchedulersWordsAndNeverCounted) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 600;
  job.status = PlanAt(job, {}, kT0).status;
  std::vector<ObservedReplica> waiting = {GatedRunning(0, 0),
                                          Waiting(1, 0, "Unschedulable", kInsufficientCpu)};
  Plan p = PlanAt(job, waiting, At(2));
  EXPECT_EQ(p.status.phase, "Pending");
  const api::Condition* ready = Cond(p.status, kPodsReadyCondition);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->status, "False");
  EXPECT_EQ(ready->reason, "Unschedulable");
  EXPECT_NE(ready->message.find("job-a0-1: 0/1 nodes are available: 1 Insufficient cpu"),
            std::string::npos)
      << ready->message;
  EXPECT_EQ(CountEvents(p, "Unschedulable"), 1);
  for (const auto& e : p.events) {
    if (e.reason == "Unschedulable") {
      EXPECT_EQ(e.type, "Warning");
    }
  }
  EXPECT_EQ(Count(p, Kind::kOpenGate), 0) << "rank 0 must not start its rendezvous clock";
  EXPECT_TRUE(p.actions.empty());
  // The wait started when the gang was created (within t0's second, counted from its end), not
  // when the reason appeared.
  ASSERT_TRUE(p.requeue_after.has_value());
  EXPECT_EQ(*p.requeue_after, std::chrono::seconds(599));

  // Minutes later: still waiting, nothing spent, no second event.
  job.status = p.status;
  Plan later = PlanAt(job, waiting, At(300));
  EXPECT_EQ(later.status.restarts, 0);
  EXPECT_EQ(later.status.attempt, 0);
  EXPECT_EQ(CountEvents(later, "Unschedulable"), 0);
  EXPECT_TRUE(later.actions.empty());
  EXPECT_FALSE(later.status.last_failure.has_value());

  // The bound: the job fails with the scheduler's reason, and the placed rank is released.
  job.status = later.status;
  Plan end = PlanAt(job, waiting, At(602));
  EXPECT_EQ(end.status.phase, "Failed");
  const api::Condition* failed = Cond(end.status, "Failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, kSchedulingTimeoutReason);
  EXPECT_NE(failed->message.find("Insufficient cpu"), std::string::npos) << failed->message;
  EXPECT_NE(failed->message.find("released 1 placed replica"), std::string::npos)
      << failed->message;
  EXPECT_EQ(Count(end, Kind::kDeleteReplica), 2);
  EXPECT_EQ(end.status.restarts, 0);
  EXPECT_FALSE(end.status.last_failure.has_value()) << "no rank is to blame";
  // The wait's reason stays: it says why the job ended.
  const api::Condition* ready_at_end = Cond(end.status, kPodsReadyCondition);
  ASSERT_NE(ready_at_end, nullptr);
  EXPECT_EQ(ready_at_end->reason, "Unschedulable");
}

// A rank the API refused is missing when the wait ends (a refused in-place replacement, a
// partial gang released): the job ends, and nothing is created for it any more.
TEST(Placement, TheEndOfTheWaitCreatesNoMissingRank) {
  auto job = InPlaceJob(2);
  job.spec.run_policy.scheduling_timeout_seconds = 60;
  job.status.phase = "Restarting";
  job.status.replaced_pods = {"job-a0-1"};
  job.status.conditions.push_back({kPodsReadyCondition, "False", kPodsStartingReason,
                                   "1 of 2 replicas not running yet", "2026-11-21T10:00:00Z"});
  job.status.conditions.push_back({kReplicaFailureCondition, "True", kFailedCreateReason,
                                   "pods \"job-a0-1\" is forbidden: exceeded quota: pods-1",
                                   "2026-11-21T10:00:01Z"});
  const std::vector<ObservedReplica> survivor = {Replica(0, 0, ReplicaPhase::kRunning)};
  Plan waiting = PlanAt(job, survivor, At(30));
  EXPECT_EQ(Count(waiting, Kind::kCreateReplica), 1) << "retried while the wait lasts";
  ASSERT_NE(Cond(waiting.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(waiting.status, kPodsReadyCondition)->reason, kFailedCreateReason);
  job.status = waiting.status;
  Plan end = PlanAt(job, survivor, At(61));
  EXPECT_EQ(end.status.phase, "Failed");
  ASSERT_NE(Cond(end.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(end.status, "Failed")->reason, kSchedulingTimeoutReason);
  EXPECT_EQ(Count(end, Kind::kCreateReplica), 0);
  EXPECT_EQ(Count(end, Kind::kDeleteReplica), 1) << "the survivor is released";
}

// The survivors of an in-place recovery whose replacement the API kept refusing give up after
// their recovery timeout: the gang restarts as NotPlaced, uncounted while the scheduling
// timeout bounds the wait (which goes on); with nothing to bound it, as RecoveryFailed, not
// counted either: the loss was counted when its rank was replaced.
TEST(Placement, SurvivorsThatWaitedForARefusedReplacementRestartTheGangAsNotPlaced) {
  for (const int timeout_s : {600, 0}) {
    auto job = InPlaceJob(2);
    job.spec.run_policy.scheduling_timeout_seconds = timeout_s;
    job.status.phase = "Restarting";
    job.status.replaced_pods = {"job-a0-1"};
    job.status.conditions.push_back({kPodsReadyCondition, "False", kFailedCreateReason,
                                     "1 of 2 replicas not running yet", "2026-11-21T10:00:00Z"});
    job.status.conditions.push_back({kReplicaFailureCondition, "True", kFailedCreateReason,
                                     "pods \"job-a0-1\" is forbidden: exceeded quota: pods-1",
                                     "2026-11-21T10:00:01Z"});
    auto survivor = Replica(0, 0, ReplicaPhase::kFailed, 143, "Error");
    survivor.message =
        "caused by rank 1: CANCELLED: stopped by SIGTERM during training; in-place recovery "
        "failed: DEADLINE_EXCEEDED: no replacement joined round 1 within 2m";
    survivor.finished_at = At(120);
    Plan p = PlanAt(job, {survivor}, At(121));
    EXPECT_EQ(p.status.attempt, 1) << timeout_s;
    if (timeout_s == 0) {
      EXPECT_EQ(p.status.restarts, 0) << "unbounded: counted once, at the replacement";
      ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
      EXPECT_EQ(Cond(p.status, "Restarting")->reason, "RecoveryFailed");
      continue;
    }
    EXPECT_EQ(p.status.restarts, 0);
    ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
    EXPECT_EQ(Cond(p.status, "Restarting")->reason, "NotPlaced");
    EXPECT_NE(Cond(p.status, "Restarting")
                  ->message.find("while job-a0-1 could not be created (FailedCreate: pods "
                                 "\"job-a0-1\" is forbidden: exceeded quota"),
              std::string::npos)
        << Cond(p.status, "Restarting")->message;
    ASSERT_NE(Cond(p.status, kPodsReadyCondition), nullptr);
    EXPECT_EQ(Cond(p.status, kPodsReadyCondition)->last_transition_time, "2026-11-21T10:00:00Z")
        << "the placement wait goes on";
  }
}

TEST(Placement, ReleasingPlacedRanksIgnoresCleanPodPolicyNone) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 60;
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kNone;
  job.status = PlanAt(job, {}, kT0).status;
  std::vector<ObservedReplica> waiting = {GatedRunning(0, 0),
                                          Waiting(1, 0, "Unschedulable", kInsufficientCpu)};
  job.status = PlanAt(job, waiting, At(1)).status;
  Plan end = PlanAt(job, waiting, At(61));
  EXPECT_EQ(end.status.phase, "Failed");
  EXPECT_EQ(Count(end, Kind::kDeleteReplica), 2);
}

TEST(Placement, NoSchedulingTimeoutMeansWaitingAsLongAsTheJobMayRun) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 0;
  job.spec.run_policy.active_deadline_seconds = 3600;
  job.status = PlanAt(job, {}, kT0).status;
  std::vector<ObservedReplica> waiting = {GatedRunning(0, 0),
                                          Waiting(1, 0, "Unschedulable", kInsufficientCpu)};
  job.status = PlanAt(job, waiting, At(1)).status;
  Plan still = PlanAt(job, waiting, At(3000));
  EXPECT_EQ(still.status.phase, "Pending");
  job.status = still.status;
  Plan end = PlanAt(job, waiting, At(3601));
  EXPECT_EQ(end.status.phase, "Failed");
  const api::Condition* failed = Cond(end.status, "Failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "DeadlineExceeded");
  EXPECT_NE(failed->message.find("while waiting for its replicas: Unschedulable"),
            std::string::npos)
      << failed->message;
}

TEST(Placement, TheGateOpensOnlyOnceTheWholeGangRuns) {
  auto job = Job(3);
  job.status = PlanAt(job, {}, kT0).status;
  Plan partial = PlanAt(
      job, {GatedRunning(0, 0), GatedRunning(1, 0), Waiting(2, 0, "ContainerCreating", "")}, At(1));
  EXPECT_EQ(Count(partial, Kind::kOpenGate), 0);
  const api::Condition* starting = Cond(partial.status, kPodsReadyCondition);
  ASSERT_NE(starting, nullptr);
  EXPECT_EQ(starting->reason, kPodsStartingReason);
  EXPECT_TRUE(partial.events.empty() || CountEvents(partial, "ContainerCreating") == 0);

  job.status = partial.status;
  ObservedReplica opened = Replica(2, 0, ReplicaPhase::kRunning);  // gate already open
  Plan whole = PlanAt(job, {GatedRunning(0, 0), GatedRunning(1, 0), opened}, At(2));
  ASSERT_EQ(Count(whole, Kind::kOpenGate), 2);
  for (const auto& a : whole.actions) {
    EXPECT_EQ(a.kind, Kind::kOpenGate);
    EXPECT_NE(a.rank, 2);
  }
  const api::Condition* ready = Cond(whole.status, kPodsReadyCondition);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->status, "True");
  EXPECT_EQ(whole.status.phase, "Running");
}

TEST(Placement, TheMostTellingReasonIsShown) {
  auto job = Job(3);
  job.status = PlanAt(job, {}, kT0).status;
  Plan p = PlanAt(
      job,
      {Waiting(0, 0, "ContainerCreating", ""), Waiting(1, 0, "Unschedulable", kInsufficientCpu),
       Waiting(2, 0, "ImagePullBackOff", "Back-off pulling image \"nope:1\"")},
      At(1));
  const api::Condition* ready = Cond(p.status, kPodsReadyCondition);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->reason, "ImagePullBackOff");
  EXPECT_NE(ready->message.find("job-a0-2: Back-off pulling image"), std::string::npos);
  EXPECT_NE(ready->message.find("3 of 3 replicas not running"), std::string::npos);

  // The kubelet alternates ErrImagePull and ImagePullBackOff: one event, not one per flip.
  job.status = p.status;
  Plan flip = PlanAt(
      job,
      {Waiting(0, 0, "ContainerCreating", ""), Waiting(1, 0, "Unschedulable", kInsufficientCpu),
       Waiting(2, 0, "ErrImagePull", "rpc error: not found")},
      At(5));
  EXPECT_EQ(Cond(flip.status, kPodsReadyCondition)->reason, "ErrImagePull");
  EXPECT_TRUE(flip.events.empty());
}

TEST(Placement, AnInvalidImageNameFailsAtOnceWithoutARestart) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  Plan p = PlanAt(job,
                  {Waiting(0, 0, "InvalidImageName",
                           "Failed to apply default image tag \"Bad Image\": couldn't parse "
                           "image reference \"Bad Image\": invalid reference format"),
                   Waiting(1, 0, "InvalidImageName", "same")},
                  At(3));
  EXPECT_EQ(p.status.phase, "Failed");
  EXPECT_EQ(p.status.restarts, 0);
  EXPECT_EQ(Cond(p.status, "Failed")->reason, "InvalidImageName");
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_NE(p.status.last_failure->message.find("invalid reference format"), std::string::npos);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 2);
}

TEST(Placement, TimeInAQueueDoesNotCountAgainstTheSchedulingTimeout) {
  auto job = Job(2);
  job.metadata.labels[api::kKueueQueueLabel] = "team-a";
  job.spec.run_policy.scheduling_timeout_seconds = 600;
  job.status = PlanAt(job, {}, kT0).status;
  std::vector<ObservedReplica> gated = {
      Waiting(0, 0, "SchedulingGated", "queued in Kueue (LocalQueue team-a)"),
      Waiting(1, 0, "SchedulingGated", "queued in Kueue (LocalQueue team-a)")};
  Plan queued = PlanAt(job, gated, At(1));
  ASSERT_NE(Cond(queued.status, kQueuedCondition), nullptr);
  EXPECT_EQ(Cond(queued.status, kQueuedCondition)->status, "True");
  EXPECT_EQ(CountEvents(queued, "Queued"), 1);
  for (const auto& e : queued.events) {
    if (e.reason == "Queued") {
      EXPECT_EQ(e.type, "Normal");
    }
  }
  job.status = queued.status;
  Plan long_queued = PlanAt(job, gated, At(5000));
  EXPECT_EQ(long_queued.status.phase, "Pending");

  // Admitted at 5000 s: the placement wait starts there.
  job.status = long_queued.status;
  std::vector<ObservedReplica> admitted = {GatedRunning(0, 0),
                                           Waiting(1, 0, "Unschedulable", kInsufficientCpu)};
  Plan after = PlanAt(job, admitted, At(5000));
  EXPECT_EQ(after.status.phase, "Pending");
  EXPECT_EQ(Cond(after.status, kQueuedCondition)->status, "False");
  job.status = after.status;
  EXPECT_EQ(PlanAt(job, admitted, At(5600)).status.phase, "Pending");
  EXPECT_EQ(PlanAt(job, admitted, At(5601)).status.phase, "Failed");
}

TEST(Placement, AForeignSchedulingGateIsAWaitLikeAnyOther) {
  auto job = Job(2);  // no Kueue label: whoever gated the pods, the timeout runs
  job.spec.run_policy.scheduling_timeout_seconds = 60;
  job.status = PlanAt(job, {}, kT0).status;
  std::vector<ObservedReplica> gated = {Waiting(0, 0, "SchedulingGated", "gated"),
                                        Waiting(1, 0, "SchedulingGated", "gated")};
  job.status = PlanAt(job, gated, At(1)).status;
  EXPECT_EQ(Cond(job.status, kQueuedCondition), nullptr);
  EXPECT_EQ(PlanAt(job, gated, At(60)).status.phase, "Pending");
  EXPECT_EQ(PlanAt(job, gated, At(61)).status.phase, "Failed");
}

TEST(Placement, AResumedJobWaitsAFreshSchedulingTimeout) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 600;
  job.status = PlanAt(job, {}, kT0).status;
  std::vector<ObservedReplica> waiting = {GatedRunning(0, 0),
                                          Waiting(1, 0, "Unschedulable", kInsufficientCpu)};
  job.status = PlanAt(job, waiting, At(10)).status;
  job.spec.run_policy.suspend = true;
  job.status = PlanAt(job, waiting, At(20)).status;
  job.spec.run_policy.suspend = false;
  Plan resumed = PlanAt(job, {}, At(3600));
  EXPECT_EQ(resumed.status.phase, "Pending");
  job.status = resumed.status;
  std::vector<ObservedReplica> again = {GatedRunning(0, 1),
                                        Waiting(1, 1, "Unschedulable", kInsufficientCpu)};
  EXPECT_EQ(PlanAt(job, again, At(3700)).status.phase, "Pending");
  EXPECT_EQ(PlanAt(job, again, At(4201)).status.phase, "Failed");
}

TEST(Placement, ARefusedReplicaIsTheReasonOfTheWait) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 60;
  job.status = PlanAt(job, {}, kT0).status;
  SetJobCondition(&job.status, kReplicaFailureCondition, true, kFailedCreateReason,
                  "pods \"job-a0-1\" is forbidden: exceeded quota: pods-1", "2026-11-21T10:00:01Z");
  Plan p = PlanAt(job, {GatedRunning(0, 0)}, At(2));
  const api::Condition* ready = Cond(p.status, kPodsReadyCondition);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->reason, kFailedCreateReason);
  EXPECT_NE(ready->message.find("exceeded quota"), std::string::npos) << ready->message;
}

TEST(Placement, EndedPodsOfAnEarlierAttemptKeptByAFinalizerDoNotBlockTheNextGang) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  job.status.attempt = 1;
  ObservedReplica held = Replica(0, 0, ReplicaPhase::kFailed, 137);
  held.terminating = true;
  Plan p = PlanAt(job, {held}, At(1));
  EXPECT_EQ(Count(p, Kind::kCreateReplica), 2);

  ObservedReplica running_old = Replica(1, 0, ReplicaPhase::kRunning);
  running_old.terminating = true;
  Plan blocked = PlanAt(job, {held, running_old}, At(1));
  EXPECT_EQ(Count(blocked, Kind::kCreateReplica), 0) << "a live process of the old gang";
}

TEST(Placement, SamplesPerSecondIsRoundedForPeople) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  PlanInput in;
  in.job = &job;
  in.replicas = {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)};
  in.now = At(5);
  in.progress = ObservedProgress{100, 1, 93237.39584673308, 0.5};
  Plan p = PlanReconcile(in);
  ASSERT_TRUE(p.status.progress.has_value());
  EXPECT_DOUBLE_EQ(p.status.progress->samples_per_second, 93237.4);
}

TEST(Placement, AFailureWhileAPeerWasNeverPlacedIsNotCounted) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 600;
  job.status = PlanAt(job, {}, kT0).status;
  ObservedReplica timed_out = Replica(0, 0, ReplicaPhase::kFailed, 1 + 127);
  timed_out.message = "rendezvous timed out after 300s waiting for rank 1 (world size 2)";
  Plan p = PlanAt(job, {timed_out, Waiting(1, 0, "Unschedulable", kInsufficientCpu)}, At(301));
  EXPECT_EQ(p.status.phase, "Restarting");
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.restarts, 0);
  EXPECT_EQ(CountEvents(p, "NotPlaced"), 1);
  // The same failure with the whole gang placed counts.
  Plan counted = PlanAt(job, {timed_out, Replica(1, 0, ReplicaPhase::kRunning)}, At(301));
  EXPECT_EQ(counted.status.restarts, 1);
}

// ---- bad-node avoidance ------------------------------------------------------------------

TEST(Avoidance, ANodeLostIsAvoidedByTheNextAttempts) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  ObservedReplica lost = Replica(1, 0, ReplicaPhase::kFailed, 137, "NodeLost");
  lost.node = "gpu-7";
  ObservedReplica ok = Replica(0, 0, ReplicaPhase::kRunning);
  ok.node = "gpu-3";
  Plan p = PlanAt(job, {ok, lost}, At(10));
  EXPECT_EQ(p.status.attempt, 1);
  ASSERT_EQ(p.status.avoided_nodes.size(), 1u);
  EXPECT_EQ(p.status.avoided_nodes[0].node, "gpu-7");
  EXPECT_EQ(p.status.avoided_nodes[0].reason, "NodeLost");
  EXPECT_EQ(p.status.avoided_nodes[0].attempt, 0);
  EXPECT_EQ(CountEvents(p, "AvoidingNode"), 1);
  // Required for two attempts, then preferred.
  EXPECT_TRUE(IsAvoidanceRequired(p.status.avoided_nodes[0], 1));
  EXPECT_TRUE(IsAvoidanceRequired(p.status.avoided_nodes[0], 2));
  EXPECT_FALSE(IsAvoidanceRequired(p.status.avoided_nodes[0], 3));
}

TEST(Avoidance, OnlyCausesOfTheNodeCount) {
  ObservedReplica oom = Replica(0, 0, ReplicaPhase::kFailed, 137, "OOMKilled");
  EXPECT_FALSE(IsNodeFault(oom));
  ObservedReplica evicted = Replica(0, 0, ReplicaPhase::kFailed, 0, "Evicted");
  EXPECT_TRUE(IsNodeFault(evicted));
  ObservedReplica device = Replica(0, 0, ReplicaPhase::kFailed, 139);
  device.message = std::string(kNodeFaultMarker) + "cudaErrorDevicesUnavailable";
  EXPECT_TRUE(IsNodeFault(device));
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  oom.node = "n1";
  Plan p = PlanAt(job, {oom, Replica(1, 0, ReplicaPhase::kRunning)}, At(5));
  EXPECT_TRUE(p.status.avoided_nodes.empty());
}

TEST(Avoidance, ANodeFaultIsRetriedWhateverTheExitCode) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  ObservedReplica refused = Replica(1, 0, ReplicaPhase::kFailed, 0, "UnexpectedAdmissionError");
  refused.node = "gpu-2";
  Plan p = PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning), refused}, At(3));
  EXPECT_EQ(p.status.phase, "Restarting");
  ASSERT_EQ(p.status.avoided_nodes.size(), 1u);
  EXPECT_EQ(p.status.avoided_nodes[0].node, "gpu-2");

  // The taint manager deleted the pods of a lost node: the DisruptionTarget says so.
  ObservedReplica tainted = Replica(1, 0, ReplicaPhase::kFailed, 0, "Deleted");
  tainted.disruption = true;
  tainted.disruption_reason = "DeletionByTaintManager";
  EXPECT_TRUE(IsNodeFault(tainted));
}

// The kubelet's admission refused a pod the scheduler had placed (the device plugin disagrees):
// nothing of the job ran, so the gang restarts without spending backoffLimit, even when it is
// spent, and the placement wait (bounded by schedulingTimeoutSeconds) goes on.
TEST(Placement, APodTheNodeRejectedRestartsTheGangUncounted) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  const std::string waiting_since = Cond(job.status, kPodsReadyCondition)->last_transition_time;
  ObservedReplica rejected = Replica(1, 0, ReplicaPhase::kFailed, 0, "OutOfnvidia.com/gpu");
  rejected.never_ran = true;
  rejected.message =
      "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 1, "
      "capacity: 1";
  EXPECT_TRUE(IsRetryable(rejected));
  for (int spent : {0, 2}) {
    job.status.restarts = spent;
    Plan p = PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning), rejected}, At(3));
    EXPECT_EQ(p.status.phase, "Restarting");
    EXPECT_EQ(p.status.attempt, 1);
    EXPECT_EQ(p.status.restarts, spent) << "not counted against backoffLimit";
    EXPECT_EQ(CountEvents(p, "NodeRejected"), 1);
    EXPECT_EQ(Count(p, Kind::kDeleteReplica), 2);
    ASSERT_NE(Cond(p.status, kPodsReadyCondition), nullptr);
    EXPECT_EQ(Cond(p.status, kPodsReadyCondition)->last_transition_time, waiting_since);
  }
  // Without a scheduling timeout nothing bounds repeated refusals: counted like any failure.
  auto unbounded = job;
  unbounded.spec.run_policy.scheduling_timeout_seconds = 0;
  unbounded.status.restarts = 0;
  Plan counted = PlanAt(unbounded, {Replica(0, 0, ReplicaPhase::kRunning), rejected}, At(3));
  EXPECT_EQ(counted.status.phase, "Restarting");
  EXPECT_EQ(counted.status.restarts, 1);
  EXPECT_EQ(CountEvents(counted, "NodeRejected"), 0);
  // InPlace: only the rejected replica is replaced, counted (its replacement may be refused
  // again, and every replacement would be a new loss); with the budget spent the gang
  // restarts, uncounted as above.
  auto in_place = InPlaceJob(2);
  Plan replaced = PlanAt(in_place, {Replica(0, 0, ReplicaPhase::kRunning), rejected}, At(3));
  EXPECT_EQ(replaced.status.phase, "Restarting");
  EXPECT_EQ(replaced.status.attempt, 0);
  EXPECT_EQ(replaced.status.restarts, 1);
  EXPECT_EQ(Count(replaced, Kind::kDeleteReplica), 1);
  in_place.status.restarts = in_place.spec.run_policy.backoff_limit;
  Plan gang = PlanAt(in_place, {Replica(0, 0, ReplicaPhase::kRunning), rejected}, At(3));
  EXPECT_EQ(gang.status.attempt, 1);
  EXPECT_EQ(gang.status.restarts, in_place.spec.run_policy.backoff_limit);
  EXPECT_EQ(CountEvents(gang, "NodeRejected"), 1);
}

// Any other refusal of the kubelet is usually a race between the scheduler and the kubelet:
// the node is only preferred against (a one-node cluster must not wait kAvoidanceRelaxAfter),
// and the refusal counts against backoffLimit exactly as before.
TEST(Avoidance, ANodeThatRefusedAPodIsOnlyPreferredAgainst) {
  for (const char* reason : {"OutOfcpu", "OutOfmemory", "NodeAffinity", ""}) {
    auto job = Job(2);
    job.status = PlanAt(job, {}, kT0).status;
    ObservedReplica refused = Replica(1, 0, ReplicaPhase::kFailed, 0, reason);
    refused.never_ran = true;
    refused.node = "node-0";
    Plan p = PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning), refused}, At(3));
    EXPECT_EQ(p.status.phase, "Restarting") << reason;
    EXPECT_EQ(p.status.restarts, 0) << reason;
    ASSERT_EQ(p.status.avoided_nodes.size(), 1u) << reason;
    const api::AvoidedNode& a = p.status.avoided_nodes[0];
    EXPECT_EQ(a.node, "node-0");
    EXPECT_EQ(a.reason, *reason != '\0' ? reason : "NodeRejected");
    EXPECT_EQ(a.attempt, 0);
    EXPECT_FALSE(a.required) << reason;
    EXPECT_FALSE(IsAvoidanceRequired(a, 1)) << reason;
    ASSERT_EQ(CountEvents(p, "AvoidingNode"), 1) << reason;
    for (const auto& e : p.events) {
      if (e.reason != "AvoidingNode") continue;
      EXPECT_NE(e.message.find("prefer not to"), std::string::npos) << e.message;
      EXPECT_EQ(e.message.find("must not"), std::string::npos) << e.message;
      EXPECT_NE(e.message.find("node-0"), std::string::npos) << e.message;
    }
    // Unbounded by a scheduling timeout it counts, as before; the node is avoided the same way.
    auto unbounded = job;
    unbounded.spec.run_policy.scheduling_timeout_seconds = 0;
    Plan counted = PlanAt(unbounded, {Replica(0, 0, ReplicaPhase::kRunning), refused}, At(3));
    EXPECT_EQ(counted.status.restarts, 1) << reason;
    ASSERT_EQ(counted.status.avoided_nodes.size(), 1u) << reason;
    EXPECT_FALSE(counted.status.avoided_nodes[0].required) << reason;
  }
  // A pod that never ran on no node (nothing placed it) avoids nothing.
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  ObservedReplica unplaced = Replica(1, 0, ReplicaPhase::kFailed, 0, "OutOfcpu");
  unplaced.never_ran = true;
  Plan p = PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning), unplaced}, At(3));
  EXPECT_TRUE(p.status.avoided_nodes.empty());
  // Stopped before it started by a preemption or a deletion: its node refused nothing.
  ObservedReplica preempted = Replica(1, 0, ReplicaPhase::kFailed);
  preempted.never_ran = true;
  preempted.node = "node-0";
  preempted.disruption = true;
  preempted.disruption_reason = "PreemptionByScheduler";
  EXPECT_TRUE(PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning), preempted}, At(3))
                  .status.avoided_nodes.empty());
  ObservedReplica deleted = Replica(1, 0, ReplicaPhase::kFailed);
  deleted.never_ran = true;
  deleted.node = "node-0";
  deleted.terminating = true;
  EXPECT_TRUE(PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning), deleted}, At(3))
                  .status.avoided_nodes.empty());
  // The kubelet's admission error stays a node fault: required.
  ObservedReplica admission = Replica(1, 0, ReplicaPhase::kFailed, 0, "UnexpectedAdmissionError");
  admission.never_ran = true;
  admission.node = "node-0";
  Plan faulted = PlanAt(job, {Replica(0, 0, ReplicaPhase::kRunning), admission}, At(3));
  ASSERT_EQ(faulted.status.avoided_nodes.size(), 1u);
  EXPECT_TRUE(faulted.status.avoided_nodes[0].required);
}

// A refusal never weakens a required avoidance of the same node; a node fault after a refusal
// makes it required.
TEST(Avoidance, ARefusalNeverDowngradesARequiredAvoidance) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  job.status.attempt = 1;
  const api::AvoidedNode evicted{"node-0", "Evicted", 0, true};
  job.status.avoided_nodes = {evicted};
  ObservedReplica refused = Replica(1, 1, ReplicaPhase::kFailed, 0, "OutOfcpu");
  refused.never_ran = true;
  refused.node = "node-0";
  Plan p = PlanAt(job, {Replica(0, 1, ReplicaPhase::kRunning), refused}, At(3));
  EXPECT_EQ(p.status.attempt, 2);
  ASSERT_EQ(p.status.avoided_nodes.size(), 1u);
  EXPECT_EQ(p.status.avoided_nodes[0], evicted);
  EXPECT_TRUE(IsAvoidanceRequired(p.status.avoided_nodes[0], 2));

  // In one pass: a node fault and a refusal on the same node, in either order.
  auto fresh = Job(2);
  fresh.status = PlanAt(fresh, {}, kT0).status;
  ObservedReplica lost = Replica(0, 0, ReplicaPhase::kFailed, 137, "NodeLost");
  lost.node = "node-0";
  ObservedReplica refused0 = Replica(1, 0, ReplicaPhase::kFailed, 0, "OutOfcpu");
  refused0.never_ran = true;
  refused0.node = "node-0";
  for (const auto& replicas : {std::vector<ObservedReplica>{lost, refused0},
                               std::vector<ObservedReplica>{refused0, lost}}) {
    Plan both = PlanAt(fresh, replicas, At(3));
    ASSERT_EQ(both.status.avoided_nodes.size(), 1u);
    EXPECT_TRUE(both.status.avoided_nodes[0].required);
    EXPECT_EQ(both.status.avoided_nodes[0].reason, "NodeLost");
  }

  // A preferred entry of an earlier refusal is refreshed by a later one, and made required by
  // a node fault.
  job.status.avoided_nodes = {{"node-0", "OutOfcpu", 0, false}};
  Plan again = PlanAt(job, {Replica(0, 1, ReplicaPhase::kRunning), refused}, At(3));
  ASSERT_EQ(again.status.avoided_nodes.size(), 1u);
  EXPECT_EQ(again.status.avoided_nodes[0], (api::AvoidedNode{"node-0", "OutOfcpu", 1, false}));
  ObservedReplica lost1 = Replica(1, 1, ReplicaPhase::kFailed, 137, "NodeLost");
  lost1.node = "node-0";
  Plan faulted = PlanAt(job, {Replica(0, 1, ReplicaPhase::kRunning), lost1}, At(3));
  ASSERT_EQ(faulted.status.avoided_nodes.size(), 1u);
  EXPECT_EQ(faulted.status.avoided_nodes[0], (api::AvoidedNode{"node-0", "NodeLost", 1, true}));
}

// torchrun exits 1 when a worker fails (a lost peer as well as a bug): under ExitCode (the
// default, and Kubeflow's) that fails the job, and the message says which policy restarts it;
// under OnFailure it restarts the gang, counted, until backoffLimit. A program the runtime
// cannot find fails the job under both.
TEST(PlannerRestartPolicy, OnFailureRestartsTheGangForAnExitCodeThatSaysNothing) {
  auto plan = [](const std::string& policy, int restarts, ObservedReplica failed) {
    api::TrainingJob job = Job(2);
    job.spec.command = {"torchrun", "train.py"};
    job.spec.run_policy.restart_policy = policy;
    job.status.phase = "Running";
    job.status.restarts = restarts;
    return PlanAt(job, {failed, Replica(1, 0, ReplicaPhase::kRunning)}, At(10));
  };
  ObservedReplica torchrun = Replica(0, 0, ReplicaPhase::kFailed, 1, "Error");
  torchrun.message = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError";

  Plan exit_code = plan("ExitCode", 0, torchrun);
  EXPECT_EQ(exit_code.status.phase, "Failed");
  ASSERT_NE(Cond(exit_code.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(exit_code.status, "Failed")->reason, "PermanentFailure");
  EXPECT_NE(Cond(exit_code.status, "Failed")->message.find("OnFailure restarts the gang"),
            std::string::npos)
      << Cond(exit_code.status, "Failed")->message;

  Plan on_failure = plan("OnFailure", 0, torchrun);
  EXPECT_EQ(on_failure.status.phase, "Restarting");
  EXPECT_EQ(on_failure.status.attempt, 1);
  EXPECT_EQ(on_failure.status.restarts, 1) << "the job's own failure counts";
  ASSERT_NE(Cond(on_failure.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(on_failure.status, "Restarting")->reason, "RetryableFailure");

  Plan spent = plan("OnFailure", 2, torchrun);
  EXPECT_EQ(spent.status.phase, "Failed");
  EXPECT_EQ(Cond(spent.status, "Failed")->reason, "BackoffLimitExceeded");

  ObservedReplica missing = Replica(0, 0, ReplicaPhase::kFailed, 128, "StartError");
  missing.message = "exec: \"torchrun\": executable file not found in $PATH";
  Plan unfound = plan("OnFailure", 0, missing);
  EXPECT_EQ(unfound.status.phase, "Failed");
  EXPECT_EQ(Cond(unfound.status, "Failed")->reason, "PermanentFailure");
}

// A gang restart's cost is accounted when the new gang reports progress, which a spec.command
// program never does: status.recovery.pendingRestart stayed on the finished job for good (real
// cluster). The job's end closes it; a gang that then succeeded is counted as one that ran.
TEST(PlannerRestartPolicy, AFinishedJobHasNoPendingRestart) {
  auto finish = [](ReplicaPhase rank1) {
    api::TrainingJob job = Job(2);
    job.spec.command = {"sh", "-c", "exit 0"};
    job.status.phase = "Running";
    job.status.attempt = 1;
    job.status.restarts = 1;
    job.status.recovery.restart_from_step = 0;
    job.status.recovery.restarted_at = "2026-11-21T10:00:00Z";
    return PlanAt(job,
                  {Replica(0, 1, ReplicaPhase::kSucceeded),
                   Replica(1, 1, rank1, rank1 == ReplicaPhase::kFailed ? 2 : 0, "Error")},
                  At(10));
  };
  Plan ok = finish(ReplicaPhase::kSucceeded);
  EXPECT_EQ(ok.status.phase, "Succeeded");
  EXPECT_EQ(ok.status.recovery.restart_from_step, -1);
  EXPECT_EQ(ok.status.recovery.restarted_at, "");
  EXPECT_EQ(ok.status.recovery.gang_restarts, 1);
  Plan failed = finish(ReplicaPhase::kFailed);
  EXPECT_EQ(failed.status.phase, "Failed");
  EXPECT_EQ(failed.status.recovery.restart_from_step, -1);
  EXPECT_EQ(failed.status.recovery.gang_restarts, 0);
}

TEST(Avoidance, OnlyAMissingProgramMakesAStartErrorPermanent) {
  ObservedReplica missing = Replica(0, 0, ReplicaPhase::kFailed, 128, "StartError");
  missing.message =
      "failed to create containerd task: exec: \"train.py\": executable file not found in $PATH";
  EXPECT_FALSE(IsRetryable(missing));
  ObservedReplica hook = Replica(0, 0, ReplicaPhase::kFailed, 128, "StartError");
  hook.message = "nvidia-container-cli: initialization error: driver not loaded";
  EXPECT_TRUE(IsRetryable(hook));
  // `ringtrain run`'s words (common/process.cc: strerror's capitals) for what no restart finds:
  // a path that does not exist, a file that is not executable, a missing workingDir.
  for (const char* local :
       {"exec \"./nope.sh\": No such file or directory (relative to the workingDir /tmp/w)",
        "exec \"/data/train.sh\": Permission denied",
        "workingDir \"/nope\": No such file or directory",
        "workingDir \"/etc/hosts\": Not a directory",
        // ENOEXEC where there is no other machine to try (a script without #!).
        "exec \"./noshebang.sh\": Exec format error (not a binary for this machine, and no #! "
        "line)",
        // E2BIG: arguments too long for one exec are as long on every node.
        "exec \"/work/build/bin/ringtrain-runner\": Argument list too long"}) {
    ObservedReplica r = Replica(0, 0, ReplicaPhase::kFailed, 126, "StartError");
    r.message = local;
    EXPECT_FALSE(IsRetryable(r)) << local;
  }
  // A binary of another architecture may run on another node of a mixed cluster.
  ObservedReplica arch = Replica(0, 0, ReplicaPhase::kFailed, 128, "StartError");
  arch.message =
      "failed to create containerd task: exec /usr/local/bin/ringtrain-runner: exec "
      "format error";
  EXPECT_TRUE(IsRetryable(arch));
}

// The other waits count from times the status stores to the second too: each from the end of
// that second, never early. A wait that starts 0.9 s into a second is not over 0.6 s early.
TEST(Planner, EveryWaitIsNeverEarlyForATimeStoredToTheSecond) {
  const auto ms = [](int n) { return std::chrono::milliseconds(n); };
  {  // runPolicy.schedulingTimeoutSeconds, from PodsReady's lastTransitionTime
    auto job = Job(2);
    job.spec.run_policy.scheduling_timeout_seconds = 10;
    const std::vector<ObservedReplica> waiting = {Waiting(0, 0, "Unschedulable", kInsufficientCpu),
                                                  Waiting(1, 0, "Unschedulable", kInsufficientCpu)};
    job.status = PlanAt(job, {}, At(0) + ms(900)).status;
    job.status = PlanAt(job, waiting, At(0) + ms(900)).status;
    ASSERT_EQ(Cond(job.status, kPodsReadyCondition)->last_transition_time, "2026-11-21T10:00:00Z");
    Plan early = PlanAt(job, waiting, At(10) + ms(500));
    EXPECT_EQ(early.status.phase, "Pending") << "waited 9.6 s of its 10";
    ASSERT_TRUE(early.requeue_after.has_value());
    EXPECT_EQ(*early.requeue_after, ms(500));
    EXPECT_EQ(PlanAt(job, waiting, At(11)).status.phase, "Failed");
  }
  {  // runPolicy.progressDeadlineSeconds, from status.progress.updatedAt
    auto job = Job(2);
    PlanInput in = RunningAtStep10(&job);
    in.now = At(30) + ms(900);
    job.status = PlanReconcile(in).status;
    ASSERT_EQ(job.status.progress->updated_at, "2026-11-21T10:00:30Z");
    in.now = At(90) + ms(500);  // 59.6 s after the step was seen
    EXPECT_EQ(PlanReconcile(in).status.phase, "Running");
    in.now = At(91);
    EXPECT_EQ(PlanReconcile(in).status.phase, "Restarting");
  }
  {  // the relaxation of a required node avoidance, from PodsReady's lastTransitionTime
    auto job = Job(2);
    job.status = PlanAt(job, {}, At(0) + ms(900)).status;
    job.status.attempt = 1;
    job.status.avoided_nodes = {{"node-0", "Evicted", 0, true}};
    const std::string affinity =
        "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling..";
    const std::vector<ObservedReplica> stuck = {Waiting(0, 1, "Unschedulable", affinity),
                                                Waiting(1, 1, "Unschedulable", affinity)};
    job.status = PlanAt(job, stuck, At(10)).status;
    ASSERT_EQ(Cond(job.status, kPodsReadyCondition)->last_transition_time, "2026-11-21T10:00:00Z");
    EXPECT_EQ(PlanAt(job, stuck, At(60) + ms(500)).status.attempt, 1) << "59.6 s of 60";
    EXPECT_EQ(PlanAt(job, stuck, At(61)).status.attempt, 2);
  }
}

TEST(Avoidance, RequiredAvoidanceThatLeavesNoNodeIsRelaxedToPreferred) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  job.status.attempt = 1;
  job.status.avoided_nodes = {{"node-0", "Evicted", 0, true}};
  const std::string affinity =
      "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
      "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling..";
  std::vector<ObservedReplica> stuck = {Waiting(0, 1, "Unschedulable", affinity),
                                        Waiting(1, 1, "Unschedulable", affinity)};
  Plan early = PlanAt(job, stuck, At(10));
  EXPECT_EQ(early.status.attempt, 1);
  job.status = early.status;
  const auto since = ParseRfc3339(Cond(early.status, kPodsReadyCondition)->last_transition_time);
  ASSERT_TRUE(since.has_value());
  // Counted from the end of the stored second.
  EXPECT_EQ(PlanAt(job, stuck, *since + kAvoidanceRelaxAfter).status.attempt, 1);
  Plan relaxed = PlanAt(job, stuck, *since + kAvoidanceRelaxAfter + std::chrono::seconds(1));
  EXPECT_EQ(relaxed.status.attempt, 2);
  EXPECT_EQ(relaxed.status.restarts, 0) << "not the job's fault";
  ASSERT_EQ(relaxed.status.avoided_nodes.size(), 1u);
  EXPECT_FALSE(relaxed.status.avoided_nodes[0].required);
  EXPECT_EQ(CountEvents(relaxed, "NodeAvoidanceRelaxed"), 1);
}

// runPolicy.recovery InPlace: only the lost replica goes and comes back (same name, same
// attempt); the survivors keep running and hand it their state.
TEST(PlannerInPlace, OnlyTheLostReplicaIsReplacedInTheSameAttempt) {
  auto job = InPlaceJob(3);
  auto lost = Replica(1, 0, ReplicaPhase::kFailed, 137, "Error");
  Plan p = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), lost, Replica(2, 0, ReplicaPhase::kRunning)},
      At(5));
  ASSERT_EQ(p.actions.size(), 1u);
  EXPECT_EQ(p.actions[0].kind, Kind::kDeleteReplica);
  EXPECT_EQ(p.actions[0].name, "job-a0-1");
  EXPECT_EQ(p.status.attempt, 0) << "no new attempt: the survivors stay";
  EXPECT_EQ(p.status.restarts, 1) << "a crash counts against backoffLimit";
  EXPECT_EQ(p.status.in_place_recoveries, 1);
  EXPECT_EQ(p.status.replaced_pods, std::vector<std::string>{"job-a0-1"});
  EXPECT_EQ(p.status.phase, "Restarting");
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "InPlaceRecovery");
  // One event: the phase change is the recovery's (two identical ones read "x2" in describe).
  ASSERT_EQ(p.events.size(), 1u);
  bool recovery_event = false;
  for (const auto& e : p.events) {
    if (e.reason != "InPlaceRecovery") continue;
    recovery_event = true;
    EXPECT_NE(e.message.find("replacing rank 1 alone"), std::string::npos) << e.message;
  }
  EXPECT_TRUE(recovery_event);

  // While the lost pod terminates: nothing new is counted, and it is not created yet.
  job.status = p.status;
  lost.terminating = true;
  Plan waiting = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), lost, Replica(2, 0, ReplicaPhase::kRunning)},
      At(6));
  EXPECT_EQ(Count(waiting, Kind::kCreateReplica), 0);
  EXPECT_EQ(waiting.status.restarts, 1);
  EXPECT_EQ(waiting.status.in_place_recoveries, 1);
  EXPECT_TRUE(waiting.events.empty());

  // Gone: the same name comes back into the same attempt.
  Plan back = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(2, 0, ReplicaPhase::kRunning)}, At(7));
  ASSERT_EQ(Count(back, Kind::kCreateReplica), 1);
  EXPECT_EQ(back.actions[0].name, "job-a0-1");
  EXPECT_EQ(back.actions[0].attempt, 0);
  EXPECT_EQ(back.status.phase, "Restarting");

  job.status = back.status;
  Plan running =
      PlanAt(job,
             {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning),
              Replica(2, 0, ReplicaPhase::kRunning)},
             At(9));
  EXPECT_EQ(running.status.phase, "Running");
  EXPECT_EQ(running.status.in_place_recoveries, 1);
  EXPECT_TRUE(running.status.replaced_pods.empty()) << "the replacement runs: that loss is over";

  // The replacement is lost in turn: a new loss, counted again.
  job.status = running.status;
  Plan again =
      PlanAt(job,
             {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kFailed, 137),
              Replica(2, 0, ReplicaPhase::kRunning)},
             At(12));
  EXPECT_EQ(again.status.in_place_recoveries, 2);
  EXPECT_EQ(again.status.restarts, 2);
}

// A SIGKILLed runner writes no cause: Kubernetes falls back to its log's tail. The event says
// the signal and the last log line once; status.lastFailure keeps the whole tail.
TEST(PlannerInPlace, AKilledRankIsOneEventWithItsLastLogLine) {
  auto job = InPlaceJob(3);
  auto lost = Replica(1, 0, ReplicaPhase::kFailed, 137, "Error");
  lost.message =
      "2026-11-26T22:30:56.175 I [rank 1] serving /metrics\n"
      "2026-11-26T22:30:57.444 I [rank 1] tcp communicator ready: rank 1/2 (attempt 0)\n";
  Plan p = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), lost, Replica(2, 0, ReplicaPhase::kRunning)},
      At(5));
  ASSERT_EQ(CountEvents(p, "InPlaceRecovery"), 1);
  const std::string& m = p.events[0].message;
  EXPECT_NE(m.find("exit code 137 (SIGKILL), reason Error: last log line: "
                   "2026-11-26T22:30:57.444 I [rank 1] tcp communicator ready"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("serving /metrics"), std::string::npos) << m;
  EXPECT_EQ(p.status.last_failure->message, lost.message);

  // Another rank lost while the job is still Restarting: its own single event.
  job.status = p.status;
  lost.terminating = true;
  Plan second = PlanAt(job,
                       {Replica(0, 0, ReplicaPhase::kRunning), lost,
                        Replica(2, 0, ReplicaPhase::kFailed, 137, "Error")},
                       At(6));
  EXPECT_EQ(second.status.phase, "Restarting");
  EXPECT_EQ(second.status.in_place_recoveries, 2);
  EXPECT_EQ(CountEvents(second, "InPlaceRecovery"), 1);
}

TEST(PlannerInPlace, ADisruptionOrAnAnsweredStopIsNotCounted) {
  for (int code : {143, 0}) {
    auto job = InPlaceJob(2);
    auto lost = Replica(0, 0, ReplicaPhase::kFailed, code, code == 0 ? "Deleted" : "Error");
    Plan p = PlanAt(job, {lost, Replica(1, 0, ReplicaPhase::kRunning)}, At(1));
    EXPECT_EQ(p.status.restarts, 0) << code;
    EXPECT_EQ(p.status.in_place_recoveries, 1) << code;
    EXPECT_EQ(p.status.attempt, 0);
  }
}

TEST(PlannerInPlace, TheGangRestartsWhenNoReplicaSurvivesOrTheImageIsTheUsers) {
  auto job = InPlaceJob(2);
  Plan all = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kFailed, 138), Replica(1, 0, ReplicaPhase::kFailed, 137)},
      At(1));
  EXPECT_EQ(all.status.attempt, 1) << "no survivor kept the state: from the checkpoint";
  EXPECT_EQ(all.status.in_place_recoveries, 0);
  auto user = InPlaceJob(2);
  user.spec.command = {"python3", "train.py"};
  Plan own = PlanAt(
      user, {Replica(0, 0, ReplicaPhase::kFailed, 137), Replica(1, 0, ReplicaPhase::kRunning)},
      At(1));
  EXPECT_EQ(own.status.attempt, 1) << "a spec.command image knows no in-place protocol";
  auto gpu = InPlaceJob(2);
  gpu.spec.gpus_per_replica = 1;
  Plan cuda = PlanAt(
      gpu, {Replica(0, 0, ReplicaPhase::kFailed, 137), Replica(1, 0, ReplicaPhase::kRunning)},
      At(1));
  EXPECT_EQ(cuda.status.attempt, 1) << "the CUDA engine cannot recover in place yet";
}

// An edit of the template's RINGTRAIN_RECOVERY_TIMEOUT_SECONDS restarts no pod: the survivors
// keep the wait they were started with, and whether a lost rank is replaced alone follows it
// (a review found the spec decided: a survivor still waiting 20 s after an edit to 0 was
// deleted for a gang restart; one started with 0, which exits at the loss, got a replacement
// to wait for). The spec decides when no survivor says; runPolicy.recovery GangRestart always.
TEST(PlannerInPlace, TheDecisionFollowsTheWaitTheSurvivorsWereStartedWith) {
  const auto lost = [] { return Replica(1, 0, ReplicaPhase::kFailed, 137, "Error"); };
  const auto survivor = [](std::optional<Duration> wait) {
    auto r = Replica(0, 0, ReplicaPhase::kRunning);
    r.recovery_timeout = wait;
    return r;
  };
  auto edited_to_zero = InPlaceJob(2);
  edited_to_zero.spec.pod_template_json =
      R"({"spec":{"containers":[{"name":"runner","env":[{"name":"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS","value":"0"}]}]}})";
  ASSERT_FALSE(api::RecoversInPlace(edited_to_zero.spec));
  Plan waits = PlanAt(edited_to_zero, {survivor(std::chrono::seconds(20)), lost()}, At(5));
  EXPECT_EQ(waits.status.attempt, 0) << "the survivor waits 20 s: replaced in place";
  EXPECT_EQ(waits.status.in_place_recoveries, 1);
  ASSERT_EQ(Count(waits, Kind::kDeleteReplica), 1);
  EXPECT_EQ(waits.actions[0].name, "job-a0-1");
  Plan unsaid = PlanAt(edited_to_zero, {survivor(std::nullopt), lost()}, At(5));
  EXPECT_EQ(unsaid.status.attempt, 1) << "no survivor says: the spec's 0";

  auto job = InPlaceJob(2);
  ASSERT_TRUE(api::RecoversInPlace(job.spec));
  Plan exits = PlanAt(job, {survivor(Duration::zero()), lost()}, At(5));
  EXPECT_EQ(exits.status.attempt, 1) << "a survivor started with 0 exits at the loss";
  EXPECT_EQ(exits.status.in_place_recoveries, 0);

  auto gang = InPlaceJob(2);
  gang.spec.run_policy.recovery = "GangRestart";
  Plan restarts = PlanAt(gang, {survivor(std::chrono::seconds(120)), lost()}, At(5));
  EXPECT_EQ(restarts.status.attempt, 1) << "GangRestart asked for";
}

// A gang restart after a failure: of the built-in runner's ranks only rank 0 has work left in
// its grace (the save of the state it kept); the others are deleted with kNoWorkLeftGrace, so a
// hung one (SIGSTOPped: it cannot answer the SIGTERM) no longer holds the next attempt back for
// its pod's 30 s. A restart of a gang that may still train (an edit) keeps every grace, as does
// a spec.command image (its ranks may save on SIGTERM).
TEST(PlannerInPlace, AGangRestartAfterAFailureShortensTheGraceOfRanksWithNothingToSave) {
  const auto graces = [](const Plan& p) {
    std::map<std::string, std::optional<Duration>> out;
    for (const auto& a : p.actions) {
      if (a.kind == Kind::kDeleteReplica) out[a.name] = a.grace;
    }
    return out;
  };
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                             Replica(1, 0, ReplicaPhase::kFailed, 138, "Error"),
                                             Replica(2, 0, ReplicaPhase::kRunning)};
  auto job = InPlaceJob(3);
  job.spec.run_policy.recovery = "GangRestart";
  Plan failed = PlanAt(job, gang, At(5));
  ASSERT_EQ(failed.status.attempt, 1);
  auto g = graces(failed);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g["job-a0-0"], std::nullopt);
  EXPECT_EQ(g["job-a0-1"], kNoWorkLeftGrace);
  EXPECT_EQ(g["job-a0-2"], kNoWorkLeftGrace);

  auto user = job;
  user.spec.command = {"python3", "train.py"};
  for (const auto& [name, grace] : graces(PlanAt(user, gang, At(5)))) {
    EXPECT_EQ(grace, std::nullopt) << name << ": a spec.command rank may save on SIGTERM";
  }
  // The grace is the whole pod's: a template that gives it other work keeps it (a review found
  // a sidecar draining, or a preStop hook, would get 1 s).
  for (
      const char* tmpl :
      {R"({"spec":{"containers":[{"name":"runner"},{"name":"log-shipper","image":"x"}]}})",
       R"({"spec":{"containers":[{"name":"runner","lifecycle":{"preStop":{"exec":{"command":["sync"]}}}}]}})",
       R"({"spec":{"initContainers":[{"name":"proxy","image":"x","restartPolicy":"Always"}],"containers":[{"name":"runner"}]}})"}) {
    auto sidecar = job;
    sidecar.spec.pod_template_json = tmpl;
    for (const auto& [name, grace] : graces(PlanAt(sidecar, gang, At(5)))) {
      EXPECT_EQ(grace, std::nullopt) << name << ": " << tmpl;
    }
  }
  auto plain = job;
  plain.spec.pod_template_json =
      R"({"spec":{"initContainers":[{"name":"fetch","image":"x"}],"containers":[{"name":"runner","env":[]}]}})";
  EXPECT_EQ(graces(PlanAt(plain, gang, At(5)))["job-a0-1"], kNoWorkLeftGrace)
      << "an init container that has ended does nothing in the grace";
}

TEST(PlannerInPlace, CrashesStillExhaustBackoffLimit) {
  auto job = InPlaceJob(2);
  job.status.restarts = 2;  // backoffLimit 2
  Plan p = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kFailed, 137)},
      At(1));
  EXPECT_EQ(p.status.phase, "Failed");
  EXPECT_EQ(Cond(p.status, "Failed")->reason, "BackoffLimitExceeded");
}

TEST(PlannerInPlace, ANewAttemptForgetsTheReplacedPods) {
  auto job = InPlaceJob(2);
  job.status.replaced_pods = {"job-a0-1"};
  job.status.in_place_recoveries = 1;
  Plan p = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kFailed, 138), Replica(1, 0, ReplicaPhase::kFailed, 138)},
      At(1));
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_TRUE(p.status.replaced_pods.empty());
  EXPECT_EQ(p.status.in_place_recoveries, 1) << "the count stays";
}

TEST(PlannerInPlace, AKilledRanksOldLogIsNotTakenForAConsequence) {
  auto job = InPlaceJob(3);
  // Its termination message is its log's tail (FallbackToLogsOnError), from a recovery it took
  // part in earlier.
  auto killed = Replica(1, 0, ReplicaPhase::kFailed, 137, "Error");
  killed.message = "W lost a peer in round 0: all-reduce: lost peer rank 2 (connection reset)";
  killed.finished_at = At(1);
  EXPECT_FALSE(IsConsequence(killed));
  Plan p = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), killed, Replica(2, 0, ReplicaPhase::kRunning)},
      At(2));
  EXPECT_EQ(p.status.in_place_recoveries, 1) << "replaced at once, not after the root-cause wait";
  EXPECT_FALSE(p.requeue_after.has_value() && *p.requeue_after > std::chrono::seconds(1));
}

// The vanished-replica policy (moved from the Kubernetes executor): a replica of the running gang
// that the executor remembers and that is gone without its delete was deleted by someone else,
// a retryable failure with reason Deleted that restarts the whole gang.
Plan PlanWith(const api::TrainingJob& job, std::vector<ObservedReplica> replicas, WallTime now,
              const PlanMemory& memory, SteadyTime steady_now = {}) {
  PlanInput in;
  in.job = &job;
  in.replicas = std::move(replicas);
  in.now = now;
  in.steady_now = steady_now;
  in.memory = memory;
  return PlanReconcile(in);
}

api::TrainingJob RunningJob(int replicas) {
  auto job = Job(replicas);
  job.status.phase = "Running";
  job.status.start_time = "2026-11-21T10:00:00Z";
  return job;
}

TEST(Planner, AReplicaThatVanishedIsARetryableDeletedFailure) {
  const auto job = RunningJob(2);
  const std::vector<ObservedReplica> both = {Replica(0, 0, ReplicaPhase::kRunning),
                                             Replica(1, 0, ReplicaPhase::kRunning)};
  Plan seen = PlanWith(job, both, At(5), PlanMemory{});
  EXPECT_TRUE(seen.actions.empty());
  ASSERT_EQ(seen.memory.seen.size(), 2u);
  EXPECT_EQ(seen.memory.seen_attempt, 0);

  Plan p = PlanWith(job, {both[0]}, At(10), seen.memory);
  EXPECT_EQ(p.status.phase, "Restarting");
  EXPECT_EQ(p.status.restarts, 0) << "deleted by someone: not counted against backoffLimit";
  EXPECT_EQ(p.status.attempt, 1);
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 1);
  EXPECT_EQ(p.status.last_failure->reason, "Deleted");
  EXPECT_EQ(p.status.last_failure->exit_code, 0);
  EXPECT_EQ(p.status.last_failure->message, "pod job-a0-1 was deleted while the gang ran");
  // The survivor goes; the vanished one has nothing left to delete; no rank is re-created into
  // the old gang.
  ASSERT_EQ(Count(p, Kind::kDeleteReplica), 1);
  EXPECT_EQ(p.actions[0].name, both[0].name);
  EXPECT_EQ(Count(p, Kind::kCreateReplica), 0);
}

// Recorded on the real cluster (s1-both): `kubectl delete pod` of both pods of a running gang.
// Both got a deletionTimestamp while Running, then each runner answered the SIGTERM with exit
// 143; no survivor, so the gang restarts, and (as for one deleted pod, replaced in place) that
// is no failure of the job's: not counted against backoffLimit.
ObservedReplica DeletedBySigterm(int rank, ReplicaPhase phase) {
  auto r = Replica(rank, 0, phase, phase == ReplicaPhase::kFailed ? 143 : 0,
                   phase == ReplicaPhase::kFailed ? "Error" : "");
  r.terminating = true;
  r.node = "node-0";
  if (phase == ReplicaPhase::kFailed) {
    r.message =
        "CANCELLED: stopped by SIGTERM during training; asked to stop: the gang stopped with this "
        "rank after step 3920";
    r.finished_at = At(13);
  }
  return r;
}

TEST(Planner, PodsDeletedBySomeoneRestartTheGangUncounted) {
  for (const bool in_place : {true, false}) {
    auto job = in_place ? InPlaceJob(2) : RunningJob(2);
    job.status.restarts = 2;  // backoffLimit 2: a counted restart would fail the job
    Plan seen = PlanWith(
        job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)}, At(5),
        PlanMemory{});
    Plan deleting = PlanWith(
        job,
        {DeletedBySigterm(0, ReplicaPhase::kRunning), DeletedBySigterm(1, ReplicaPhase::kRunning)},
        At(13), seen.memory);
    EXPECT_EQ(deleting.status.attempt, 0) << in_place;
    Plan p = PlanWith(
        job,
        {DeletedBySigterm(0, ReplicaPhase::kRunning), DeletedBySigterm(1, ReplicaPhase::kFailed)},
        At(14), deleting.memory);
    EXPECT_EQ(p.status.phase, "Restarting") << in_place;
    EXPECT_EQ(p.status.attempt, 1) << in_place;
    EXPECT_EQ(p.status.restarts, 2) << in_place;
    ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
    EXPECT_EQ(Cond(p.status, "Restarting")->reason, "PodDeleted");
    // lastFailure says the deletion, not its container's end ("Error", as a kubelet reports the
    // SIGTERM's 143 before it removes the pod: the fake kubelet now does too).
    ASSERT_TRUE(p.status.last_failure.has_value());
    EXPECT_EQ(p.status.last_failure->reason, "Deleted") << in_place;
    EXPECT_EQ(p.status.last_failure->exit_code, 143) << in_place;
    const Event* e = nullptr;
    for (const auto& ev : p.events) e = ev.reason == "GangRestart" ? &ev : e;
    ASSERT_NE(e, nullptr);
    EXPECT_NE(e->message.find("exit code 143"), std::string::npos) << e->message;
    EXPECT_NE(e->message.find("not counted against backoffLimit"), std::string::npos) << e->message;
  }
}

// What stays counted: a crash or an OOM kill beside a deleted pod. A pod that exited 143
// because the executor itself deleted it (a partial gang released after a refused create) is
// no failure at all: the release is the executor's, and the gang is created again whole.
TEST(Planner, ADeletionHidesNoFailureAndTheExecutorsOwnDeletesAreNone) {
  auto job = RunningJob(2);
  Plan seen =
      PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)},
               At(5), PlanMemory{});
  auto oom = Replica(1, 0, ReplicaPhase::kFailed, 137, "OOMKilled");
  Plan both = PlanWith(job, {DeletedBySigterm(0, ReplicaPhase::kFailed), oom}, At(14), seen.memory);
  EXPECT_EQ(both.status.attempt, 1);
  EXPECT_EQ(both.status.restarts, 1) << "the OOM kill counts";

  PlanMemory released = seen.memory;
  RecordReplicaDeleted(&released, "job-a0-0");
  RecordReplicaDeleted(&released, "job-a0-1");
  Plan own = PlanWith(
      job, {DeletedBySigterm(0, ReplicaPhase::kFailed), DeletedBySigterm(1, ReplicaPhase::kFailed)},
      At(14), released);
  EXPECT_EQ(own.status.attempt, 0) << "the executor's release, not a failure";
  EXPECT_EQ(own.status.restarts, 0);
  EXPECT_FALSE(own.status.last_failure.has_value());
  EXPECT_EQ(Count(own, Kind::kCreateReplica), 0) << "not beside the pods still going";

  // A rank that exited 143 with no deletion (its own doing) counts too.
  Plan alone = PlanWith(
      job,
      {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kFailed, 143, "Error")},
      At(14), seen.memory);
  EXPECT_EQ(alone.status.restarts, 1);
}

// A runner that ignores the deletion's SIGTERM is killed when the grace period ends: exit 137,
// container reason Error. A pod deleted from outside that ends so is a disruption like one that
// answered the SIGTERM, on both recovery paths; an OOM kill (137, OOMKilled) stays counted.
ObservedReplica KilledAtGraceEnd(int rank, const std::string& reason) {
  auto r = DeletedBySigterm(rank, ReplicaPhase::kFailed);
  r.exit_code = 137;
  r.reason = reason;
  r.message = "last log line of a runner that ignored SIGTERM";
  return r;
}

TEST(Planner, APodDeletedBySomeoneAndKilledAtTheEndOfItsGracePeriodIsNotCounted) {
  for (const bool in_place : {true, false}) {
    auto job = in_place ? InPlaceJob(2) : RunningJob(2);
    job.status.restarts = 2;  // backoffLimit 2: a counted loss would fail the job
    const Plan seen = PlanWith(
        job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)}, At(5),
        PlanMemory{});
    const Plan deleting = PlanWith(
        job, {Replica(0, 0, ReplicaPhase::kRunning), DeletedBySigterm(1, ReplicaPhase::kRunning)},
        At(10), seen.memory);
    Plan killed =
        PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), KilledAtGraceEnd(1, "Error")}, At(40),
                 deleting.memory);
    EXPECT_NE(killed.status.phase, "Failed") << in_place;
    EXPECT_EQ(killed.status.restarts, 2) << in_place;
    ASSERT_NE(Cond(killed.status, "Restarting"), nullptr) << in_place;
    if (in_place) {
      EXPECT_EQ(killed.status.attempt, 0);
      EXPECT_EQ(killed.status.in_place_recoveries, 1);
      EXPECT_NE(Cond(killed.status, "Restarting")->message.find("not counted against backoffLimit"),
                std::string::npos);
    } else {
      EXPECT_EQ(killed.status.attempt, 1);
      EXPECT_EQ(Cond(killed.status, "Restarting")->reason, "PodDeleted");
    }
    // An OOM kill while it terminates is the job's own failure.
    Plan oom =
        PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), KilledAtGraceEnd(1, "OOMKilled")},
                 At(40), deleting.memory);
    EXPECT_EQ(oom.status.phase, "Failed") << in_place;
    ASSERT_NE(Cond(oom.status, "Failed"), nullptr) << in_place;
    EXPECT_EQ(Cond(oom.status, "Failed")->reason, "BackoffLimitExceeded") << in_place;
    // A 137 of a pod this executor deleted itself (only a release of a partial gang deletes a
    // rank of the attempt that did not fail) is the release: no failure, nothing counted.
    PlanMemory own = deleting.memory;
    RecordReplicaDeleted(&own, "job-a0-1");
    Plan ours = PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), KilledAtGraceEnd(1, "Error")},
                         At(40), own);
    EXPECT_NE(ours.status.phase, "Failed") << in_place;
    EXPECT_EQ(ours.status.restarts, 2) << in_place;
    EXPECT_EQ(ours.status.attempt, 0) << in_place;
  }
}

// A rank replaced in place gets a new pod of the same name: the executor's delete of the lost pod
// is not the new one's. When someone deletes the replacement later in the attempt (its runner
// ignores SIGTERM: 137 at the end of the grace period), that is not counted either.
TEST(Planner, TheReplacementOfARankIsNotTheOneTheExecutorDeleted) {
  auto job = InPlaceJob(2);
  job.status.restarts = 2;  // backoffLimit 2: a counted loss would fail the job
  Plan p =
      PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)},
               At(5), PlanMemory{});
  job.status = p.status;
  // Deleted by someone: replaced in place, not counted; the executor deletes the ended pod.
  p = PlanWith(job,
               {Replica(0, 0, ReplicaPhase::kRunning), DeletedBySigterm(1, ReplicaPhase::kFailed)},
               At(14), p.memory);
  ASSERT_EQ(Count(p, Kind::kDeleteReplica), 1);
  ASSERT_EQ(p.status.in_place_recoveries, 1);
  job.status = p.status;
  PlanMemory memory = p.memory;
  RecordReplicaDeleted(&memory, "job-a0-1");
  // Gone: created again; then the new pod runs.
  p = PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning)}, At(15), memory);
  ASSERT_EQ(Count(p, Kind::kCreateReplica), 1);
  job.status = p.status;
  p = PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)},
               At(20), p.memory);
  job.status = p.status;
  // Someone deletes the replacement; its runner is killed when the grace period ends.
  p = PlanWith(job,
               {Replica(0, 0, ReplicaPhase::kRunning), DeletedBySigterm(1, ReplicaPhase::kRunning)},
               At(30), p.memory);
  job.status = p.status;
  p = PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), KilledAtGraceEnd(1, "Error")}, At(60),
               p.memory);
  EXPECT_NE(p.status.phase, "Failed");
  EXPECT_EQ(p.status.restarts, 2);
  EXPECT_EQ(p.status.in_place_recoveries, 2);
}

// A pod deleted by someone before a freshly started executor (empty memory) saw it run: first
// seen already terminating, ended of the deletion. Nothing says this executor deleted it: not
// counted either, on both recovery paths.
TEST(Planner, APodDeletedBeforeAFreshExecutorSawItRunIsNotCounted) {
  for (const bool in_place : {true, false}) {
    for (const int code : {143, 137}) {
      auto job = in_place ? InPlaceJob(2) : RunningJob(2);
      job.status.restarts = 2;  // backoffLimit 2: a counted loss would fail the job
      auto deleted =
          code == 143 ? DeletedBySigterm(1, ReplicaPhase::kFailed) : KilledAtGraceEnd(1, "Error");
      Plan p =
          PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), deleted}, At(40), PlanMemory{});
      const std::string what = std::to_string(code) + (in_place ? " in place" : " gang");
      EXPECT_NE(p.status.phase, "Failed") << what;
      EXPECT_EQ(p.status.restarts, 2) << what;
      ASSERT_NE(Cond(p.status, "Restarting"), nullptr) << what;
      EXPECT_EQ(Cond(p.status, "Restarting")->reason, in_place ? "InPlaceRecovery" : "PodDeleted")
          << what;
    }
  }
}

// The executor released a partial gang (the API refused rank 1: ResourceQuota) and the operator
// restarted (a leader change, an upgrade) while rank 0, waiting at the gang gate, answered the
// release's SIGTERM. The fresh executor's memory is empty; the pod carries the executor's mark
// (ObservedReplica::deleted_by_executor, set before the delete): it sees what the old executor
// saw, the executor's own delete, not a pod deleted by someone else (PodDeleted).
TEST(Planner, AFreshExecutorTellsItsPredecessorsReleaseFromADeletionByOthers) {
  auto job = Job(2);
  job.status = PlanAt(job, {}, kT0).status;
  SetJobCondition(&job.status, kReplicaFailureCondition, true, kFailedCreateReason,
                  "pods \"job-a0-1\" is forbidden: exceeded quota: pods-1", "2026-11-21T10:00:01Z");
  ObservedReplica released = GatedRunning(0, 0);
  released.phase = ReplicaPhase::kFailed;
  released.exit_code = 143;
  released.reason = "Error";
  released.terminating = true;
  released.message = "CANCELLED: stopped by SIGTERM at the gang gate";
  released.finished_at = At(2);
  released.deleted_by_executor = true;
  PlanMemory old;
  RecordReplicaDeleted(&old, released.name);
  const Plan before = PlanWith(job, {released}, At(3), old);
  const Plan fresh = PlanWith(job, {released}, At(3), PlanMemory{});
  EXPECT_EQ(fresh.status, before.status);
  EXPECT_EQ(fresh.status.attempt, before.status.attempt);
  EXPECT_EQ(fresh.status.restarts, before.status.restarts);
  const api::Condition* restarting = Cond(fresh.status, "Restarting");
  if (restarting != nullptr) {
    EXPECT_NE(restarting->reason, "PodDeleted");
  }
  for (const auto& e : fresh.events) {
    EXPECT_EQ(e.message.find("not by the operator"), std::string::npos) << e.message;
  }
  // A mark left on a pod whose delete failed, in a gang created whole since (ReplicaFailure
  // False): a later deletion of it by someone else is such a deletion.
  auto whole = job;
  SetJobCondition(&whole.status, kReplicaFailureCondition, false, "Created", "all replicas created",
                  "2026-11-21T10:00:02Z");
  const Plan stale = PlanWith(whole, {released}, At(3), PlanMemory{});
  ASSERT_NE(Cond(stale.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(stale.status, "Restarting")->reason, "PodDeleted");
  // Without the mark (deleted by someone else), the same pod is such a deletion.
  released.deleted_by_executor = false;
  const Plan other = PlanWith(job, {released}, At(3), PlanMemory{});
  ASSERT_NE(Cond(other.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(other.status, "Restarting")->reason, "PodDeleted");
}

// A quota that admits one rank of two (on the real cluster: each retry of the create started a
// new attempt, a GangRestart Warning blamed on "rank 0 failed with exit code 137 (SIGKILL),
// reason ContainerStatusUnknown", 6 attempts in 2 minutes). The released rank's end, while its
// pod terminates, is the release: no failure, no new attempt; once it is gone and the create
// backoff has passed, the same attempt is created again whole, and the placement wait goes on.
TEST(Planner, AReleasedPartialGangIsCreatedAgainWholeInTheSameAttempt) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 120;
  job.status = PlanAt(job, {}, kT0).status;
  SetJobCondition(&job.status, kReplicaFailureCondition, true, kFailedCreateReason,
                  "pods \"job-a0-1\" is forbidden: exceeded quota: cpu", "2026-11-21T10:00:01Z");
  for (const int exit_code : {143, 137}) {
    ObservedReplica released = GatedRunning(0, 0);
    released.phase = ReplicaPhase::kFailed;
    released.exit_code = exit_code;
    released.reason = exit_code == 137 ? "ContainerStatusUnknown" : "Error";
    released.terminating = true;
    released.finished_at = At(2);
    for (const bool fresh : {false, true}) {
      PlanMemory memory;
      if (fresh) {
        released.deleted_by_executor = true;  // the mark, read by an executor started since
      } else {
        RecordReplicaDeleted(&memory, released.name);
      }
      const SteadyTime t0{};
      memory.failed_creates = 1;
      memory.create_retry_at = t0 + std::chrono::seconds(4);
      const Plan ending = PlanWith(job, {released}, At(3), memory, t0 + std::chrono::seconds(1));
      EXPECT_EQ(ending.status.attempt, 0) << exit_code << fresh;
      EXPECT_EQ(ending.status.restarts, 0);
      EXPECT_FALSE(ending.status.last_failure.has_value());
      EXPECT_EQ(CountEvents(ending, "GangRestart"), 0);
      EXPECT_EQ(Count(ending, Kind::kCreateReplica), 0) << "not beside the pod still going";
      EXPECT_NE(ending.status.phase, "Failed");
      EXPECT_EQ(ending.status.replicas.failed, 0) << "the release, not a failed replica";
      ASSERT_NE(Cond(ending.status, kPodsReadyCondition), nullptr);
      EXPECT_EQ(Cond(ending.status, kPodsReadyCondition)->reason, "FailedCreate")
          << "the wait's reason stays the refused create";
      // Gone, and the backoff over: the whole gang of the same attempt.
      const Plan gone = PlanWith(job, {}, At(6), ending.memory, t0 + std::chrono::seconds(5));
      EXPECT_EQ(gone.status.attempt, 0);
      EXPECT_EQ(gone.status.restarts, 0);
      ASSERT_EQ(Count(gone, Kind::kCreateReplica), 2) << exit_code << fresh;
      for (const auto& a : gone.actions) EXPECT_EQ(a.attempt, 0);
    }
  }
}

// A 2-replica InPlace job whose rank `rank` was SIGKILLed and replaced in place (counted), and
// that rank's old pod, still terminating.
api::TrainingJob ReplacedInPlace(int rank) {
  auto job = InPlaceJob(2);
  job.status.phase = "Restarting";
  job.status.restarts = 1;
  job.status.replaced_pods = {ReplicaName("job", 0, rank)};
  return job;
}
ObservedReplica OldPodOf(int rank) {
  auto old = Replica(rank, 0, ReplicaPhase::kFailed, 137, "Error");
  old.terminating = true;
  old.finished_at = At(1);
  return old;
}

// On the real cluster: rank 1 SIGKILLed (counted, replaced in place), its old pod held in
// Terminating (a sidecar that ignored SIGTERM, a 600 s grace), so its replacement could not be
// created; rank 0's recovery timed out, and the gang restart counted rank 1's SIGKILL a second
// time (restarts 2 for one loss). Counted once now; a survivor's own crash still counts.
TEST(Planner, AFailedInPlaceRecoveryDoesNotCountTheSameLossTwice) {
  for (const bool own_crash : {false, true}) {
    auto job = ReplacedInPlace(1);  // rank 1's SIGKILL, counted when it was replaced
    auto lost = OldPodOf(1);
    lost.message = "last log line: tcp communicator ready: rank 1/2 (attempt 0)";
    auto survivor = Replica(0, 0, ReplicaPhase::kFailed, 138, "Error");
    survivor.message = own_crash ? "INTERNAL: checkpoint write failed: disk full"
                                 : "caused by rank 1: UNAVAILABLE: lost peer rank 1; in-place "
                                   "recovery failed: DEADLINE_EXCEEDED: rendezvous timed out "
                                   "after 119.999s";
    survivor.finished_at = At(121);
    PlanMemory memory;
    RecordReplicaDeleted(&memory, lost.name);
    const Plan p = PlanWith(job, {survivor, lost}, At(122), memory);
    EXPECT_EQ(p.status.attempt, 1) << own_crash;
    ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
    if (own_crash) {
      EXPECT_EQ(p.status.restarts, 2) << "a new failure of its own";
      EXPECT_EQ(Cond(p.status, "Restarting")->reason, "RetryableFailure");
    } else {
      EXPECT_EQ(p.status.restarts, 1) << Cond(p.status, "Restarting")->message;
      EXPECT_EQ(Cond(p.status, "Restarting")->reason, "RecoveryFailed");
      EXPECT_NE(Cond(p.status, "Restarting")->message.find("not counted again"), std::string::npos);
    }
  }
}

// A review found: rank 0 replaced in place (counted), its old pod still terminating, then rank 1
// crashes on its own (SIGSEGV). Both are failures of their own; the lower rank won the tie, so
// the new crash passed for the replaced rank's failed recovery (not counted, blamed on rank 0).
TEST(Planner, ANewCrashBesideAReplacedRankIsCountedAndNamed) {
  auto job = ReplacedInPlace(0);  // rank 0's SIGKILL, counted when it was replaced
  const auto old = OldPodOf(0);
  auto crashed = Replica(1, 0, ReplicaPhase::kFailed, 139, "Error");
  crashed.message = "last log line: step 12";
  crashed.finished_at = At(5);
  PlanMemory memory;
  RecordReplicaDeleted(&memory, old.name);
  const Plan p = PlanWith(job, {old, crashed}, At(6), memory);
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.restarts, 2) << "a new loss of its own";
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "RetryableFailure");
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 1);
  EXPECT_EQ(p.status.last_failure->exit_code, 139);
}

// On the real cluster: rank 1 SIGSTOPped (its pod Running), rank 0's collective timed out, its
// in-place recovery waited 120 s for rank 1 in vain and it exited. The operator replaced rank 0
// alone beside the hung rank 1 (counted), whose replacement then waited in vain too, until
// backoffLimit, the hung rank never blamed nor restarted. A failed recovery restarts the gang.
TEST(Planner, ARecoveryThatFailedBesideAHungPeerRestartsTheGang) {
  auto job = InPlaceJob(2);
  auto waited = Replica(0, 0, ReplicaPhase::kFailed, 138, "Error");
  waited.message =
      "DEADLINE_EXCEEDED: step 6238: gradient all-reduce: all-reduce: timed out after 10s "
      "waiting for rank 1; in-place recovery failed: rendezvous timed out after 119.999s "
      "waiting for rank 1 (world size 2)";
  waited.finished_at = At(130);
  const Plan p =
      PlanWith(job, {waited, Replica(1, 0, ReplicaPhase::kRunning)}, At(131), PlanMemory{});
  EXPECT_EQ(p.status.in_place_recoveries, 0);
  EXPECT_EQ(p.status.attempt, 1) << "the whole gang, the hung rank with it";
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 2);
  EXPECT_EQ(p.status.restarts, 1) << "the hang is a loss, counted once";
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "RetryableFailure");
  EXPECT_NE(Cond(p.status, "Restarting")->message.find("waiting for rank 1"), std::string::npos);
  // The hung rank is the one named, not rank 0, which waited for it (on the cluster lastFailure
  // said rank 0).
  EXPECT_NE(Cond(p.status, "Restarting")
                ->message.find("rank 1 (job-a0-1) never rejoined the gang (reported by "
                               "job-a0-0, which waited for it and exited with code 138, reason "
                               "Error): DEADLINE_EXCEEDED"),
            std::string::npos)
      << Cond(p.status, "Restarting")->message;
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 1);
  EXPECT_EQ(p.status.last_failure->message, waited.message);
  // Several ranks missing, or a rank past the gang (a message written by anyone's command):
  // no one is blamed but the rank that reported it.
  for (const std::string round : {"waiting for ranks 1, 2 (world size 3)",
                                  "waiting for rank 7 (world size 8)", "waiting for rank 1"}) {
    auto other = waited;
    other.message =
        "DEADLINE_EXCEEDED: step 6238: timed out; in-place recovery failed: "
        "rendezvous timed out after 119.999s " +
        round;
    const Plan q =
        PlanWith(job, {other, Replica(1, 0, ReplicaPhase::kRunning)}, At(131), PlanMemory{});
    ASSERT_TRUE(q.status.last_failure.has_value()) << round;
    EXPECT_EQ(q.status.last_failure->rank, 0) << round;
  }
  // A spec.command program's message is its own words, whatever it says.
  auto own_program = job;
  own_program.spec.command = {"python3", "train.py"};
  const Plan program =
      PlanWith(own_program, {waited, Replica(1, 0, ReplicaPhase::kRunning)}, At(131), PlanMemory{});
  ASSERT_TRUE(program.status.last_failure.has_value());
  EXPECT_EQ(program.status.last_failure->rank, 0);
  // A loss without a failed recovery beside a running peer is still recovered in place.
  auto crashed = waited;
  crashed.message = "DEADLINE_EXCEEDED: step 6238: gradient all-reduce: timed out";
  const Plan in_place =
      PlanWith(job, {crashed, Replica(1, 0, ReplicaPhase::kRunning)}, At(131), PlanMemory{});
  EXPECT_EQ(in_place.status.in_place_recoveries, 1);
  EXPECT_EQ(in_place.status.attempt, 0);
}

// Rank 0 of attempt 0, ended (138) at At(30) after its all-reduce timed out waiting for rank 1.
ObservedReplica RankZeroTimedOutWaitingForRankOne() {
  auto waited = Replica(0, 0, ReplicaPhase::kFailed, 138, "Error");
  waited.message =
      "DEADLINE_EXCEEDED: step 2346: gradient all-reduce: all-reduce: timed out after 10s "
      "waiting for rank 1";
  waited.finished_at = At(30);
  return waited;
}

// The peer a survivor timed out on, deleted since by the taint manager with its node
// (DisruptionTarget DeletionByTaintManager): a disruption, not counted, and its node avoided,
// as when the peer's own failure is the one seen first (review: counted, node not avoided).
TEST(Planner, AHungPeerGoneWithItsNodeIsADisruptionAndItsNodeIsAvoided) {
  auto job = Job(2);
  job.status.phase = "Running";
  auto waited = RankZeroTimedOutWaitingForRankOne();
  auto lost = Replica(1, 0, ReplicaPhase::kRunning);
  lost.terminating = true;
  lost.disruption = true;
  lost.disruption_reason = "DeletionByTaintManager";
  lost.node = "n-lost";
  const Plan p = PlanWith(job, {waited, lost}, At(31), PlanMemory{});
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.restarts, 0) << "a disruption spends no backoffLimit";
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->reason, "Disrupted");
  ASSERT_EQ(p.status.avoided_nodes.size(), 1u);
  EXPECT_EQ(p.status.avoided_nodes[0].node, "n-lost");
  EXPECT_TRUE(p.status.avoided_nodes[0].required);
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 1);
}

// Recorded on the real cluster (s40, job c0b: RINGTRAIN_RECOVERY_TIMEOUT_SECONDS 0, no in-place
// recovery): rank 1 SIGSTOPped, its pod Running; rank 0's all-reduce timed out waiting for it
// and rank 0 exited 138. The operator said "rank 0 (c0b-a0-0) failed with exit code 138" and
// lastFailure.rank 0: the healthy rank blamed. The rank it waited for is named, as long as its
// own replica shows no failure of its own.
TEST(Planner, ACollectiveThatTimedOutOnAHungPeerNamesThePeer) {
  auto job = Job(2);
  job.status.phase = "Running";
  auto waited = RankZeroTimedOutWaitingForRankOne();
  const ObservedReplica hung = Replica(1, 0, ReplicaPhase::kRunning);
  const Plan p = PlanWith(job, {waited, hung}, At(31), PlanMemory{});
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.restarts, 1) << "a hang is a loss, counted";
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 2);
  ASSERT_NE(Cond(p.status, "Restarting"), nullptr);
  EXPECT_EQ(Cond(p.status, "Restarting")->message,
            "rank 1 (job-a0-1) stopped answering (reported by job-a0-0, which waited for it and "
            "exited with code 138, reason Error): DEADLINE_EXCEEDED: step 2346: gradient "
            "all-reduce: all-reduce: timed out after 10s waiting for rank 1");
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 1);
  EXPECT_EQ(p.status.last_failure->exit_code, 138);
  EXPECT_EQ(p.status.last_failure->reason, "Error");
  EXPECT_EQ(p.status.last_failure->message, waited.message);
  // Ended only of the operator's own deletion: no failure of its own either.
  auto deleted = Replica(1, 0, ReplicaPhase::kFailed, 143, "Error");
  deleted.terminating = true;
  deleted.finished_at = At(30);
  PlanMemory ours;
  RecordReplicaDeleted(&ours, deleted.name);
  const Plan q = PlanWith(job, {waited, deleted}, At(31), ours);
  ASSERT_TRUE(q.status.last_failure.has_value());
  EXPECT_EQ(q.status.last_failure->rank, 1);
  // The gang's first failure, quoted by a rank that timed out behind a live neighbour, names the
  // rank that stopped answering (ring 0 -> 1 -> 2 -> 0: rank 1 hung, rank 2 saw it first).
  auto three = Job(3);
  three.status.phase = "Running";
  auto behind = Replica(0, 0, ReplicaPhase::kFailed, 138, "Error");
  behind.message =
      "DEADLINE_EXCEEDED: step 9: gradient all-reduce: all-reduce: timed out after 10s waiting "
      "for rank 2; first failure: DEADLINE_EXCEEDED: step 9: gradient all-reduce: all-reduce: "
      "timed out after 10s waiting for rank 1 (rank 2)";
  behind.finished_at = At(30);
  auto first = Replica(2, 0, ReplicaPhase::kFailed, 138, "Error");
  first.message =
      "DEADLINE_EXCEEDED: step 9: gradient all-reduce: all-reduce: timed out after 10s waiting "
      "for rank 1";
  first.finished_at = At(30);
  const Plan ring =
      PlanWith(three, {behind, Replica(1, 0, ReplicaPhase::kRunning), first}, At(31), PlanMemory{});
  ASSERT_TRUE(ring.status.last_failure.has_value());
  EXPECT_EQ(ring.status.last_failure->rank, 1);
  EXPECT_NE(Cond(ring.status, "Restarting")->message.find("rank 1 (job-a0-1) stopped answering"),
            std::string::npos);
}

// The peer is named only where that is what the report says and the peer's replica bears it out.
TEST(Planner, APeerIsNotNamedWhereItFailedOnItsOwnOrTheReportSaysOtherwise) {
  auto job = Job(2);
  job.status.phase = "Running";
  auto waited = RankZeroTimedOutWaitingForRankOne();
  auto blamed = [](const Plan& p) {
    return p.status.last_failure ? p.status.last_failure->rank : -1;
  };
  // Rank 1 failed of its own (a crash), was deleted by someone else, or never ran.
  auto crashed = Replica(1, 0, ReplicaPhase::kFailed, 139, "Error");
  crashed.finished_at = At(30);
  auto killed = Replica(1, 0, ReplicaPhase::kFailed, 143, "Error");
  killed.terminating = true;
  killed.finished_at = At(30);
  for (const ObservedReplica& peer : {crashed, killed, Replica(1, 0, ReplicaPhase::kPending)}) {
    EXPECT_EQ(blamed(PlanWith(job, {waited, peer}, At(31), PlanMemory{})), 0) << peer.exit_code;
  }
  // Other words: a rendezvous at the start, a ring's connect, several ranks, a rank past the
  // gang, rank 0's own report.
  for (const std::string message :
       {"DEADLINE_EXCEEDED: rendezvous timed out after 300s waiting for rank 1 (world size 2)",
        "DEADLINE_EXCEEDED: tcp communicator: timed out after 10s waiting for rank 1 to connect",
        "DEADLINE_EXCEEDED: all-reduce: timed out after 10s waiting for ranks 1, 2",
        "DEADLINE_EXCEEDED: all-reduce: timed out after 10s waiting for rank 7",
        "DEADLINE_EXCEEDED: all-reduce: timed out after 10s waiting for rank 0",
        "DEADLINE_EXCEEDED: all-reduce: timed out waiting for rank 1"}) {
    auto other = waited;
    other.message = message;
    EXPECT_EQ(
        blamed(PlanWith(job, {other, Replica(1, 0, ReplicaPhase::kRunning)}, At(31), PlanMemory{})),
        0)
        << message;
  }
  // A spec.command program's message is its own words, whatever it says.
  auto own_program = job;
  own_program.spec.command = {"python3", "train.py"};
  EXPECT_EQ(
      blamed(PlanWith(own_program, {waited, Replica(1, 0, ReplicaPhase::kRunning)}, At(31), {})),
      0);
}

// Recorded on the real cluster (s40, job f2): rank 0, which hosts the rendezvous store,
// SIGSTOPped; rank 1's all-reduce timed out, the store answered nothing, its in-place recovery
// could not reach the store and it exited 138. The operator waited its root-cause grace for
// rank 0 to end, then said "rank 1 (f2-a1-1) failed with exit code 138", lastFailure.rank 1.
// Rank 1's report names rank 0 as the peer it lost with the store: rank 0 is named.
TEST(Planner, AStoreHostThatStoppedAnsweringIsNamed) {
  auto job = InPlaceJob(2);
  auto waited = Replica(1, 0, ReplicaPhase::kFailed, 138, "Error");
  waited.message =
      "UNAVAILABLE: evaluation: all-reduce: lost peer rank 0 (the rendezvous store it hosts is "
      "unreachable: rendezvous store f2-a1-0.f2.s40.svc:29500: recv: timed out); here: "
      "all-reduce: timed out after 10s waiting for rank 0; in-place recovery failed: rendezvous "
      "store f2-a1-0.f2.s40.svc:29500: handshake: recv: timed out";
  waited.finished_at = At(30);
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning), waited};
  const Plan grace = PlanWith(job, gang, At(31), PlanMemory{});
  EXPECT_EQ(grace.status.attempt, 0) << "a lost peer: the root cause's own end is waited for";
  const Plan p = PlanWith(job, gang, At(61), PlanMemory{});
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.in_place_recoveries, 0);
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 0);
  EXPECT_EQ(p.status.last_failure->exit_code, 138);
  EXPECT_EQ(p.status.last_failure->message, waited.message);
  EXPECT_NE(Cond(p.status, "Restarting")
                ->message.find("rank 0 (job-a0-0) stopped answering (reported by job-a0-1, which "
                               "waited for it and exited with code 138, reason Error): "
                               "UNAVAILABLE: evaluation: all-reduce: lost peer rank 0 (the "
                               "rendezvous store it hosts is unreachable"),
            std::string::npos)
      << Cond(p.status, "Restarting")->message;
  // A peer lost otherwise (its connection closed: it crashed) is not said to have stopped
  // answering.
  auto closed = waited;
  closed.message =
      "UNAVAILABLE: step 5: gradient all-reduce: all-reduce: lost peer rank 0 (connection "
      "closed); in-place recovery failed: rendezvous timed out after 120s waiting for rank 0 "
      "(world size 2)";
  const Plan other = PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), closed}, At(61), {});
  ASSERT_TRUE(other.status.last_failure.has_value());
  EXPECT_EQ(other.status.last_failure->rank, 0) << "named by the failed round, as before";
  EXPECT_NE(Cond(other.status, "Restarting")->message.find("never rejoined"), std::string::npos);
}

// Rank 1 of attempt 0, failed at At(30) after its all-reduce timed out waiting for rank 0 (as
// job f of s42 recorded it).
ObservedReplica RankOneThatWaitedForRankZero() {
  auto waited = Replica(1, 0, ReplicaPhase::kFailed, 138, "Error");
  waited.message =
      "UNAVAILABLE: step 5876: gradient all-reduce: all-reduce: lost peer rank 0 (the rendezvous "
      "store it hosts is unreachable: rendezvous store f-a0-0.f.default.svc:29500: recv: timed "
      "out); here: all-reduce: timed out after 20s waiting for rank 0";
  waited.finished_at = At(30);
  return waited;
}

// The account of attempt 0's rank 0, whose /status answered, then not from `since` on.
PlanMemory RankZeroSilentSince(WallTime since) {
  PlanMemory silent;
  silent.rank0_attempt = 0;
  silent.rank0_answered = true;
  silent.rank0_unanswered_since = since;
  return silent;
}

// The grace `p` deletes `name` with; a test failure when it does not delete it.
std::optional<Duration> DeleteGrace(const Plan& p, const std::string& name) {
  for (const auto& a : p.actions) {
    if (a.kind == Action::Kind::kDeleteReplica && a.name == name) return a.grace;
  }
  ADD_FAILURE() << name << " not deleted";
  return std::nullopt;
}

// Recorded on the real cluster (s42, job f): rank 0 SIGSTOPped; rank 1 timed out after 20 s and
// named it; the operator then waited its 30 s root-cause grace for rank 0 to end, and rank 0,
// which could not answer the SIGTERM, its pod's 30 s grace: 90.5 s without training. A rank 0
// whose /status has not answered since before its reporter ended is hung: the gang restarts at
// once, rank 0 with the short grace too.
TEST(Planner, AHungRankZeroIsRestartedWithoutWaitingAndWithTheShortGrace) {
  auto job = InPlaceJob(2);
  job.spec.run_policy.recovery = "GangRestart";  // as job f's ranks were started (wait 0)
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                             RankOneThatWaitedForRankZero()};
  const PlanMemory silent = RankZeroSilentSince(At(12));
  const Plan hung = PlanWith(job, gang, At(31), silent);
  EXPECT_EQ(hung.status.attempt, 1) << "no wait for a cause of its own";
  EXPECT_EQ(DeleteGrace(hung, "job-a0-0"), kNoWorkLeftGrace);
  EXPECT_EQ(hung.status.last_failure->rank, 0);

  // Not hung: its /status went silent only after the reporter ended, or less than
  // kSilentRankZeroRate before (a blip), or never answered at all (an operator that cannot reach
  // the pods knows nothing), or has not failed, or failed in another attempt. Rank 0 may still
  // end with a cause of its own and save: it is waited for and keeps its grace.
  PlanMemory late = silent;
  late.rank0_unanswered_since = At(31);
  PlanMemory blip = silent;
  blip.rank0_unanswered_since = At(25);
  PlanMemory never_answered = silent;
  never_answered.rank0_answered = false;
  PlanMemory answering = silent;
  answering.rank0_unanswered_since.reset();
  PlanMemory other_attempt = silent;
  other_attempt.rank0_attempt = 1;
  for (const PlanMemory& m : {late, blip, never_answered, answering, other_attempt, PlanMemory{}}) {
    EXPECT_EQ(PlanWith(job, gang, At(31), m).status.attempt, 0);
    const Plan after = PlanWith(job, gang, At(61), m);
    EXPECT_EQ(after.status.attempt, 1);
    EXPECT_EQ(DeleteGrace(after, "job-a0-0"), std::nullopt);
  }
  // Nor is one that answers in this very pass.
  PlanInput now_answers;
  now_answers.job = &job;
  now_answers.replicas = gang;
  now_answers.now = At(31);
  now_answers.memory = silent;
  contract::RunnerStatus alive;
  alive.state = "running";
  alive.step = 5876;
  now_answers.progress = ObserveRunnerStatus(alive);
  EXPECT_EQ(PlanReconcile(now_answers).status.attempt, 0);
  // Rank 1 hung, named by rank 0: rank 0 is the reporter and keeps its grace (its save).
  auto reporter = Replica(0, 0, ReplicaPhase::kFailed, 138, "Error");
  reporter.message =
      "DEADLINE_EXCEEDED: step 8863: gradient all-reduce: all-reduce: timed out "
      "after 60s waiting for rank 1";
  reporter.finished_at = At(30);
  const Plan other =
      PlanWith(job, {reporter, Replica(1, 0, ReplicaPhase::kRunning)}, At(31), silent);
  EXPECT_EQ(other.status.attempt, 1);
  EXPECT_EQ(DeleteGrace(other, "job-a0-1"), kNoWorkLeftGrace);
  // Where lost ranks are replaced in place, a hung rank 0 is no survivor to recover beside (a
  // replacement of rank 1 would wait for it again): the gang restarts.
  job.spec.run_policy.recovery = "InPlace";
  const Plan in_place = PlanWith(job, gang, At(31), silent);
  EXPECT_EQ(in_place.status.attempt, 1);
  EXPECT_EQ(in_place.status.in_place_recoveries, 0);
  EXPECT_EQ(DeleteGrace(in_place, "job-a0-0"), kNoWorkLeftGrace);
}

// A job that fails for good stops its gang as a gang restart after a failure does: the ranks
// with nothing left to save, a hung rank 0 among them, go with the short grace; a rank 0 that
// may still save keeps its pod's. A job out of time keeps every grace (its ranks agree on a
// last step to save).
TEST(Planner, AJobThatFailsForGoodStopsItsHungRanksWithTheShortGrace) {
  auto job = InPlaceJob(2);
  job.spec.run_policy.recovery = "GangRestart";
  job.spec.run_policy.backoff_limit = 0;
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                             RankOneThatWaitedForRankZero()};
  const PlanMemory silent = RankZeroSilentSince(At(12));
  const Plan hung = PlanWith(job, gang, At(31), silent);
  EXPECT_EQ(hung.status.phase, "Failed");
  ASSERT_NE(Cond(hung.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(hung.status, "Failed")->reason, "BackoffLimitExceeded");
  EXPECT_EQ(DeleteGrace(hung, "job-a0-0"), kNoWorkLeftGrace);
  // Not hung (its /status answers): rank 0 is waited for, then keeps its grace for its save.
  const Plan answering = PlanWith(job, gang, At(61), PlanMemory{});
  ASSERT_NE(Cond(answering.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(answering.status, "Failed")->reason, "BackoffLimitExceeded");
  EXPECT_EQ(DeleteGrace(answering, "job-a0-0"), std::nullopt);

  // A permanent failure of rank 0: rank 1, which has nothing to save, goes with the short grace.
  auto bad = Replica(0, 0, ReplicaPhase::kFailed, 2, "Error");
  bad.message = "INVALID_ARGUMENT: --batch-size: must be positive";
  bad.finished_at = At(30);
  const Plan permanent = PlanWith(job, {bad, Replica(1, 0, ReplicaPhase::kRunning)}, At(31), {});
  ASSERT_NE(Cond(permanent.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(permanent.status, "Failed")->reason, "PermanentFailure");
  EXPECT_EQ(DeleteGrace(permanent, "job-a0-1"), kNoWorkLeftGrace);
  // A later pass (the first delete did not get through) deletes with the same grace.
  auto ended = job;
  ended.status = permanent.status;
  const Plan again =
      PlanWith(ended, {bad, Replica(1, 0, ReplicaPhase::kRunning)}, At(40), permanent.memory);
  EXPECT_EQ(DeleteGrace(again, "job-a0-1"), kNoWorkLeftGrace);
  // Not so for a spec.command program: its grace is its own.
  auto own_program = job;
  own_program.spec.command = {"python3", "train.py"};
  const Plan own =
      PlanWith(own_program, {bad, Replica(1, 0, ReplicaPhase::kRunning)}, At(31), PlanMemory{});
  ASSERT_NE(Cond(own.status, "Failed"), nullptr);
  EXPECT_EQ(Cond(own.status, "Failed")->reason, "PermanentFailure");
  EXPECT_EQ(DeleteGrace(own, "job-a0-1"), std::nullopt);
}

// On the real cluster, PODS said AllPodsRunning through a whole in-place recovery whose lost pod
// took minutes to go (a sidecar that ignored SIGTERM): no replacement could exist meanwhile.
TEST(Planner, APodsColumnSaysARankReplacedInPlaceWaitsForItsLostPodToGo) {
  auto job = InPlaceJob(2);
  job.status.conditions.push_back({kPodsReadyCondition, "True", "AllPodsRunning",
                                   "all 2 replicas are running", "2026-11-21T10:00:00Z"});
  const Plan seen =
      PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)},
               At(5), PlanMemory{});
  auto lost = Replica(1, 0, ReplicaPhase::kFailed, 137, "Error");
  lost.finished_at = At(9);
  const Plan replaced =
      PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), lost}, At(10), seen.memory);
  ASSERT_EQ(replaced.status.in_place_recoveries, 1);
  const api::Condition* pods = Cond(replaced.status, kPodsReadyCondition);
  ASSERT_NE(pods, nullptr);
  EXPECT_EQ(pods->status, "False");
  EXPECT_EQ(pods->reason, kOldPodsTerminatingReason);
  EXPECT_NE(pods->message.find("job-a0-1"), std::string::npos) << pods->message;
  EXPECT_NE(pods->message.find("1 of 2 replicas running"), std::string::npos) << pods->message;
  // Still there, terminating: the same, and no replacement yet.
  job.status = replaced.status;
  lost.terminating = true;
  PlanMemory deleting = replaced.memory;
  RecordReplicaDeleted(&deleting, lost.name);
  const Plan holding =
      PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), lost}, At(70), deleting);
  ASSERT_NE(Cond(holding.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(holding.status, kPodsReadyCondition)->reason, kOldPodsTerminatingReason);
  EXPECT_EQ(Count(holding, Kind::kCreateReplica), 0);
  // Gone: the replacement is created, and once both run, PODS says so again.
  job.status = holding.status;
  const Plan gone = PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning)}, At(71), deleting);
  EXPECT_EQ(Count(gone, Kind::kCreateReplica), 1);
  job.status = gone.status;
  const Plan back =
      PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)},
               At(80), gone.memory);
  ASSERT_NE(Cond(back.status, kPodsReadyCondition), nullptr);
  EXPECT_EQ(Cond(back.status, kPodsReadyCondition)->status, "True");
}

// On the real cluster: the quota was raised, both pods were created, and rank 1 waited for
// CPU (Unschedulable); for the whole minute PodsReady still named the quota's refusal, and the
// scheduling timeout blamed it. Once every rank has a pod, the refusal is over.
TEST(Planner, ARefusedCreateIsOverOnceEveryRankHasAPod) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 120;
  job.status = PlanAt(job, {}, kT0).status;
  SetJobCondition(&job.status, kReplicaFailureCondition, true, kFailedCreateReason,
                  "pods \"job-a0-1\" is forbidden: exceeded quota: cpu", "2026-11-21T10:00:01Z");
  SetJobCondition(&job.status, kPodsReadyCondition, false, kFailedCreateReason,
                  "pods \"job-a0-1\" is forbidden: exceeded quota: cpu (2 of 2 replicas not "
                  "running)",
                  "2026-11-21T10:00:01Z");
  auto waiting = Replica(1, 0, ReplicaPhase::kPending);
  waiting.wait_reason = "Unschedulable";
  waiting.wait_message = "0/1 nodes are available: 1 Insufficient cpu.";
  const Plan p = PlanAt(job, {GatedRunning(0, 0), waiting}, At(60));
  const api::Condition* refused = Cond(p.status, kReplicaFailureCondition);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->status, "False");
  const api::Condition* pods = Cond(p.status, kPodsReadyCondition);
  ASSERT_NE(pods, nullptr);
  EXPECT_EQ(pods->reason, "Unschedulable") << pods->message;
  EXPECT_EQ(pods->last_transition_time, Cond(job.status, kPodsReadyCondition)->last_transition_time)
      << "the placement wait goes on";
  // One rank still without a pod: the refusal stands.
  const Plan partial = PlanAt(job, {GatedRunning(0, 0)}, At(60));
  ASSERT_NE(Cond(partial.status, kReplicaFailureCondition), nullptr);
  EXPECT_EQ(Cond(partial.status, kReplicaFailureCondition)->status, "True");
}

// On the real cluster the job that reached its scheduling timeout ended with
// status.replicas.failed 1: the placed rank the timeout released ended 143 as its pod went.
// The executor's own delete is no failed replica.
TEST(Placement, ARankReleasedAtTheSchedulingTimeoutIsNoFailedReplica) {
  auto job = Job(2);
  job.spec.run_policy.scheduling_timeout_seconds = 60;
  job.status = PlanAt(job, {}, kT0).status;
  const Plan end =
      PlanAt(job,
             {GatedRunning(0, 0),
              Waiting(1, 0, "Unschedulable", "0/1 nodes are available: 1 Insufficient cpu.")},
             At(61));
  ASSERT_EQ(end.status.phase, "Failed");
  ASSERT_EQ(Count(end, Kind::kDeleteReplica), 2);
  PlanMemory memory = end.memory;
  for (const auto& a : end.actions) RecordReplicaDeleted(&memory, a.name);
  job.status = end.status;
  auto released = GatedRunning(0, 0);
  released.phase = ReplicaPhase::kFailed;
  released.exit_code = 143;
  released.reason = "Error";
  released.terminating = true;
  released.finished_at = At(62);
  const Plan after = PlanWith(job, {released}, At(63), memory);
  EXPECT_EQ(after.status.phase, "Failed");
  EXPECT_EQ(after.status.replicas.failed, 0);
  // The memory of the executor's deletes ends with the job (the pass after the end forgot
  // them, as on the real cluster, where failed went 0 then 1 within 0.15 s), and a fresh
  // executor has none: the pod's end after the job's still tells the release.
  job.status = after.status;
  EXPECT_TRUE(after.memory.deleted.empty());
  EXPECT_EQ(PlanWith(job, {released}, At(64), after.memory).status.replicas.failed, 0);
  EXPECT_EQ(PlanWith(job, {released}, At(64), PlanMemory{}).status.replicas.failed, 0);
}

TEST(Planner, AVanishedReplicaTheExecutorDeletedIsJustMissing) {
  const auto job = RunningJob(2);
  const std::vector<ObservedReplica> both = {Replica(0, 0, ReplicaPhase::kRunning),
                                             Replica(1, 0, ReplicaPhase::kRunning)};
  // The executor's own delete is no failure.
  PlanMemory memory = PlanWith(job, both, At(5), PlanMemory{}).memory;
  RecordReplicaDeleted(&memory, both[1].name);
  Plan own = PlanWith(job, {both[0]}, At(10), memory);
  EXPECT_EQ(own.status.restarts, 0);
  EXPECT_FALSE(own.status.last_failure.has_value());
  EXPECT_EQ(Count(own, Kind::kCreateReplica), 1);
  // A replica seen only while terminating (deleted by us or anyone) is never added.
  auto terminating = both[1];
  terminating.terminating = true;
  Plan t = PlanWith(job, {both[0], terminating}, At(5), PlanMemory{});
  EXPECT_EQ(t.memory.seen.count(both[1].name), 0u);
  // A new attempt forgets the old gang (its status as a gang restart leaves it).
  auto next = job;
  next.status.attempt = 1;
  next.status.phase = "Restarting";
  Plan n = PlanWith(next, {}, At(20), memory);
  EXPECT_TRUE(n.memory.seen.empty());
  EXPECT_EQ(n.memory.seen_attempt, 1);
  EXPECT_FALSE(n.status.last_failure.has_value());
}

// Pods lost while no operator watched (a drain that evicted the operator with the gang, as on
// the real cluster: both ranks and the controller evicted at step 3752; the new controller used
// to re-create them as the same attempt, with no event, no restart and no lost steps).
TEST(Planner, ReplicasGoneWhileNoOperatorWatchedRestartTheGangUncounted) {
  auto job = RunningJob(2);
  job.status.progress = api::Progress{3752, 1, 0, 0, "2026-11-21T10:00:10Z"};
  // A fresh executor (a controller restart) knows nothing, but the status says the gang ran.
  Plan p = PlanWith(job, {}, At(30), PlanMemory{});
  EXPECT_EQ(p.status.phase, "Restarting");
  EXPECT_EQ(p.status.attempt, 1);
  EXPECT_EQ(p.status.restarts, 0) << "a drain is a disruption: not counted";
  EXPECT_EQ(p.status.recovery.restart_from_step, 3752) << "the loss is accounted";
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->reason, "Deleted");
  EXPECT_EQ(Count(p, Kind::kCreateReplica), 0) << "no pod re-created into the old attempt";
  bool named = false;
  for (const auto& e : p.events) {
    named = named || (e.reason == "GangRestart" &&
                      e.message.find("job-a0-0, job-a0-1") != std::string::npos &&
                      e.message.find("no operator watched") != std::string::npos);
  }
  EXPECT_TRUE(named) << "an event names the missing replicas";
  // Next pass: the new attempt is created whole.
  job.status = p.status;
  Plan next = PlanWith(job, {}, At(31), p.memory);
  EXPECT_EQ(Count(next, Kind::kCreateReplica), 2);
  for (const auto& a : next.actions) EXPECT_EQ(a.attempt, 1);
}

TEST(Planner, AReplicaGoneWhileNoOperatorWatchedIsReplacedInPlaceBesideASurvivor) {
  auto job = InPlaceJob(2);
  Plan p = PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning)}, At(30), PlanMemory{});
  EXPECT_EQ(p.status.phase, "Restarting");
  EXPECT_EQ(p.status.attempt, 0);
  EXPECT_EQ(p.status.restarts, 0);
  EXPECT_EQ(p.status.in_place_recoveries, 1);
  EXPECT_EQ(p.status.replaced_pods, std::vector<std::string>{"job-a0-1"});
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 1);
  // The next pass (Running condition still True through the recovery) creates the replacement
  // it expects, and takes it for no new loss.
  job.status = p.status;
  Plan next = PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning)}, At(31), p.memory);
  EXPECT_EQ(next.status.in_place_recoveries, 1);
  ASSERT_EQ(Count(next, Kind::kCreateReplica), 1);
  EXPECT_EQ(next.actions.back().name, "job-a0-1");
}

TEST(Planner, MissingReplicasOfAGangThatNeverRanOrWasCleanedUpAreNoLoss) {
  // The first start: nothing exists yet.
  auto job = Job(2);
  job.status.phase = "Pending";
  Plan first = PlanWith(job, {}, At(1), PlanMemory{});
  EXPECT_EQ(Count(first, Kind::kCreateReplica), 2);
  EXPECT_FALSE(first.status.last_failure.has_value());
  // A new attempt after a gang restart (Running False): its pods are still to create.
  auto restarted = RunningJob(2);
  restarted.status.phase = "Restarting";
  restarted.status.attempt = 1;
  SetJobCondition(&restarted.status, "Running", false, "RetryableFailure", "x",
                  "2026-11-21T10:00:00Z");
  Plan r = PlanWith(restarted, {}, At(2), PlanMemory{});
  EXPECT_EQ(r.status.attempt, 1);
  EXPECT_EQ(Count(r, Kind::kCreateReplica), 2);
  // A finished job whose pods cleanPodPolicy deleted.
  auto done = RunningJob(2);
  done.status.phase = "Succeeded";
  Plan d = PlanWith(done, {}, At(3), PlanMemory{});
  EXPECT_EQ(d.status.phase, "Succeeded");
  EXPECT_TRUE(d.actions.empty());
  // A suspended job.
  auto suspended = RunningJob(2);
  suspended.spec.run_policy.suspend = true;
  Plan s = PlanWith(suspended, {}, At(4), PlanMemory{});
  EXPECT_EQ(s.status.phase, "Suspended");
  EXPECT_EQ(s.status.attempt, 0);
}

// The create-retry gate (moved from the Kubernetes executor): after a refused create the gang is
// created again only once common/backoff.h's delay has passed on the injected clock.
TEST(Planner, CreateRetryIsGatedByTheBackoffAndRetriedAfterIt) {
  ringtrain::testing::FakeClock clock;
  const BackoffOptions backoff{Duration{1000}, Duration{60'000}, 2.0};
  const auto job = Job(2);
  PlanMemory memory;
  Plan first = PlanWith(job, {}, clock.Now(), memory, clock.SteadyNow());
  ASSERT_EQ(Count(first, Kind::kCreateReplica), 2);
  memory = first.memory;
  RecordFailedCreate(&memory, clock.SteadyNow(), backoff);  // the API refused a pod

  Plan gated = PlanWith(job, {}, clock.Now(), memory, clock.SteadyNow());
  EXPECT_EQ(Count(gated, Kind::kCreateReplica), 0);
  ASSERT_TRUE(gated.requeue_after.has_value());
  EXPECT_EQ(*gated.requeue_after, Duration{1000});
  EXPECT_EQ(gated.status.phase, "Pending") << "the rest of the plan stands";

  clock.Advance(Duration{999});
  Plan still = PlanWith(job, {}, clock.Now(), memory, clock.SteadyNow());
  EXPECT_EQ(Count(still, Kind::kCreateReplica), 0);
  EXPECT_EQ(still.requeue_after, Duration{1});

  clock.Advance(Duration{1});
  Plan retried = PlanWith(job, {}, clock.Now(), memory, clock.SteadyNow());
  EXPECT_EQ(Count(retried, Kind::kCreateReplica), 2);
  EXPECT_EQ(retried.memory.failed_creates, 1) << "reset only once the creates succeed";

  // A second refusal in a row waits the doubled delay; a gang created whole resets it.
  RecordFailedCreate(&memory, clock.SteadyNow(), backoff);
  EXPECT_EQ(memory.failed_creates, 2);
  Plan twice = PlanWith(job, {}, clock.Now(), memory, clock.SteadyNow());
  EXPECT_EQ(Count(twice, Kind::kCreateReplica), 0);
  EXPECT_EQ(twice.requeue_after, BackoffDelay(backoff, 1));
  EXPECT_EQ(twice.requeue_after, Duration{2000});
  clock.Advance(Duration{2000});
  EXPECT_EQ(Count(PlanWith(job, {}, clock.Now(), memory, clock.SteadyNow()), Kind::kCreateReplica),
            2);
  RecordGangCreated(&memory);
  EXPECT_EQ(memory.failed_creates, 0);
  RecordFailedCreate(&memory, clock.SteadyNow(), backoff);
  EXPECT_EQ(PlanWith(job, {}, clock.Now(), memory, clock.SteadyNow()).requeue_after,
            Duration{1000});
}

// A plan with no create is never delayed by the gate: deletes and status go on meanwhile.
TEST(Planner, CreateRetryGateHoldsBackOnlyCreates) {
  ringtrain::testing::FakeClock clock;
  auto job = Job(2);
  job.spec.run_policy.suspend = true;
  job.status.phase = "Running";
  PlanMemory memory;
  RecordFailedCreate(&memory, clock.SteadyNow(), {Duration{1000}, Duration{60'000}, 2.0});
  Plan p = PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning)}, clock.Now(), memory,
                    clock.SteadyNow());
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 1);
  EXPECT_EQ(p.status.phase, "Suspended");
  EXPECT_FALSE(p.requeue_after.has_value());
}

}  // namespace
}  // namespace ringtrain::reconcile

// ---- goodput: what each recovery cost, from the gang's own account -----------------------

namespace ringtrain::reconcile {
namespace {

Plan PlanWithProgress(const api::TrainingJob& job, std::vector<ObservedReplica> replicas,
                      WallTime now, const ObservedProgress& progress) {
  PlanInput in;
  in.job = &job;
  in.replicas = std::move(replicas);
  in.now = now;
  in.progress = progress;
  return PlanReconcile(in);
}

ObservedProgress Training(std::int64_t step, std::int64_t start_step) {
  ObservedProgress p;
  p.training = true;
  p.step = step;
  p.start_step = start_step;
  return p;
}

const Event* FindEvent(const Plan& p, const std::string& reason) {
  for (const auto& e : p.events) {
    if (e.reason == reason) return &e;
  }
  return nullptr;
}

TEST(PlannerAccounting, EachInPlaceRecoveryIsOneEventWithWhatItCost) {
  auto job = InPlaceJob(2);
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                             Replica(1, 0, ReplicaPhase::kRunning)};
  ObservedProgress p = Training(2400, 0);
  p.recoveries = 1;
  p.recovery_steps_lost = 1;
  p.recovery_seconds = 4.24;
  p.last_recovery_step = 2372;
  Plan first = PlanWithProgress(job, gang, At(10), p);
  const Event* e = FindEvent(first, "RecoveredInPlace");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("the gang trains again from step 2372: 1 step(s) lost, 4.2s without "
                            "training (this job: 1 in place, 0 gang restart(s), 1 step(s) lost"),
            std::string::npos)
      << e->message;
  EXPECT_EQ(first.status.recovery.in_place, 1);
  EXPECT_EQ(first.status.recovery.steps_lost, 1);
  EXPECT_DOUBLE_EQ(first.status.recovery.seconds_without_training, 4.2);

  // The same account read again: nothing new.
  job.status = first.status;
  Plan again = PlanWithProgress(job, gang, At(20), p);
  EXPECT_EQ(FindEvent(again, "RecoveredInPlace"), nullptr);
  EXPECT_EQ(again.status.recovery, first.status.recovery);

  // A second one (rank 0 replaced: the gang's totals carried over to its replacement).
  p.recoveries = 2;
  p.recovery_seconds = 7.24;
  p.last_recovery_step = 3000;
  Plan second = PlanWithProgress(job, gang, At(30), p);
  e = FindEvent(second, "RecoveredInPlace");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("from step 3000: 0 step(s) lost, 3.0s without training"),
            std::string::npos)
      << e->message;
  EXPECT_EQ(second.status.recovery.in_place, 2);
  EXPECT_EQ(second.status.recovery.steps_lost, 1);
  EXPECT_DOUBLE_EQ(second.status.recovery.seconds_without_training, 7.2);

  // A runner still starting knows nothing yet: not read as "no recoveries".
  job.status = second.status;
  ObservedProgress starting;
  Plan early = PlanWithProgress(job, gang, At(40), starting);
  EXPECT_EQ(early.status.recovery, second.status.recovery);
  EXPECT_TRUE(early.events.empty());
}

TEST(PlannerAccounting, AGangRestartCostsTheStepsSinceTheCheckpointItResumesFrom) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.progress = api::Progress{2000, 4, 50000, 0.3, "2026-11-21T10:00:03Z"};
  Plan restart = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kFailed, 137)},
      At(5));
  ASSERT_EQ(restart.status.attempt, 1);
  EXPECT_EQ(restart.status.recovery.restart_from_step, 2000);

  job.status = restart.status;
  const std::vector<ObservedReplica> next = {Replica(0, 1, ReplicaPhase::kRunning),
                                             Replica(1, 1, ReplicaPhase::kRunning)};
  ObservedProgress starting;  // the new gang loads its checkpoint
  Plan waiting = PlanWithProgress(job, next, At(8), starting);
  EXPECT_EQ(waiting.status.recovery.gang_restarts, 0);
  EXPECT_EQ(waiting.status.recovery.restart_from_step, 2000);

  job.status = waiting.status;
  Plan trains = PlanWithProgress(job, next, At(12), Training(1010, 1000));
  const Event* e = FindEvent(trains, "GangRestarted");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("attempt 1 trains again from its checkpoint's step 1000: at least 1000 "
                            "step(s) lost (from the last progress seen), at most 9.0s without "
                            "training"),
            std::string::npos)
      << e->message;
  const api::RecoveryAccount& a = trains.status.recovery;
  EXPECT_EQ(a.gang_restarts, 1);
  EXPECT_EQ(a.from_checkpoint, 1);
  EXPECT_EQ(a.steps_lost, 1000);
  EXPECT_DOUBLE_EQ(a.seconds_without_training, 9.0) << "from the last progress seen (3 s)";
  EXPECT_EQ(a.restart_from_step, -1);

  job.status = trains.status;
  Plan later = PlanWithProgress(job, next, At(20), Training(1500, 1000));
  EXPECT_EQ(FindEvent(later, "GangRestarted"), nullptr);
  EXPECT_EQ(later.status.recovery, trains.status.recovery);
}

// Recorded on the real cluster (s35): training stopped at 23:45:59 (the last progress seen,
// status.progress.updatedAt, 23:46:00); the gang restarted 31 s later and trained again at
// 23:47:07.9, yet the event said "at most 36.9s without training": the time was counted from the
// restart, which leaves out the hang before it. Counted from the last progress seen it is an
// upper bound again, for a failure's restart and a progress deadline's alike.
TEST(PlannerAccounting, TheTimeWithoutTrainingCountsFromTheLastProgressSeenNotTheRestart) {
  const std::vector<ObservedReplica> next = {Replica(0, 1, ReplicaPhase::kRunning),
                                             Replica(1, 1, ReplicaPhase::kRunning)};
  {
    auto job = Job(2);
    job.status.phase = "Running";
    job.status.progress = api::Progress{5000, 10, 0, 0.3, "2026-11-21T10:00:00Z"};
    Plan restart = PlanAt(
        job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kFailed, 137)},
        At(31));
    ASSERT_EQ(restart.status.attempt, 1);
    EXPECT_EQ(restart.status.recovery.restarted_at, "2026-11-21T10:00:00Z")
        << "the job has not trained since its last progress seen";
    job.status = restart.status;
    Plan trains = PlanWithProgress(job, next, At(68), Training(4810, 4800));
    const Event* e = FindEvent(trains, "GangRestarted");
    ASSERT_NE(e, nullptr);
    EXPECT_NE(e->message.find("at most 68.0s without training"), std::string::npos) << e->message;
    EXPECT_DOUBLE_EQ(trains.status.recovery.seconds_without_training, 68.0);
  }
  {
    // A progress deadline's restart: the whole deadline went without training.
    auto job = Job(2);
    job.spec.run_policy.progress_deadline_seconds = 60;
    job.status.phase = "Running";
    job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T09:59:00Z"});
    job.status.progress = api::Progress{5000, 10, 0, 0.3, "2026-11-21T10:00:00Z"};
    Plan stalled = PlanWithProgress(
        job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)}, At(61),
        Training(5000, 0));
    ASSERT_EQ(stalled.status.phase, "Restarting");
    job.status = stalled.status;
    Plan trains = PlanWithProgress(job, next, At(70), Training(4810, 4800));
    EXPECT_DOUBLE_EQ(trains.status.recovery.seconds_without_training, 70.0);
  }
  {
    // No progress seen before the restart (or none that reads as a time before it): from the
    // restart.
    auto job = Job(2);
    job.status.phase = "Running";
    Plan restart = PlanAt(
        job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kFailed, 137)},
        At(31));
    EXPECT_EQ(restart.status.recovery.restarted_at, "2026-11-21T10:00:31Z");
    job.status.progress = api::Progress{5000, 10, 0, 0.3, "2026-11-21T10:01:00Z"};
    restart = PlanAt(
        job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kFailed, 137)},
        At(31));
    EXPECT_EQ(restart.status.recovery.restarted_at, "2026-11-21T10:00:31Z") << "not in the future";
  }
}

// Recorded on the real cluster (s6-suspend): suspended at step 3752 with no checkpoint volume,
// resumed 9 s later; the new gang trained from step 0. The suspended job showed PODS
// AllPodsRunning with no pod left, and the resume lost 3752 steps without an event or account.
TEST(PlannerAccounting, ASuspendedJobRunsNoPodAndItsResumeIsAccountedFromTheResume) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.start_time = "2026-11-21T10:00:00Z";
  job.status.progress = api::Progress{3752, 8, 55919.7, 0.24, "2026-11-21T10:00:12Z"};
  job.status.conditions.push_back({"PodsReady", "True", "AllPodsRunning",
                                   "all 2 replicas are running", "2026-11-21T10:00:01Z"});
  job.spec.run_policy.suspend = true;
  Plan s = PlanAt(
      job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)}, At(13));
  ASSERT_EQ(s.status.phase, "Suspended");
  ASSERT_NE(Cond(s.status, "PodsReady"), nullptr);
  EXPECT_EQ(Cond(s.status, "PodsReady")->status, "False");
  EXPECT_EQ(Cond(s.status, "PodsReady")->reason, "Suspended");
  EXPECT_EQ(s.status.progress->samples_per_second, 0) << "nothing trains while suspended";
  EXPECT_EQ(s.status.progress->step, 3752);

  // Still suspended 8 s later, the pods gone.
  job.status = s.status;
  Plan still = PlanAt(job, {}, At(21));
  ASSERT_NE(Cond(still.status, "PodsReady"), nullptr);
  EXPECT_EQ(Cond(still.status, "PodsReady")->reason, "Suspended");
  EXPECT_EQ(still.status.recovery.restart_from_step, -1);

  job.status = still.status;
  job.spec.run_policy.suspend = false;
  Plan resumed = PlanAt(job, {}, At(23));
  EXPECT_EQ(resumed.status.attempt, 1);
  EXPECT_EQ(resumed.status.recovery.restart_from_step, 3752);
  EXPECT_EQ(resumed.status.recovery.restarted_at, "2026-11-21T10:00:23Z")
      << "the time suspended was asked for: not counted as lost";
  EXPECT_EQ(resumed.status.restarts, 0);

  job.status = resumed.status;
  const std::vector<ObservedReplica> next = {Replica(0, 1, ReplicaPhase::kRunning),
                                             Replica(1, 1, ReplicaPhase::kRunning)};
  Plan trains = PlanWithProgress(job, next, At(26), Training(1407, 0));
  const Event* e = FindEvent(trains, "GangRestarted");
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("attempt 1 trains again from step 0: at least 3752 step(s) lost (from "
                            "the last progress seen), at most 3.0s without training"),
            std::string::npos)
      << e->message;
  EXPECT_EQ(trains.status.recovery.gang_restarts, 1);
  EXPECT_EQ(trains.status.recovery.steps_lost, 3752);
  EXPECT_DOUBLE_EQ(trains.status.recovery.seconds_without_training, 3.0);
}

// Suspended while a restarted gang had not trained yet: that restart's time without training
// counts, the time suspended does not; the new attempt's in-place account starts at zero.
TEST(PlannerAccounting, ASuspendDuringARestartLeavesOutOnlyTheTimeSuspended) {
  auto job = Job(2);
  job.status.phase = "Restarting";
  job.status.attempt = 1;
  job.status.progress = api::Progress{2000, 4, 0, 0.3, "2026-11-21T10:00:00Z"};
  job.status.recovery.restart_from_step = 2000;
  job.status.recovery.restarted_at = "2026-11-21T10:00:10Z";
  job.status.recovery.attempt_in_place = 2;
  job.status.recovery.attempt_steps_lost = 5;
  job.status.recovery.attempt_seconds = 8;
  job.spec.run_policy.suspend = true;
  Plan s = PlanAt(job, {}, At(15));  // 5 s after the restart
  job.status = s.status;
  job.spec.run_policy.suspend = false;
  Plan resumed = PlanAt(job, {}, At(115));  // 100 s suspended
  EXPECT_EQ(resumed.status.attempt, 2);
  EXPECT_EQ(resumed.status.recovery.restart_from_step, 2000);
  EXPECT_EQ(resumed.status.recovery.restarted_at, "2026-11-21T10:01:50Z");
  EXPECT_EQ(resumed.status.recovery.attempt_in_place, 0);
  EXPECT_EQ(resumed.status.recovery.attempt_steps_lost, 0);
  EXPECT_EQ(resumed.status.recovery.attempt_seconds, 0);
  job.status = resumed.status;
  ObservedProgress p = Training(1010, 1000);
  p.recoveries = 1;
  p.recovery_seconds = 2;
  p.last_recovery_step = 1005;
  Plan trains = PlanWithProgress(
      job, {Replica(0, 2, ReplicaPhase::kRunning), Replica(1, 2, ReplicaPhase::kRunning)}, At(120),
      p);
  EXPECT_DOUBLE_EQ(trains.status.recovery.seconds_without_training, 12.0)
      << "5 s before the suspend, 5 s after the resume, 2 s in place";
  EXPECT_EQ(trains.status.recovery.in_place, 1) << "the new attempt's first in-place recovery";
}

// A rank 0 that does not train (a new process starting after a gang restart or as an in-place
// replacement; a gang recovering) is no news of the job's progress: STEP keeps the last step
// seen (and its time, which the progress deadline counts from), SAMPLES/S reads 0, and the
// job's progress moves again with the first step the new process trains.
TEST(PlannerProgress, ARankZeroThatDoesNotTrainKeepsTheLastStepAtNoSpeed) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.progress = api::Progress{5628, 12, 71157.3, 0.17, "2026-11-21T10:00:05Z"};
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                             Replica(1, 0, ReplicaPhase::kRunning)};
  auto idle = [](const std::string& state, std::int64_t step, double samples_per_second) {
    contract::RunnerStatus read;
    read.state = state;
    read.step = step;
    read.samples_per_second = samples_per_second;
    return ObserveRunnerStatus(read);
  };
  // A replacement rank 0 that starts (its step 0), then survivors that recover (the rate they
  // had before the failure).
  for (const auto& [state, step, rate] :
       {std::tuple<std::string, std::int64_t, double>{"starting", 0, 0},
        {"recovering", 5630, 35463}}) {
    Plan p = PlanWithProgress(job, gang, At(10), idle(state, step, rate));
    ASSERT_TRUE(p.status.progress.has_value());
    EXPECT_EQ(p.status.progress->step, 5628) << state;
    EXPECT_EQ(p.status.progress->epoch, 12) << state;
    EXPECT_EQ(p.status.progress->samples_per_second, 0) << state;
    EXPECT_EQ(p.status.progress->updated_at, "2026-11-21T10:00:05Z") << state;
  }
  // Trains again: its own step and rate.
  Plan trains = PlanWithProgress(job, gang, At(12), idle("running", 6097, 70000));
  EXPECT_EQ(trains.status.progress->step, 6097);
  EXPECT_EQ(trains.status.progress->samples_per_second, 70000);
  EXPECT_EQ(trains.status.progress->updated_at, "2026-11-21T10:00:12Z");
  // The job's first read, before anything trained: step 0 at no speed.
  job.status.progress.reset();
  Plan first = PlanWithProgress(job, gang, At(1), idle("starting", 0, 0));
  ASSERT_TRUE(first.status.progress.has_value());
  EXPECT_EQ(first.status.progress->step, 0);
  EXPECT_EQ(first.status.progress->samples_per_second, 0);
}

// Recorded on the real cluster (s42, job f): rank 0 SIGSTOPped, and SAMPLES/S showed its last
// rate, 66630.3, for the minute until the restart. A rank 0 whose /status has not answered for
// kSilentRankZeroRate shows none; its last step stays.
TEST(PlannerProgress, ARankZeroSilentForLongShowsNoRate) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.progress = api::Progress{5628, 12, 66630.3, 0.17, "2026-11-21T10:00:05Z"};
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                             Replica(1, 0, ReplicaPhase::kRunning)};
  ObservedProgress unanswered;
  unanswered.reachable = false;
  unanswered.error = "recv: timed out";
  contract::RunnerStatus read;
  read.state = "running";
  read.step = 5628;
  read.samples_per_second = 66630.3;
  PlanInput in;
  in.job = &job;
  in.replicas = gang;
  // Failed reads before any answer count for nothing (an operator that cannot reach the pod).
  in.now = At(0);
  in.progress = unanswered;
  Plan unreached = PlanReconcile(in);
  EXPECT_FALSE(unreached.memory.rank0_unanswered_since.has_value());
  in.memory = unreached.memory;
  in.now = At(1);
  in.progress = ObserveRunnerStatus(read);
  in.memory = PlanReconcile(in).memory;
  EXPECT_TRUE(in.memory.rank0_answered);
  in.now = At(6);
  in.progress = unanswered;
  Plan first = PlanReconcile(in);
  ASSERT_TRUE(first.memory.rank0_unanswered_since.has_value());
  EXPECT_EQ(*first.memory.rank0_unanswered_since, At(6));
  EXPECT_EQ(first.status.progress->samples_per_second, 66630.3) << "one failed read is no news";
  // Later failed reads keep the first one's time; a pass without a read changes nothing.
  in.memory = first.memory;
  in.now = At(11);
  EXPECT_EQ(*PlanReconcile(in).memory.rank0_unanswered_since, At(6));
  in.progress.reset();
  in.now = At(16);
  Plan silent = PlanReconcile(in);
  EXPECT_EQ(silent.status.progress->samples_per_second, 0);
  EXPECT_EQ(silent.status.progress->step, 5628);
  // A rank 0 that no longer runs (ended, being replaced) is forgotten with its silence.
  PlanInput ended = in;
  ended.replicas = {Replica(0, 0, ReplicaPhase::kFailed, 137, "Error"),
                    Replica(1, 0, ReplicaPhase::kRunning)};
  ended.replicas[0].terminating = true;
  const Plan gone = PlanReconcile(ended);
  EXPECT_FALSE(gone.memory.rank0_answered);
  EXPECT_FALSE(gone.memory.rank0_unanswered_since.has_value());
  // A read that succeeds forgets the silence.
  read.step = 5700;
  read.samples_per_second = 70000;
  in.progress = ObserveRunnerStatus(read);
  in.now = At(21);
  Plan back = PlanReconcile(in);
  EXPECT_FALSE(back.memory.rank0_unanswered_since.has_value());
  EXPECT_EQ(back.status.progress->samples_per_second, 70000);
}

}  // namespace
}  // namespace ringtrain::reconcile

namespace ringtrain::reconcile {
namespace {

// Rank 0 replaced in place (its pod deleted by someone: a free loss). The replacement reaches
// Running 400 s after the last step seen and says "starting": the gang is recovering, not
// stalled, and the progress deadline gives no verdict on a rank 0 that does not train (its
// rendezvous and recovery timeouts bound that). Found by the final review of this change: the
// step 0 such a rank reports used to restart the deadline's clock.
TEST(PlannerProgress, ARankZeroStartingAsAReplacementPastTheDeadlineIsNoStall) {
  auto job = InPlaceJob(2);
  job.spec.run_policy.progress_deadline_seconds = 300;
  job.status.phase = "Restarting";
  job.status.in_place_recoveries = 1;
  job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
  job.status.progress = api::Progress{5628, 12, 71157.3, 0.17, "2026-11-21T10:00:05Z"};
  job.status.replaced_pods = {ReplicaName("job", 0, 0)};
  contract::RunnerStatus read;
  read.state = "starting";
  read.step = 0;
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                             Replica(1, 0, ReplicaPhase::kRunning)};
  Plan p = PlanWithProgress(job, gang, At(400), ObserveRunnerStatus(read));
  EXPECT_EQ(p.status.phase, "Running");
  EXPECT_EQ(p.status.restarts, 0);
  EXPECT_EQ(Count(p, Kind::kDeleteReplica), 0);
  // The same for survivors that say "recovering".
  read.state = "recovering";
  read.step = 5630;
  job.status.phase = "Running";
  job.status.replaced_pods.clear();
  p = PlanWithProgress(job, gang, At(400), ObserveRunnerStatus(read));
  EXPECT_EQ(p.status.phase, "Running");
  EXPECT_EQ(p.status.restarts, 0);
  // Trains again, its first step not yet reported: the deadline counts from the last time it
  // did not train, as from a step; a deadline later with no step, it is a stall.
  PlanInput in;
  in.job = &job;
  in.replicas = gang;
  in.now = At(400);
  in.progress = ObserveRunnerStatus(read);
  PlanMemory memory = PlanReconcile(in).memory;
  read.state = "running";
  read.step = 5628;
  in.progress = ObserveRunnerStatus(read);
  in.memory = memory;
  in.now = At(401);
  p = PlanReconcile(in);
  EXPECT_EQ(p.status.phase, "Running");
  in.now = At(701);
  p = PlanReconcile(in);
  EXPECT_EQ(p.status.phase, "Restarting");
  EXPECT_EQ(Cond(p.status, "Stalled")->status, "True");
  // Without that memory (a restarted operator), the same read is judged from the last step.
  in.memory = PlanMemory{};
  in.now = At(401);
  EXPECT_EQ(PlanReconcile(in).status.phase, "Restarting");
}

// A rank 0 that says "stalled" (running, but no step for longer than its stall threshold: a
// peer hung in a collective, a starved input) trains at no speed and is no idle rank: its step
// makes no progress, so the progress deadline runs from the last step seen and restarts the gang.
TEST(PlannerProgress, AStalledRankZeroIsRunningWithoutProgressNotIdle) {
  auto job = Job(2);
  job.spec.run_policy.progress_deadline_seconds = 300;
  job.status.phase = "Running";
  job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
  job.status.progress = api::Progress{5628, 12, 71157.3, 0.17, "2026-11-21T10:00:05Z"};
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                             Replica(1, 0, ReplicaPhase::kRunning)};
  contract::RunnerStatus read;
  read.state = "stalled";
  read.step = 5628;
  read.epoch = 12;
  read.samples_per_second = 0;
  read.loss = 0.17;
  read.start_step = 0;
  const ObservedProgress stalled = ObserveRunnerStatus(read);
  EXPECT_TRUE(stalled.training);
  EXPECT_FALSE(stalled.idle);
  Plan p = PlanWithProgress(job, gang, At(60), stalled);
  EXPECT_EQ(p.status.phase, "Running");
  ASSERT_TRUE(p.status.progress.has_value());
  EXPECT_EQ(p.status.progress->step, 5628);
  EXPECT_EQ(p.status.progress->samples_per_second, 0) << "kubectl get tj: SAMPLES/S 0";
  EXPECT_EQ(p.status.progress->updated_at, "2026-11-21T10:00:05Z") << "no new step";
  // Said before the deadline: the condition and one Warning event, naming what comes next.
  const api::Condition* said = Cond(p.status, "Stalled");
  ASSERT_NE(said, nullptr);
  EXPECT_EQ(said->status, "True");
  EXPECT_EQ(said->reason, "RankStalled");
  EXPECT_EQ(said->message,
            "rank 0 reports no completed step since step 5628 (2026-11-21T10:00:05Z): a peer hung "
            "in a collective, or a starved input; a collective that waits on a hung peer fails "
            "within the collective timeout (60s), else the gang restarts at the progress deadline "
            "(2026-11-21T10:05:06Z) unless it trains again");
  ASSERT_EQ(CountEvents(p, "RankStalled"), 1);
  {
    // The next pass: the same words (no status write), no second event; a pass that read
    // nothing keeps it; a read of a rank 0 that trains again ends it.
    auto again = job;
    again.status = p.status;
    Plan next = PlanWithProgress(again, gang, At(90), stalled);
    EXPECT_EQ(next.status.conditions, p.status.conditions);
    EXPECT_EQ(CountEvents(next, "RankStalled"), 0);
    PlanInput none;
    none.job = &again;
    none.replicas = gang;
    none.now = At(95);
    EXPECT_EQ(Cond(PlanReconcile(none).status, "Stalled")->status, "True");
    contract::RunnerStatus moving = read;
    moving.state = "running";
    moving.step = 5700;
    moving.samples_per_second = 70000;
    next = PlanWithProgress(again, gang, At(100), ObserveRunnerStatus(moving));
    EXPECT_EQ(Cond(next.status, "Stalled")->status, "False");
    EXPECT_EQ(Cond(next.status, "Stalled")->reason, "Progressing");
  }
  {
    // No progress deadline: said all the same, with what ends it instead.
    auto off = job;
    off.spec.run_policy.progress_deadline_seconds = 0;
    Plan q = PlanWithProgress(off, gang, At(60), stalled);
    ASSERT_NE(Cond(q.status, "Stalled"), nullptr);
    EXPECT_EQ(Cond(q.status, "Stalled")->reason, "RankStalled");
    EXPECT_NE(
        Cond(q.status, "Stalled")
            ->message.find(
                "a collective that waits on a hung peer fails within the collective timeout "
                "(60s); no spec.runPolicy.progressDeadlineSeconds is set to end any other stall"),
        std::string::npos)
        << Cond(q.status, "Stalled")->message;
    EXPECT_EQ(q.status.phase, "Running");
    contract::RunnerStatus moving = read;
    moving.state = "running";
    EXPECT_EQ(
        Cond(PlanWithProgress(off, gang, At(60), ObserveRunnerStatus(moving)).status, "Stalled"),
        nullptr)
        << "no condition where none was due";
  }
  {
    // Whatever ends the running gang ends the condition: the job finishing (the last read
    // said "stalled", then every rank exited 0 before the next), or a rank failing.
    auto done = job;
    done.status = p.status;
    const std::vector<ObservedReplica> succeeded = {Replica(0, 0, ReplicaPhase::kSucceeded),
                                                    Replica(1, 0, ReplicaPhase::kSucceeded)};
    Plan end = PlanWithProgress(done, succeeded, At(95), stalled);
    EXPECT_EQ(end.status.phase, "Succeeded");
    ASSERT_NE(Cond(end.status, "Stalled"), nullptr);
    EXPECT_EQ(Cond(end.status, "Stalled")->status, "False");
    EXPECT_EQ(Cond(end.status, "Stalled")->reason, "JobFinished");
    const std::vector<ObservedReplica> lost = {Replica(0, 0, ReplicaPhase::kRunning),
                                               Replica(1, 0, ReplicaPhase::kFailed, 138)};
    Plan restart = PlanWithProgress(done, lost, At(95), stalled);
    EXPECT_NE(restart.status.phase, "Running");
    ASSERT_NE(Cond(restart.status, "Stalled"), nullptr);
    EXPECT_EQ(Cond(restart.status, "Stalled")->status, "False") << "phase " << restart.status.phase;
  }
  // Past the deadline from the last step: a stall, where an idle rank 0 would be none.
  p = PlanWithProgress(job, gang, At(306), stalled);
  EXPECT_EQ(p.status.phase, "Restarting");
  ASSERT_NE(Cond(p.status, "Stalled"), nullptr);
  EXPECT_EQ(Cond(p.status, "Stalled")->status, "True");
  EXPECT_EQ(Cond(p.status, "Stalled")->reason, "ProgressDeadlineExceeded");
  {
    // The backoffLimit spent, the job fails for good and its gang goes as a gang restart's after
    // a failure: rank 1, with nothing to save, with the short grace; rank 0 keeps its pod's.
    auto spent = job;
    spent.status.restarts = spent.spec.run_policy.backoff_limit;
    const Plan failed = PlanWithProgress(spent, gang, At(306), stalled);
    EXPECT_EQ(failed.status.phase, "Failed");
    std::map<std::string, std::optional<Duration>> graces;
    for (const auto& a : failed.actions) {
      if (a.kind == Action::Kind::kDeleteReplica) graces[a.name] = a.grace;
    }
    ASSERT_EQ(graces.size(), 2u);
    EXPECT_EQ(graces["job-a0-0"], std::nullopt);
    EXPECT_EQ(graces["job-a0-1"], kNoWorkLeftGrace);
  }
  read.state = "recovering";
  EXPECT_EQ(PlanWithProgress(job, gang, At(306), ObserveRunnerStatus(read)).status.phase,
            "Running");
}

// Recorded on the real cluster (s35): with progressDeadlineSeconds 300 the RankStalled event
// said "the gang restarts at the progress deadline (23:47:11Z) unless it trains again", though
// the ranks' 60 s collective timeout ends a hung peer's stall long before. The words name what
// comes first: the collective timeout (the job's own, from its runner container's env, or the
// runner's default), or a progress deadline shorter than it.
TEST(PlannerProgress, ARankStalledNamesWhatEndsTheStallFirst) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
  job.status.progress = api::Progress{5628, 12, 71157.3, 0.17, "2026-11-21T10:00:05Z"};
  const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                             Replica(1, 0, ReplicaPhase::kRunning)};
  contract::RunnerStatus read;
  read.state = "stalled";
  read.step = 5628;
  read.start_step = 0;
  const auto said = [&](std::int64_t deadline_s, const std::string& env_value) {
    auto j = job;
    j.spec.run_policy.progress_deadline_seconds = deadline_s;
    if (!env_value.empty()) {
      j.spec.pod_template_json =
          R"({"spec":{"containers":[{"name":"runner","env":[{"name":"RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS","value":")" +
          env_value + R"("}]}]}})";
    }
    Plan p = PlanWithProgress(j, gang, At(25), ObserveRunnerStatus(read));
    const Event* e = FindEvent(p, "RankStalled");
    EXPECT_NE(e, nullptr);
    const std::string prefix =
        "rank 0 reports no completed step since step 5628 (2026-11-21T10:00:05Z): a peer hung in "
        "a collective, or a starved input; ";
    EXPECT_TRUE(e == nullptr || e->message.starts_with(prefix)) << e->message;
    return e == nullptr ? std::string() : e->message.substr(prefix.size());
  };
  EXPECT_EQ(said(300, ""),
            "a collective that waits on a hung peer fails within the collective timeout (60s), "
            "else the gang restarts at the progress deadline (2026-11-21T10:05:06Z) unless it "
            "trains again");
  EXPECT_EQ(said(300, "120"),
            "a collective that waits on a hung peer fails within the collective timeout (120s), "
            "else the gang restarts at the progress deadline (2026-11-21T10:05:06Z) unless it "
            "trains again");
  // The deadline first: the collective timeout would end nothing before it.
  EXPECT_EQ(said(300, "600"),
            "the gang restarts at the progress deadline (2026-11-21T10:05:06Z) unless it trains "
            "again");
  EXPECT_EQ(said(40, ""),
            "the gang restarts at the progress deadline (2026-11-21T10:00:46Z) unless it trains "
            "again");
  {
    // `ringtrain run`'s ranks inherit its environment: its executor says what they run with.
    auto j = job;
    j.spec.run_policy.progress_deadline_seconds = 900;
    PlanInput in;
    in.job = &j;
    in.replicas = gang;
    in.now = At(25);
    in.progress = ObserveRunnerStatus(read);
    in.collective_timeout = std::chrono::seconds(300);
    const Plan plan = PlanReconcile(in);  // alive while `e` points into its events
    const Event* e = FindEvent(plan, "RankStalled");
    ASSERT_NE(e, nullptr);
    EXPECT_NE(e->message.find("fails within the collective timeout (300s), else the gang restarts "
                              "at the progress deadline (2026-11-21T10:15:06Z)"),
              std::string::npos)
        << e->message;
  }
  EXPECT_EQ(said(0, "90"),
            "a collective that waits on a hung peer fails within the collective timeout (90s); no "
            "spec.runPolicy.progressDeadlineSeconds is set to end any other stall");
}

// Recorded on the real cluster (s35): after a RankStalled, rank 0's /status turned from
// "stalled" to "recovering" (it recovered a lost peer in place, its step frozen), and the job
// said Stalled=False "training is making progress" 84 s after the last step. A rank 0 that does
// not train is no stall (the progress deadline waits for it) and no progress either: the
// condition says what it does; "making progress" needs a read of it training with a new step.
TEST(PlannerProgress, ARankZeroRecoveringInPlaceIsNotSaidToMakeProgress) {
  for (const std::int64_t deadline_s : {300, 0}) {
    SCOPED_TRACE("progressDeadlineSeconds " + std::to_string(deadline_s));
    auto job = Job(2);
    job.spec.run_policy.progress_deadline_seconds = deadline_s;
    job.status.phase = "Running";
    job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
    job.status.progress = api::Progress{5628, 12, 71157.3, 0.17, "2026-11-21T10:00:05Z"};
    const std::vector<ObservedReplica> gang = {Replica(0, 0, ReplicaPhase::kRunning),
                                               Replica(1, 0, ReplicaPhase::kRunning)};
    auto read = [](const std::string& state, std::int64_t step) {
      contract::RunnerStatus r;
      r.state = state;
      r.step = step;
      r.start_step = 0;
      return ObserveRunnerStatus(r);
    };
    Plan stalled = PlanWithProgress(job, gang, At(60), read("stalled", 5628));
    ASSERT_EQ(Cond(stalled.status, "Stalled")->reason, "RankStalled");
    job.status = stalled.status;
    Plan recovering = PlanWithProgress(job, gang, At(89), read("recovering", 5628));
    EXPECT_EQ(recovering.status.phase, "Running");
    const api::Condition* c = Cond(recovering.status, "Stalled");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->status, "False");
    EXPECT_EQ(c->reason, "Recovering");
    EXPECT_EQ(c->message,
              "rank 0 recovers a lost peer in place: no completed step since step 5628 "
              "(2026-11-21T10:00:05Z)");
    // A pass that read nothing says nothing new.
    job.status = recovering.status;
    PlanInput none;
    none.job = &job;
    none.replicas = gang;
    none.now = At(92);
    EXPECT_EQ(Cond(PlanReconcile(none).status, "Stalled")->reason, "Recovering");
    // Rank 0 trains again, its step not moved yet: not "making progress" yet either.
    Plan resumed = PlanWithProgress(job, gang, At(95), read("running", 5628));
    c = Cond(resumed.status, "Stalled");
    EXPECT_EQ(c->status, "False");
    EXPECT_EQ(c->reason, "Resumed");
    EXPECT_EQ(c->message, "rank 0 trains again; no step past step 5628 seen yet");
    job.status = resumed.status;
    Plan moving = PlanWithProgress(job, gang, At(100), read("running", 5700));
    EXPECT_EQ(Cond(moving.status, "Stalled")->reason, "Progressing");
    EXPECT_EQ(Cond(moving.status, "Stalled")->message, "training is making progress");
    // A replacement rank 0 that starts says so too.
    job.status = moving.status;
    Plan starting = PlanWithProgress(job, gang, At(105), read("starting", 0));
    EXPECT_EQ(Cond(starting.status, "Stalled")->reason, "Starting");
    EXPECT_EQ(Cond(starting.status, "Stalled")->message,
              "rank 0 is starting (a new process): no completed step since step 5700 "
              "(2026-11-21T10:01:40Z)");
  }
}

// Recorded on the real cluster (s37, job hang3): rank 1's runner SIGSTOPped, its pod Running;
// rank 0's all-reduce timed out after 10 s and it waited 120 s to recover in place, saying
// "recovering" with 0 samples/s, while the job said nothing: phase Running, AllPodsRunning, no
// Stalled condition (it had never stalled), no event, for two minutes, then a gang restart. A
// recovery from a loss the operator did not see (every pod runs) is said once per outage, as a
// Warning, with the loss in rank 0's words and the wait; the condition Stalled=False (reason
// Recovering) says it while it lasts.
class PlannerRecovering : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = InPlaceJob(2);
    job_.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
    job_.status.progress = api::Progress{20516, 3, 44646.8, 0.31, "2026-11-21T10:00:55Z"};
    read_.state = "recovering";
    read_.step = 20516;
    read_.start_step = 0;
    read_.recovery_cause =
        "step 20625: gradient all-reduce: all-reduce: timed out after 10s waiting for rank 1";
    read_.recovering_seconds = 10.4;  // from the last step before the loss
  }
  // One pass at `at` seconds that reads read_, with the executor's memory of the last one.
  Plan Pass(int at) {
    PlanInput in;
    in.job = &job_;
    in.replicas = gang_;
    in.now = At(at);
    in.progress = ObserveRunnerStatus(read_);
    in.memory = memory_;
    Plan plan = PlanReconcile(in);
    memory_ = plan.memory;
    job_.status = plan.status;
    return plan;
  }
  static int Said(const Plan& plan) {
    int n = 0;
    for (const Event& e : plan.events) n += e.reason == "RankRecovering" ? 1 : 0;
    return n;
  }

  api::TrainingJob job_;
  std::vector<ObservedReplica> gang_ = {Replica(0, 0, ReplicaPhase::kRunning),
                                        Replica(1, 0, ReplicaPhase::kRunning)};
  contract::RunnerStatus read_;
  PlanMemory memory_;
};

TEST_F(PlannerRecovering, ALossNoPodShowsIsSaidOncePerOutageWithItsCause) {
  const std::string said =
      "rank 0 recovers a lost peer in place (step 20625: gradient all-reduce: all-reduce: timed "
      "out after 10s waiting for rank 1): no completed step since step 20516 "
      "(2026-11-21T10:00:55Z); it waits up to 120s for the gang to form again, else the gang "
      "restarts";
  EXPECT_EQ(Said(Pass(61)), 0) << "first read of the outage: the kubelet may not have said more";
  Plan first = Pass(66);
  EXPECT_EQ(first.status.phase, "Running");
  const api::Condition* c = Cond(first.status, "Stalled");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "False");
  EXPECT_EQ(c->reason, "Recovering");
  EXPECT_EQ(c->message, said);
  const Event* e = FindEvent(first, "RankRecovering");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->type, "Warning");
  EXPECT_EQ(e->message, said);
  read_.recovering_seconds = 15.4;
  Plan next = Pass(71);
  EXPECT_EQ(Said(next), 0) << "the same outage";
  EXPECT_EQ(Cond(next.status, "Stalled")->message, said);
  // It recovered (1 recovery), and before any read saw it train, a second outage: said again.
  read_.recoveries = 1;
  read_.last_recovery_step = 20625;
  read_.recovering_seconds = 12;
  read_.recovery_cause = "step 20700: all-reduce: timed out after 10s waiting for rank 1";
  EXPECT_EQ(Said(Pass(90)), 0);
  Plan second = Pass(95);
  EXPECT_EQ(Said(second), 1);
  EXPECT_NE(FindEvent(second, "RankRecovering")->message.find("step 20700"), std::string::npos);
  EXPECT_EQ(Said(Pass(97)), 0);
  // Its end counted, before its next report says running, rank 0 still says recovering with the
  // cause but no age: nothing to judge (an outage too young to be said is not said now).
  read_.recoveries = 2;
  read_.recovering_seconds = 3;
  EXPECT_EQ(Said(Pass(100)), 0);
  read_.recovering_seconds = -1;
  EXPECT_EQ(Said(Pass(101)), 0);
}

// A pod's end reaches the operator a moment after its peers notice it (the kubelet reports it,
// then the watch): an outage younger than kUnseenLossGrace gets the condition, not yet the
// event; the operator then answers the loss itself (InPlaceRecovery; the Restarting condition
// turns False again when the replacement runs, after the outage began), and no RankRecovering
// follows for it.
TEST_F(PlannerRecovering, ALossTheOperatorAnswersItselfGetsNoRankRecovering) {
  read_.recovery_cause =
      "step 20601: gradient all-reduce: all-reduce: lost peer rank 1 (connection reset)";
  read_.recovering_seconds = 0.5;
  Plan young = Pass(56);
  EXPECT_EQ(Cond(young.status, "Stalled")->reason, "Recovering");
  EXPECT_EQ(Said(young), 0) << "the operator may not have seen the pod's end yet";
  // The replacement ran at 10:01:02; rank 0 still recovers (the new rank joins).
  job_.status.conditions.push_back(
      {"Restarting", "False", "Running", "gang running", "2026-11-21T10:01:02Z"});
  read_.recovering_seconds = 12;
  EXPECT_EQ(Said(Pass(67)), 0);
  // A gang made whole before this outage began answered an earlier loss, not this one.
  for (auto& cond : job_.status.conditions) {
    if (cond.type == "Restarting") cond.last_transition_time = "2026-11-21T10:00:30Z";
  }
  EXPECT_EQ(Said(Pass(70)), 1);
}

// A review found: the grace counted from the outage's start, rank 0's last step; a loss noticed
// long after it (a step, a checkpoint or an evaluation slower than the grace) was said at once,
// before the kubelet reported the lost pod's end, which the operator then answered itself
// (InPlaceRecovery): two events for one loss. The operator reads an outage for
// kLossReportGrace before it says it.
TEST_F(PlannerRecovering, ALossNoticedLongAfterTheLastStepWaitsForThePodsEnd) {
  read_.recovery_cause = "evaluation: all-reduce: lost peer rank 1 (connection reset)";
  read_.recovering_seconds = 15;  // noticed just now, 15 s after the last step
  EXPECT_EQ(Said(Pass(70)), 0);
  gang_[1] = Replica(1, 0, ReplicaPhase::kFailed, 137, "Error");
  gang_[1].finished_at = At(69);
  const Plan answered = Pass(72);
  EXPECT_EQ(Said(answered), 0);
  EXPECT_EQ(answered.status.in_place_recoveries, 1);
  EXPECT_NE(FindEvent(answered, "InPlaceRecovery"), nullptr);
}

// A review found: a pass that read rank 0 recovering and restarted the gang remembered the read
// under the new attempt, so that attempt's first outage counted as read long ago and was said at
// its first read (before a lost pod's end could reach the operator: two events for one loss).
TEST_F(PlannerRecovering, AReadBeforeAGangRestartIsNoReadOfTheNextAttempt) {
  job_.spec.run_policy.recovery = "GangRestart";
  gang_[1] = Replica(1, 0, ReplicaPhase::kFailed, 137, "Error");
  gang_[1].finished_at = At(60);
  const Plan restarted = Pass(61);
  ASSERT_EQ(restarted.status.attempt, 1);
  job_.spec.run_policy.recovery = "InPlace";
  gang_ = {Replica(0, 1, ReplicaPhase::kRunning), Replica(1, 1, ReplicaPhase::kRunning)};
  read_ = contract::RunnerStatus{};
  read_.state = "running";
  read_.step = 10;
  read_.start_step = 0;
  ASSERT_EQ(Pass(70).status.phase, "Running");
  read_.state = "recovering";
  read_.recovery_cause = "evaluation: all-reduce: lost peer rank 1 (connection reset)";
  read_.recovering_seconds = 14;  // since its last step at 72, after the gang ran (70)
  EXPECT_EQ(Said(Pass(86)), 0) << "the first read of this attempt's outage";
  read_.recovering_seconds = 19;
  EXPECT_EQ(Said(Pass(91)), 1);
}

// After a gang restart the last step seen is the old attempt's: an outage of the new attempt
// before its first step is still one the operator did not see (the gang was whole before it).
TEST_F(PlannerRecovering, AHangBeforeTheNewAttemptsFirstStepIsSaid) {
  job_.status.attempt = 1;
  job_.status.restarts = 1;
  gang_ = {Replica(0, 1, ReplicaPhase::kRunning), Replica(1, 1, ReplicaPhase::kRunning)};
  job_.status.conditions.push_back(
      {"Restarting", "False", "Running", "gang running", "2026-11-21T10:02:00Z"});
  read_.recovering_seconds = 40;  // the gang formed at 10:02:05, then hung
  EXPECT_EQ(Said(Pass(160)), 0);
  EXPECT_EQ(Said(Pass(165)), 1);
}

// The age is rank 0's word, untrusted: one past any clock (1e300 s) is bounded, not an overflow
// of the time it is turned into; it reads as an outage long under way.
TEST_F(PlannerRecovering, AnAbsurdAgeIsBounded) {
  read_.recovering_seconds = 1e300;
  EXPECT_EQ(ObserveRunnerStatus(read_).recovering_seconds, 365.0 * 24 * 3600);
  EXPECT_EQ(Said(Pass(61)), 0);
  EXPECT_EQ(Said(Pass(66)), 1);
}

// With backoffLimit spent, a failed recovery fails the job: the message says that, not a
// restart. An older runner (no recoveringSeconds) is judged by the last step seen.
TEST_F(PlannerRecovering, TheWaitSaysWhatComesAfterIt) {
  job_.status.restarts = job_.spec.run_policy.backoff_limit;
  read_.recovering_seconds = -1;
  read_.recovery_cause.clear();
  Pass(61);
  Plan plan = Pass(66);
  ASSERT_EQ(Said(plan), 1);
  EXPECT_EQ(FindEvent(plan, "RankRecovering")->message,
            "rank 0 recovers a lost peer in place: no completed step since step 20516 "
            "(2026-11-21T10:00:55Z); it waits up to 120s for the gang to form again, else the "
            "job fails (backoffLimit 2 spent)");
}

// Recorded on the real cluster (s40, job e2): RINGTRAIN_RECOVERY_TIMEOUT_SECONDS edited from 20
// to 60 in the running job's template (an edit that restarts no pod: the pods keep 20). The next
// outage said "it waits up to 60s" from the spec while rank 0 gave up after 20 s and the job
// failed 15 s after the event. The wait said is the one rank 0's running replica was started
// with; the spec's only when the replica does not say (an executor that does not observe it).
TEST_F(PlannerRecovering, TheWaitIsTheOneRankZerosReplicaRunsWith) {
  job_.spec.pod_template_json =
      R"({"spec":{"containers":[{"name":"runner","env":[{"name":"RINGTRAIN_RECOVERY_TIMEOUT_SECONDS","value":"60"}]}]}})";
  ASSERT_EQ(api::RecoveryTimeoutFor(job_.spec), std::chrono::seconds(60));
  gang_[0].recovery_timeout = std::chrono::seconds(20);
  gang_[1].recovery_timeout = std::chrono::seconds(60);  // a replacement built since the edit
  Pass(61);
  const Plan plan = Pass(66);
  ASSERT_EQ(Said(plan), 1);
  const std::string& m = FindEvent(plan, "RankRecovering")->message;
  EXPECT_NE(m.find("; it waits up to 20s for the gang to form again"), std::string::npos) << m;
  EXPECT_EQ(Cond(plan.status, "Stalled")->message, m);
  // A replica that does not say: the spec's.
  gang_[0].recovery_timeout.reset();
  EXPECT_NE(Cond(Pass(67).status, "Stalled")->message.find("it waits up to 60s"),
            std::string::npos);
}

// A cause too long for an Event keeps the wait after it: the cause is cut (between characters).
TEST_F(PlannerRecovering, ALongCauseIsCutAndTheWaitKept) {
  read_.recovery_cause = "x" + std::string(700, 'y');
  Pass(61);
  const Plan plan = Pass(66);
  ASSERT_EQ(Said(plan), 1);
  const std::string& m = FindEvent(plan, "RankRecovering")->message;
  EXPECT_LT(m.size(), 1024u);
  EXPECT_NE(m.find("yyy...): no completed step"), std::string::npos) << m;
  EXPECT_NE(m.find("else the gang restarts"), std::string::npos) << m;
}

// The condition speaks of a running gang's rank 0: once the job leaves Running (the failed
// recovery restarts the gang) it no longer says rank 0 waits.
TEST_F(PlannerRecovering, TheConditionEndsWhenTheJobLeavesRunning) {
  Pass(66);
  ASSERT_EQ(Cond(job_.status, "Stalled")->reason, "Recovering");
  gang_[0] = Replica(0, 0, ReplicaPhase::kFailed, 138, "Error");
  gang_[0].message = "DEADLINE_EXCEEDED: all-reduce: timed out after 10s waiting for rank 1" +
                     std::string(contract::kRecoveryFailedMarker) +
                     "rendezvous timed out after 119.999s waiting for rank 1";
  read_ = contract::RunnerStatus{};
  PlanInput in;
  in.job = &job_;
  in.replicas = gang_;
  in.now = At(190);
  const Plan restarted = PlanReconcile(in);
  EXPECT_EQ(restarted.status.phase, "Restarting");
  const api::Condition* c = Cond(restarted.status, "Stalled");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->reason, "NotTraining");
  EXPECT_EQ(c->message, "the job is Restarting: no gang of it trains now");
}

// A review found: only some of rank 0's reads ended with the job's Running; a job that failed
// right after a read of it training kept "training is making progress", and a NotTraining
// written while it restarted stayed NotTraining once it failed.
TEST_F(PlannerRecovering, EveryReadOfRankZeroEndsWhenTheJobLeavesRunning) {
  Pass(60);  // recovering
  const api::TrainingJob recovering = job_;
  read_ = contract::RunnerStatus{};
  read_.state = "running";
  read_.step = 20600;
  read_.start_step = 0;
  const Plan read = Pass(66);
  ASSERT_NE(Cond(read.status, "Stalled"), nullptr);
  ASSERT_EQ(Cond(read.status, "Stalled")->reason, "Progressing");
  const api::TrainingJob progressing = job_;
  // Rank 1 fails for good: the job fails.
  gang_[1] = Replica(1, 0, ReplicaPhase::kFailed, 1, "Error");
  gang_[1].message = "INVALID_ARGUMENT: spec.train.dataset: no such file";
  const Plan failed = Pass(70);
  ASSERT_EQ(failed.status.phase, "Failed");
  const api::Condition* c = Cond(failed.status, "Stalled");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "False");
  EXPECT_EQ(c->reason, "JobFinished") << c->message;
  EXPECT_EQ(c->message, "the job is Failed: no gang of it trains now");
  // A finished job is left as it is: a condition an older operator left stays.
  for (auto& cond : job_.status.conditions) {
    if (cond.type == "Stalled") cond.reason = "ProgressUnknown";
  }
  const Plan finished = Pass(80);
  ASSERT_NE(Cond(finished.status, "Stalled"), nullptr);
  EXPECT_EQ(Cond(finished.status, "Stalled")->reason, "ProgressUnknown");
  // NotTraining (written while the job restarted) turns JobFinished when it fails.
  job_ = recovering;
  job_.status.phase = "Restarting";
  for (auto& cond : job_.status.conditions) {
    if (cond.type == "Stalled") cond.reason = "NotTraining";
  }
  const Plan after_restart = Pass(90);
  ASSERT_EQ(after_restart.status.phase, "Failed");
  EXPECT_EQ(Cond(after_restart.status, "Stalled")->reason, "JobFinished");
  // The progress deadline's verdict is why the job ended: it stays.
  job_ = progressing;
  for (auto& cond : job_.status.conditions) {
    if (cond.type != "Stalled") continue;
    cond.status = "True";
    cond.reason = "ProgressDeadlineExceeded";
  }
  const Plan judged = Pass(95);
  ASSERT_EQ(judged.status.phase, "Failed");
  const api::Condition* verdict = Cond(judged.status, "Stalled");
  ASSERT_NE(verdict, nullptr);
  EXPECT_EQ(verdict->reason, "ProgressDeadlineExceeded");
  EXPECT_EQ(verdict->status, "True");
}

// Recorded on the real cluster (s40, jobs c0, e2, f2): SAMPLES/S kept the last rate read
// (73070.4) through a whole gang restart, until the new rank 0 first answered. README: it reads
// 0 while no gang of the job trains; a succeeded job keeps rank 0's final report.
TEST(Planner, SamplesPerSecondReadsZeroWhileNoGangTrains) {
  auto job = Job(2);
  job.status.phase = "Running";
  job.status.conditions.push_back({"Running", "True", "Running", "", "2026-11-21T10:00:00Z"});
  job.status.progress = api::Progress{500, 1, 73070.4, 0.3, "2026-11-21T10:00:55Z"};
  auto crashed = Replica(1, 0, ReplicaPhase::kFailed, 139, "Error");
  crashed.finished_at = At(60);
  const Plan restarting =
      PlanWith(job, {Replica(0, 0, ReplicaPhase::kRunning), crashed}, At(61), PlanMemory{});
  ASSERT_EQ(restarting.status.phase, "Restarting");
  ASSERT_TRUE(restarting.status.progress.has_value());
  EXPECT_EQ(restarting.status.progress->samples_per_second, 0);
  EXPECT_EQ(restarting.status.progress->step, 500) << "the last step seen stays";
  // The old rank 0, still terminating, answers with the rate it trained at: no gang trains.
  auto after = job;
  after.status = restarting.status;
  auto old = Replica(0, 0, ReplicaPhase::kRunning);
  old.terminating = true;
  ObservedProgress read = Training(520, 0);
  read.samples_per_second = 73070.4;
  read.state = "running";
  const Plan still = PlanWithProgress(after, {old}, At(62), read);
  ASSERT_EQ(still.status.phase, "Restarting");
  EXPECT_EQ(still.status.progress->samples_per_second, 0);
  // Failed: no gang trains again.
  auto spent = job;
  spent.spec.run_policy.backoff_limit = 0;
  const Plan failed =
      PlanWith(spent, {Replica(0, 0, ReplicaPhase::kRunning), crashed}, At(61), PlanMemory{});
  ASSERT_EQ(failed.status.phase, "Failed");
  EXPECT_EQ(failed.status.progress->samples_per_second, 0);
  // Running: the rate read. Succeeded: rank 0's final report.
  const Plan running = PlanWithProgress(
      job, {Replica(0, 0, ReplicaPhase::kRunning), Replica(1, 0, ReplicaPhase::kRunning)}, At(61),
      read);
  ASSERT_EQ(running.status.phase, "Running");
  EXPECT_EQ(running.status.progress->samples_per_second, 73070.4);
  auto done0 = Replica(0, 0, ReplicaPhase::kSucceeded);
  done0.message = R"({"step":4690,"epoch":10,"samplesPerSecond":812.5,"loss":0.4})";
  const Plan succeeded =
      PlanWith(job, {done0, Replica(1, 0, ReplicaPhase::kSucceeded)}, At(61), PlanMemory{});
  ASSERT_EQ(succeeded.status.phase, "Succeeded");
  EXPECT_EQ(succeeded.status.progress->samples_per_second, 812.5);
}

// A SIGKILLed rank writes no termination message: its message is the tail of its log
// (FallbackToLogsOnError), which may hold an earlier, recovered outage's "timed out ... waiting
// for rank 1". Rank 0 OOM-killed later named the healthy rank 1 as the one that stopped
// answering (found by a reviewing helper). Only a reporter's own termination message names a
// silent peer.
TEST(Planner, ASigkilledRanksLogTailNamesNoSilentPeer) {
  auto job = Job(2);
  job.status.phase = "Running";
  auto oom = Replica(0, 0, ReplicaPhase::kFailed, 137, "OOMKilled");
  oom.message =
      "[2026-11-28 10:00:00.000] [warning] lost a peer in round 0: step 12: gradient all-reduce: "
      "all-reduce: timed out after 10s waiting for rank 1; keeping this rank's state and waiting "
      "up to 2m for the gang to form again (the lost rank's replacement, or the rank itself if it "
      "lives)\n[2026-11-28 10:00:30.000] [info] round 1: gang formed again\n"
      "[2026-11-28 10:01:00.000] [info] step 400 loss 0.3\n";
  oom.finished_at = At(30);
  const Plan p = PlanWith(job, {oom, Replica(1, 0, ReplicaPhase::kRunning)}, At(31), PlanMemory{});
  ASSERT_TRUE(p.status.last_failure.has_value());
  EXPECT_EQ(p.status.last_failure->rank, 0);
  EXPECT_EQ(p.status.last_failure->message.find("stopped answering"), std::string::npos)
      << p.status.last_failure->message;
  // The runner's own termination message, one line with the newline the file ends with (as a
  // kubelet reports it), still names the peer.
  auto waited = Replica(0, 0, ReplicaPhase::kFailed, 138, "Error");
  waited.message =
      "DEADLINE_EXCEEDED: step 2346: gradient all-reduce: all-reduce: timed out after 10s "
      "waiting for rank 1\n";
  waited.finished_at = At(30);
  const Plan q =
      PlanWith(job, {waited, Replica(1, 0, ReplicaPhase::kRunning)}, At(31), PlanMemory{});
  ASSERT_TRUE(q.status.last_failure.has_value());
  EXPECT_EQ(q.status.last_failure->rank, 1) << q.status.last_failure->message;
}

}  // namespace
}  // namespace ringtrain::reconcile
