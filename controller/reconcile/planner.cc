#include "controller/reconcile/planner.h"

#include <algorithm>

#include "common/time_format.h"

namespace ringtrain::reconcile {
namespace {

using api::Condition;
using api::JobStatus;

class Planner {
 public:
  explicit Planner(const PlanInput& in)
      : in_(in), job_(*in.job), spec_(in.job->spec), now_s_(FormatRfc3339(in.now)) {
    plan_.status = job_.status;
  }

  Plan Run();

 private:
  JobStatus& st() { return plan_.status; }

  void SetCondition(const std::string& type, bool value, const std::string& reason,
                    const std::string& message) {
    SetConditionStatus(type, value ? "True" : "False", reason, message);
  }
  // status "True", "False" or "Unknown" (metav1.Condition).
  void SetConditionStatus(const std::string& type, const std::string& status,
                          const std::string& reason, const std::string& message) {
    const bool value = status != "False";
    for (auto& c : st().conditions) {
      if (c.type != type) continue;
      if (c.status != status) c.last_transition_time = now_s_;
      c.status = status;
      c.reason = reason;
      c.message = message;
      return;
    }
    if (!value) return;  // a condition that never held is not worth writing
    st().conditions.push_back({type, status, reason, message, now_s_});
  }

  const Condition* FindCondition(const std::string& type) const {
    for (const auto& c : plan_.status.conditions) {
      if (c.type == type) return &c;
    }
    return nullptr;
  }

  void SetPhase(const std::string& phase, const std::string& reason, const std::string& message,
                bool warning = false) {
    if (st().phase == phase) return;
    st().phase = phase;
    plan_.events.push_back({warning ? "Warning" : "Normal", reason, message});
  }

  void Delete(const ObservedReplica& r, const std::string& why) {
    if (r.terminating) return;
    plan_.actions.push_back({Action::Kind::kDeleteReplica, r.rank, r.attempt, r.name, why});
  }

  void Requeue(WallTime at) {
    auto d = std::chrono::duration_cast<Duration>(at - in_.now);
    if (d < Duration(0)) d = Duration(0);
    if (!plan_.requeue_after || d < *plan_.requeue_after) plan_.requeue_after = d;
  }

  void Finish(bool succeeded, const std::string& reason, const std::string& message) {
    SetPhase(succeeded ? "Succeeded" : "Failed", reason, message, !succeeded);
    SetCondition(succeeded ? "Succeeded" : "Failed", true, reason, message);
    SetCondition("Running", false, reason, message);
    SetCondition("Restarting", false, reason, message);
    if (st().completion_time.empty()) st().completion_time = now_s_;
  }

  // Gang restart: every replica of the attempt goes, attempt+1 starts from the checkpoint.
  void Restart(const std::string& reason, const std::string& message, bool counts) {
    if (counts) ++st().restarts;
    ++st().attempt;
    SetPhase("Restarting", reason, message, true);
    SetCondition("Restarting", true, reason, message);
    SetCondition("Running", false, reason, message);
    plan_.events.push_back({"Warning", "GangRestart",
                            "restarting all " + std::to_string(spec_.world_size()) +
                                " replicas as attempt " + std::to_string(st().attempt) + ": " +
                                message});
    for (const auto& r : in_.replicas) Delete(r, "gang restart");
  }

  void Cleanup() {
    const std::string& policy = spec_.run_policy.clean_pod_policy;
    for (const auto& r : in_.replicas) {
      bool active = r.phase == ReplicaPhase::kPending || r.phase == ReplicaPhase::kRunning;
      if (policy == "All" || (policy == "Running" && active)) Delete(r, "cleanPodPolicy " + policy);
    }
  }

  void CountReplicas(const std::vector<const ObservedReplica*>& current) {
    api::ReplicaCounts c;
    for (const auto* r : current) {
      switch (r->phase) {
        case ReplicaPhase::kPending:
          ++c.pending;
          break;
        case ReplicaPhase::kRunning:
          ++c.running;
          break;
        case ReplicaPhase::kSucceeded:
          ++c.succeeded;
          break;
        case ReplicaPhase::kFailed:
          ++c.failed;
          break;
      }
    }
    st().replicas = c;
  }

  bool HandleFailure(const std::vector<const ObservedReplica*>& current);
  bool HandleStall();

  const PlanInput& in_;
  const api::TrainingJob& job_;
  const api::JobSpec& spec_;
  const std::string now_s_;
  Plan plan_;
};

bool Planner::HandleFailure(const std::vector<const ObservedReplica*>& current) {
  const ObservedReplica* pick = nullptr;
  for (const auto* r : current) {
    if (r->phase != ReplicaPhase::kFailed) continue;
    // A permanent failure dooms the job whatever else failed; otherwise the lowest rank.
    if (pick == nullptr || (IsRetryable(*pick) && !IsRetryable(*r))) pick = r;
  }
  if (pick == nullptr) return false;
  st().last_failure = api::Failure{pick->rank, pick->exit_code, pick->reason, pick->message};
  std::string what = "rank " + std::to_string(pick->rank) + " (" + pick->name + ") failed";
  if (pick->exit_code != 0) what += " with exit code " + std::to_string(pick->exit_code);
  if (!pick->reason.empty()) what += ", reason " + pick->reason;
  if (!pick->message.empty()) what += ": " + pick->message;
  if (!IsRetryable(*pick)) {
    Finish(false, "PermanentFailure", what);
    Cleanup();
    return true;
  }
  if (pick->disruption) {
    Restart("Disrupted", what + " (disruption: not counted against backoffLimit)", false);
    return true;
  }
  if (st().restarts < spec_.run_policy.backoff_limit) {
    Restart("RetryableFailure", what, true);
    return true;
  }
  Finish(false, "BackoffLimitExceeded",
         what + "; backoffLimit " + std::to_string(spec_.run_policy.backoff_limit) + " reached");
  Cleanup();
  return true;
}

bool Planner::HandleStall() {
  const auto deadline_s = spec_.run_policy.progress_deadline_seconds;
  if (deadline_s <= 0 || st().phase != "Running") return false;
  std::optional<WallTime> since;
  if (st().progress && !st().progress->updated_at.empty()) {
    since = ParseRfc3339(st().progress->updated_at);
  }
  if (const Condition* running = FindCondition("Running");
      running != nullptr && running->status == "True") {
    auto t = ParseRfc3339(running->last_transition_time);
    if (t && (!since || *t > *since)) since = t;
  }
  if (!since) return false;
  WallTime deadline = *since + std::chrono::seconds(deadline_s);
  if (in_.now < deadline) {
    SetCondition("Stalled", false, "Progressing", "training is making progress");
    Requeue(deadline);
    return false;
  }
  // Past the deadline only a read that succeeded may say "no progress": a failed read is
  // reported, and a read not made this time decides nothing.
  if (!in_.progress) return false;
  if (!in_.progress->reachable) {
    const Condition* before = FindCondition("Stalled");
    std::string why = in_.progress->error.empty() ? "no answer" : in_.progress->error;
    SetConditionStatus("Stalled", "Unknown", "ProgressUnknown",
                       "no progress observed for over " + std::to_string(deadline_s) +
                           "s, and rank 0's /status cannot be read (" + why +
                           "): not restarting on a failed read");
    if (before == nullptr || before->status != "Unknown") {
      plan_.events.push_back({"Warning", "ProgressUnknown",
                              "rank 0's /status cannot be read (" + why +
                                  "); the progress deadline waits for a successful read"});
    }
    return false;
  }
  std::string msg = "no training progress for " + std::to_string(deadline_s) + "s";
  SetCondition("Stalled", true, "ProgressDeadlineExceeded", msg);
  if (st().restarts < spec_.run_policy.backoff_limit) {
    Restart("Stalled", msg, true);
  } else {
    Finish(false, "Stalled", msg + "; backoffLimit reached");
    Cleanup();
  }
  return true;
}

Plan Planner::Run() {
  if (st().phase.empty()) {
    SetPhase("Pending", "Created", "job accepted");
    SetCondition("Created", true, "Created", "job accepted");
    st().start_time = now_s_;
  }
  st().observed_generation = job_.metadata.generation;

  if (api::IsTerminal(st().phase)) {
    Cleanup();
    if (spec_.run_policy.ttl_seconds_after_finished) {
      auto done = ParseRfc3339(st().completion_time).value_or(in_.now);
      WallTime expiry = done + std::chrono::seconds(*spec_.run_policy.ttl_seconds_after_finished);
      if (in_.now >= expiry) {
        plan_.actions.push_back(
            {Action::Kind::kDeleteJob, 0, 0, job_.metadata.name, "ttlSecondsAfterFinished"});
      } else {
        Requeue(expiry);
      }
    }
    return std::move(plan_);
  }

  if (spec_.run_policy.suspend) {
    for (const auto& r : in_.replicas) Delete(r, "suspended");
    SetPhase("Suspended", "Suspended", "job suspended: replicas deleted");
    SetCondition("Suspended", true, "Suspended", "spec.runPolicy.suspend is true");
    SetCondition("Running", false, "Suspended", "job suspended");
    st().replicas = {};
    return std::move(plan_);
  }
  if (st().phase == "Suspended") {
    // A fresh gang on resume; the deadline counts from the resume, as for batch/v1 Jobs.
    ++st().attempt;
    st().start_time = now_s_;
    SetPhase("Pending", "Resumed", "job resumed");
    SetCondition("Suspended", false, "Resumed", "spec.runPolicy.suspend is false");
  }

  if (spec_.run_policy.active_deadline_seconds) {
    auto start = ParseRfc3339(st().start_time).value_or(in_.now);
    WallTime deadline = start + std::chrono::seconds(*spec_.run_policy.active_deadline_seconds);
    if (in_.now >= deadline) {
      Finish(false, "DeadlineExceeded",
             "job ran longer than activeDeadlineSeconds (" +
                 std::to_string(*spec_.run_policy.active_deadline_seconds) + "s)");
      for (const auto& r : in_.replicas) {
        if (r.phase == ReplicaPhase::kPending || r.phase == ReplicaPhase::kRunning) {
          Delete(r, "deadline exceeded");
        }
      }
      return std::move(plan_);
    }
    Requeue(deadline);
  }

  // Replicas of earlier attempts must be gone before the new gang starts: a restarted gang
  // never meets a stale one.
  std::vector<const ObservedReplica*> current;
  bool stale = false;
  for (const auto& r : in_.replicas) {
    if (r.attempt == st().attempt && r.rank >= 0 && r.rank < spec_.world_size()) {
      current.push_back(&r);
    } else {
      stale = true;
      Delete(r, "replica of attempt " + std::to_string(r.attempt));
    }
  }
  CountReplicas(current);
  if (stale) return std::move(plan_);

  if (HandleFailure(current)) return std::move(plan_);

  const int world = spec_.world_size();
  if (st().replicas.succeeded == world) {
    Finish(true, "Succeeded", "all " + std::to_string(world) + " replicas succeeded");
    return std::move(plan_);
  }

  if (in_.progress && in_.progress->reachable) {
    const auto& p = *in_.progress;
    if (!st().progress || st().progress->step != p.step) {
      st().progress = api::Progress{p.step, p.epoch, p.samples_per_second, p.loss, now_s_};
    } else {
      st().progress->samples_per_second = p.samples_per_second;
      st().progress->loss = p.loss;
      st().progress->epoch = p.epoch;
    }
  }

  std::vector<bool> present(static_cast<std::size_t>(world), false);
  for (const auto* r : current) present[static_cast<std::size_t>(r->rank)] = true;
  for (int rank = 0; rank < world; ++rank) {
    if (!present[static_cast<std::size_t>(rank)]) {
      plan_.actions.push_back({Action::Kind::kCreateReplica, rank, st().attempt,
                               ReplicaName(job_.metadata.name, st().attempt, rank), "missing"});
    }
  }

  if (st().replicas.running + st().replicas.succeeded == world) {
    SetPhase("Running", "Running", "all " + std::to_string(world) + " replicas running");
    SetCondition("Running", true, "Running", "all replicas running");
    SetCondition("Restarting", false, "Running", "gang running");
    if (HandleStall()) return std::move(plan_);
  } else if (st().phase != "Restarting") {
    SetPhase("Pending", "Pending", "waiting for replicas to start");
  }
  return std::move(plan_);
}

}  // namespace

bool IsRetryable(const ObservedReplica& r) {
  if (r.disruption) return true;
  if (r.reason == "Evicted" || r.reason == "NodeLost" || r.reason == "Deleted" ||
      r.reason == "Preempted" || r.reason == "OOMKilled") {
    return true;
  }
  return r.exit_code >= 128 && r.exit_code <= 255;
}

std::string ReplicaName(const std::string& job, int attempt, int rank) {
  return job + "-a" + std::to_string(attempt) + "-" + std::to_string(rank);
}

Plan PlanReconcile(const PlanInput& in) { return Planner(in).Run(); }

}  // namespace ringtrain::reconcile
