#include "controller/reconcile/planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "common/runner_contract.h"
#include "common/time_format.h"
#include "common/utf8.h"
#include "controller/reconcile/observe_status.h"

namespace ringtrain::reconcile {
namespace {

// What a failure's message says in one line. A runner reports its cause as one line; a process
// killed before it could (SIGKILL, OOM) leaves Kubernetes' fallback, the tail of its log, whose
// last line is the most an event or condition should carry (status.lastFailure keeps it all).
std::string Headline(const std::string& message) {
  if (message.find('\n') == std::string::npos) return message;
  std::string_view m = message;
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ' || m.back() == '\r')) {
    m.remove_suffix(1);
  }
  const auto nl = m.rfind('\n');
  return "last log line: " + std::string(nl == std::string_view::npos ? m : m.substr(nl + 1));
}

// The one rank a failed in-place recovery waited for in vain, as the runner's message names it
// after contract::kRecoveryFailedMarker ("...; in-place recovery failed: rendezvous timed out
// after 120s waiting for rank 1 (world size 2)"): the hung or lost peer, not the rank that
// waited. Nothing when the round failed otherwise or waited for several ranks.
std::optional<int> RecoveryWaitedFor(std::string_view message) {
  const auto marker = message.find(contract::kRecoveryFailedMarker);
  if (marker == std::string_view::npos) return std::nullopt;
  std::string_view round = message.substr(marker + contract::kRecoveryFailedMarker.size());
  constexpr std::string_view kWaiting = " waiting for rank ";
  constexpr std::string_view kWorld = " (world size ";
  const auto at = round.find(kWaiting);
  if (at == std::string_view::npos) return std::nullopt;
  round.remove_prefix(at + kWaiting.size());
  std::size_t digits = 0;
  while (digits < round.size() && digits < 6 &&
         std::isdigit(static_cast<unsigned char>(round[digits]))) {
    ++digits;
  }
  if (digits == 0 || !round.substr(digits).starts_with(kWorld)) return std::nullopt;
  return std::stoi(std::string(round.substr(0, digits)));
}

// The digits of a rank at the start of `text` (at most 6), and what follows them; nullopt when
// it does not start with one.
std::optional<std::pair<int, std::string_view>> LeadingRank(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && digits < 6 &&
         std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  return std::pair{std::stoi(std::string(text.substr(0, digits))), text.substr(digits)};
}

// The one peer a rank that failed on its own names as the rank that stopped answering it, in the
// built-in runner's words (runner/comm/tcp/tcp_communicator.cc): a collective that timed out on
// it ("all-reduce: timed out after 10s waiting for rank 1"), or the rendezvous store that rank 0
// hosts gone silent with it ("lost peer rank 0 (the rendezvous store it hosts is unreachable:
// ..."; its store answers nothing while rank 0 hangs). Read from the loss the report starts
// with, before any failed in-place recovery's account (RecoveryWaitedFor reads that), and from
// the gang's first failure when the report quotes one ("; first failure: <cause> (rank K)": a
// rank that timed out behind a live neighbour names that neighbour, the first failure the rank
// it waited for). Nothing for any other failure: a lost connection, a rendezvous at the start,
// a wait for several ranks.
std::optional<int> StoppedAnswering(std::string_view message) {
  std::string_view loss = message.substr(0, message.find(contract::kRecoveryFailedMarker));
  constexpr std::string_view kStoreLost =
      ": lost peer rank 0 (the rendezvous store it hosts is unreachable: ";
  if (loss.find(kStoreLost) != std::string_view::npos) return 0;
  constexpr std::string_view kFirst = "; first failure: ";
  if (const auto first = loss.find(kFirst); first != std::string_view::npos) {
    loss.remove_prefix(first + kFirst.size());
    // GangFailure::Describe: the cause, then " (rank K)".
    if (const auto by = loss.rfind(" (rank "); by != std::string_view::npos) {
      loss = loss.substr(0, by);
    }
  }
  constexpr std::string_view kTimedOut = ": timed out after ";
  constexpr std::string_view kWaiting = " waiting for rank ";
  const auto at = loss.rfind(kTimedOut);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = loss.substr(at + kTimedOut.size());
  // The collective timeout as FormatDuration writes it ("10s", "1m30s"): one word.
  const auto space = rest.find(' ');
  if (space == 0 || space == std::string_view::npos) return std::nullopt;
  rest.remove_prefix(space);
  if (!rest.starts_with(kWaiting)) return std::nullopt;
  const auto rank = LeadingRank(rest.substr(kWaiting.size()));
  // The collective's words end with the rank; the rendezvous' go on (" (world size W)"), as a
  // ring's connect does (" to connect").
  if (!rank || !(rank->second.empty() || rank->second.starts_with(";"))) return std::nullopt;
  return rank->first;
}

// A time the status stores (metav1.Time: to the second, truncated), read as the start of a wait:
// what it records happened within that second, so a wait counted from its end is never early and
// at most 1 s late. (Kubernetes' own controllers count from the truncated time they read back,
// so theirs may end up to 1 s early.)
std::optional<WallTime> StoredSecondEnd(const std::string& stored) {
  auto t = ParseRfc3339(stored);
  if (t) *t += std::chrono::seconds(1);
  return t;
}

// A replica that ended of a deletion: it answered the SIGTERM (143), or ignored it and was
// killed when the grace period ended (137 without OOMKilled; an OOM kill is the job's own).
bool EndedOfADeletion(const ObservedReplica& r) {
  return r.exit_code == 128 + 15 || (r.exit_code == 128 + 9 && r.reason != "OOMKilled");
}

// t + `seconds`, saturated at the clock's ends: a spec that did not come through the parser (which
// bounds each duration by api::kMaxPolicySeconds) must not wrap around into the past.
WallTime AfterSeconds(WallTime t, std::int64_t seconds) {
  using std::chrono::duration_cast;
  const std::int64_t max_s =
      duration_cast<std::chrono::seconds>(WallTime::max().time_since_epoch()).count();
  const std::int64_t min_s =
      duration_cast<std::chrono::seconds>(WallTime::min().time_since_epoch()).count();
  const std::int64_t t_s = duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
  if (seconds >= max_s - t_s) return WallTime::max();
  if (seconds <= min_s - t_s) return WallTime::min();
  return t + std::chrono::seconds(seconds);
}

// Whether the replica (or, once it ended, its pod) still runs and holds its node.
bool Active(const ObservedReplica& r) {
  return r.phase == ReplicaPhase::kPending || r.phase == ReplicaPhase::kRunning || r.pod_running;
}

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
    SetJobConditionStatus(&st(), type, value ? "True" : "False", reason, message, now_s_);
  }
  // Like SetCondition, but a False condition is written even when it never held: PodsReady's
  // first False starts the scheduling wait.
  void RecordCondition(const std::string& type, bool value, const std::string& reason,
                       const std::string& message) {
    SetJobConditionStatus(&st(), type, value ? "True" : "False", reason, message, now_s_,
                          /*record_false=*/true);
  }
  // status "True", "False" or "Unknown" (metav1.Condition).
  void SetConditionStatus(const std::string& type, const std::string& status,
                          const std::string& reason, const std::string& message) {
    SetJobConditionStatus(&st(), type, status, reason, message, now_s_);
  }

  void ForgetPlacementWait() {
    std::erase_if(st().conditions, [](const Condition& c) {
      return c.type == kPodsReadyCondition || c.type == kQueuedCondition;
    });
  }
  // A new attempt (a gang restart, a resume): its placement wait is forgotten and starts again
  // when its gang is created (HandleWait); until then PodsReady (kubectl get tj's PODS) says
  // that the pods of earlier attempts go first.
  void AwaitOldPods() {
    ForgetPlacementWait();
    RecordCondition(kPodsReadyCondition, false, kOldPodsTerminatingReason,
                    "attempt " + std::to_string(st().attempt) +
                        " is created once the pods of earlier attempts are gone");
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

  void Delete(const ObservedReplica& r, const std::string& why,
              std::optional<Duration> grace = std::nullopt) {
    if (r.terminating) return;
    plan_.actions.push_back({Action::Kind::kDeleteReplica, r.rank, r.attempt, r.name, why, grace});
  }

  // Force-deletes each pod still terminating kStuckTerminatingAfter past its deletion deadline
  // with its containers not known to have ended (its node no longer reports), and comes back
  // for one not yet that late. Said in a Warning event naming the pod and its node.
  void ForceDeleteStuck() {
    for (const auto& r : in_.replicas) {
      // Ended (and no sidecar keeps the pod running): its node reported it, and a finalizer
      // keeps it. Already deleted with grace 0 (ours, or a person's --force): only a finalizer
      // keeps it now, which another delete does not lift (each pass said "deleted" again).
      const bool ended =
          (r.phase == ReplicaPhase::kSucceeded || r.phase == ReplicaPhase::kFailed) &&
          !r.pod_running;
      if (!r.terminating || !r.deletion_deadline || ended || r.deletion_forced) continue;
      const WallTime due = *r.deletion_deadline + kStuckTerminatingAfter;
      if (in_.now < due) {
        Requeue(due);
        continue;
      }
      Action a{Action::Kind::kDeleteReplica, r.rank, r.attempt, r.name, "stuck terminating"};
      a.force = true;
      plan_.actions.push_back(std::move(a));
      plan_.events.push_back(
          {"Warning", "ForceDeleted",
           "pod " + r.name + (r.node.empty() ? "" : " on node " + r.node) +
               " was still terminating " +
               std::to_string(
                   std::chrono::duration_cast<std::chrono::seconds>(kStuckTerminatingAfter)
                       .count()) +
               "s past its deletion deadline, its containers not reported stopped (its node "
               "does not answer): deleted without waiting for the node (grace 0)"});
    }
  }

  void Requeue(WallTime at) {
    if (at <= in_.now) at = in_.now;
    // Never further than the longest duration a spec may say: an executor adds it to its clock.
    const WallTime latest = AfterSeconds(in_.now, api::kMaxPolicySeconds);
    if (at > latest) at = latest;
    const auto d = std::chrono::duration_cast<Duration>(at - in_.now);
    if (!plan_.requeue_after || d < *plan_.requeue_after) plan_.requeue_after = d;
  }

  // Turns a condition that holds (True, or Unknown) False, for `reason`. One already False keeps
  // its reason and message: they say why it turned False, at its lastTransitionTime (a
  // metav1.Condition's reason is its last transition's), which a later cause must not rewrite.
  void EndCondition(const std::string& type, const std::string& reason,
                    const std::string& message) {
    const Condition* c = FindCondition(type);
    if (c != nullptr && c->status != "False") SetCondition(type, false, reason, message);
  }

  void Finish(bool succeeded, const std::string& reason, const std::string& message) {
    SetPhase(succeeded ? "Succeeded" : "Failed", reason, message, !succeeded);
    SetCondition(succeeded ? "Succeeded" : "Failed", true, reason, message);
    EndCondition("Running", reason, message);
    EndCondition("Restarting", reason, message);
    // The gang no longer runs (kubectl get tj shows this reason as PODS): a wait's reason
    // (Unschedulable, ErrImagePull) stays, as it says why the job ended; PodsStarting says
    // nothing of that.
    if (const Condition* ready = FindCondition(kPodsReadyCondition);
        ready != nullptr && (ready->status == "True" || ready->reason == kPodsStartingReason ||
                             ready->reason == kOldPodsTerminatingReason)) {
      SayReplicasEnded(succeeded);
    }
    if (st().completion_time.empty()) st().completion_time = now_s_;
    // A restart whose new gang never reported progress (a spec.command program reports none) is
    // no longer pending once the job ended: status.recovery.pendingRestart stayed for good
    // (review, real cluster). A gang that then succeeded did run after it: counted, its cost
    // unknown.
    api::RecoveryAccount& account = st().recovery;
    if (account.restart_from_step >= 0) {
      if (succeeded) ++account.gang_restarts;
      account.restart_from_step = -1;
      account.restarted_at.clear();
    }
  }

  // PodsReady of a finished job (JobFinished): its replicas no longer run, or, where
  // cleanPodPolicy None keeps some running (review: "no longer run" was said of one that ran
  // on), how many; said again as they end.
  void SayReplicasEnded(bool succeeded) {
    int active = 0;
    for (const auto& r : in_.replicas) {
      const bool deleted_now =
          std::any_of(plan_.actions.begin(), plan_.actions.end(), [&r](const Action& a) {
            return a.kind == Action::Kind::kDeleteReplica && a.name == r.name;
          });
      if (Active(r) && !r.terminating && !deleted_now) ++active;
    }
    const bool kept = spec_.run_policy.clean_pod_policy == api::CleanPodPolicy::kNone;
    SetCondition(
        kPodsReadyCondition, false, "JobFinished",
        std::string("the job has ") + (succeeded ? "succeeded" : "failed") +
            (kept && active > 0 ? ": its gang no longer trains (cleanPodPolicy None leaves " +
                                      std::to_string(active) + " replica(s) running)"
                                : ": its replicas no longer run"));
  }

  // Since when the job has not trained, at the latest: when its last step was first seen
  // (status.progress.updatedAt), or now when none was (or one that does not read as a time
  // before now). The gang may have hung long before it is restarted (a progress deadline, a
  // collective timeout), so a restart's time without training counts from here, not from the
  // restart: an upper bound.
  std::string LastProgressSeen() const {
    if (!plan_.status.progress) return now_s_;
    const auto seen = ParseRfc3339(plan_.status.progress->updated_at);
    return seen && *seen <= in_.now ? FormatRfc3339(*seen) : now_s_;
  }

  // Gang restart: every replica of the attempt goes, attempt+1 starts from the checkpoint.
  void Restart(const std::string& reason, const std::string& message, bool counts) {
    if (counts) ++st().restarts;
    const int was = GangSize(st().attempt);
    ++st().attempt;
    st().replaced_pods.clear();
    // What this restart costs is known when the new gang trains (AccountRecoveries). A restart
    // before that one trained keeps the earlier mark: the job has not trained since.
    api::RecoveryAccount& account = st().recovery;
    if (account.restart_from_step < 0) {
      account.restart_from_step = st().progress ? st().progress->step : 0;
      account.restarted_at = LastProgressSeen();
    }
    account.attempt_in_place = 0;
    account.attempt_steps_lost = 0;
    account.attempt_seconds = 0;
    // The new attempt's placement wait starts now, except after NotPlaced or NodeRejected: that
    // gang was never whole, and its wait goes on (runPolicy.schedulingTimeoutSeconds bounds it).
    if (reason != "NotPlaced" && reason != "NodeRejected") AwaitOldPods();
    SetPhase("Restarting", reason, message, true);
    SetCondition("Restarting", true, reason, message);
    SetCondition("Running", false, reason, message);
    const std::size_t before = plan_.actions.size();
    // After a failure the gang trains no more, and of the built-in runner's ranks only rank 0
    // has work left in its grace: the save of the state it kept. The others exit at the
    // SIGTERM; one that cannot (hung, SIGSTOPped) held the next attempt back for its whole
    // grace, 30 s of a 2-minute recovery. A restart of a gang that may still train (a resize,
    // an edit) keeps every grace: the ranks agree on a last step for rank 0 to save. So do
    // pods whose template gives the grace other work (a sidecar, a preStop hook): the grace is
    // the whole pod's.
    const bool failed = reason == "RetryableFailure" || reason == "RecoveryFailed" ||
                        reason == "Stalled" || reason == "Disrupted" || reason == "PodDeleted" ||
                        reason == "NodeRejected" || reason == "NotPlaced" ||
                        reason == "OperatorUpgraded";
    for (const auto& r : in_.replicas) Delete(r, "gang restart", GraceAfter(failed, r));
    const std::size_t deleting = plan_.actions.size() - before;
    // A resize restarts as the new size and deletes the old gang's pods: the event names both
    // sizes and the pods it deletes, never "all 1 replicas" while 2 pods go.
    const std::string attempt = " as attempt " + std::to_string(st().attempt);
    plan_.events.push_back({"Warning", "GangRestart",
                            was == 0 || was == spec_.replicas
                                ? "restarting all " + std::to_string(spec_.replicas) + " replicas" +
                                      attempt + ": " + message
                                : "restarting with " + std::to_string(spec_.replicas) +
                                      " replica(s) (was " + std::to_string(was) + ")" + attempt +
                                      ", deleting " + std::to_string(deleting) +
                                      " pod(s): " + message});
  }

  // How many replicas the gang of `attempt` was started with, as its replicas say (the world
  // they were started into, over their ranks per replica), else how many ranks of it are seen;
  // 0 when none is.
  int GangSize(int attempt) const {
    std::set<int> ranks;
    for (const auto& r : in_.replicas) {
      if (r.attempt != attempt || r.rank < 0) continue;
      if (r.world_size > 0 && r.nproc_per_node > 0) return r.world_size / r.nproc_per_node;
      ranks.insert(r.rank);
    }
    return static_cast<int>(ranks.size());
  }

  // A fresh gang on resume, from the newest checkpoint; the deadline counts from the resume, as
  // for batch/v1 Jobs. Its cost is accounted like a gang restart's (AccountRecoveries), from
  // the resume: the time suspended was asked for, not lost to a failure.
  void Resume() {
    // A job created suspended (a queue that admits jobs by resuming them: Kueue) starts now:
    // no gang of it ever ran, so none restarts, and nothing was lost.
    if (st().start_time.empty() && !st().progress && st().attempt == 0 && st().restarts == 0) {
      st().start_time = now_s_;
      SetPhase("Pending", "Resumed", "job resumed");
      SetCondition("Suspended", false, "Resumed", "spec.runPolicy.suspend is false");
      return;
    }
    ++st().attempt;
    st().replaced_pods.clear();
    st().start_time = now_s_;
    api::RecoveryAccount& account = st().recovery;
    if (account.restart_from_step < 0) {
      account.restart_from_step = st().progress ? st().progress->step : 0;
      account.restarted_at = now_s_;
    } else {
      // Suspended before the gang of an earlier restart trained: that restart's time without
      // training goes on, less the time suspended.
      const Condition* suspended = FindCondition("Suspended");
      const auto since = ParseRfc3339(account.restarted_at);
      const auto paused = suspended != nullptr && suspended->status == "True"
                              ? ParseRfc3339(suspended->last_transition_time)
                              : std::optional<WallTime>();
      account.restarted_at = since && paused && *since <= *paused && *paused <= in_.now
                                 ? FormatRfc3339(in_.now - (*paused - *since))
                                 : now_s_;
    }
    account.attempt_in_place = 0;
    account.attempt_steps_lost = 0;
    account.attempt_seconds = 0;
    AwaitOldPods();
    SetPhase("Pending", "Resumed", "job resumed");
    SetCondition("Suspended", false, "Resumed", "spec.runPolicy.suspend is false");
  }

  // The grace to delete `r` with when the gang stops: the short one for a built-in runner's
  // rank that has nothing left to save after a failure (Restart says why), else its pod's own.
  std::optional<Duration> GraceAfter(bool failed, const ObservedReplica& r) const {
    const bool nothing_to_save =
        failed && spec_.command.empty() && !api::TemplateGivesTheGraceWork(spec_);
    return nothing_to_save && (r.rank != 0 || rank0_hung_)
               ? std::optional<Duration>(kNoWorkLeftGrace)
               : std::nullopt;
  }

  // A job that ended for a failure (permanent, backoffLimit reached, stalled for good; its
  // Failed condition says, on the pass that ends it and on any later one that retries a delete)
  // trains no more: the same graces as a gang restart's after a failure, so a hung rank does not
  // hold its pod (and its GPU) for the whole grace. A deadline or a success keeps every grace.
  void Cleanup() {
    const Condition* ended = FindCondition("Failed");
    const bool failed = ended != nullptr && ended->status == "True" &&
                        (ended->reason == "PermanentFailure" ||
                         ended->reason == "BackoffLimitExceeded" || ended->reason == "Stalled");
    const api::CleanPodPolicy policy = spec_.run_policy.clean_pod_policy;
    for (const auto& r : in_.replicas) {
      if (policy == api::CleanPodPolicy::kAll ||
          (policy == api::CleanPodPolicy::kRunning && Active(r))) {
        Delete(r, "cleanPodPolicy " + std::string(contract::NameOf(policy)), GraceAfter(failed, r));
      }
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
          // A released pod's end (Released) is the release, no failed replica.
          if (!Released(*r)) ++c.failed;
          break;
      }
    }
    st().replicas = c;
  }

  // After the end, replicas stop (cleanPodPolicy) or vanish: what ran is no longer running,
  // and what ended stays counted.
  void CountFinalReplicas() {
    api::ReplicaCounts c = st().replicas;
    c.pending = c.running = 0;
    int succeeded = 0;
    int failed = 0;
    const auto completed = ParseRfc3339(st().completion_time);
    for (const auto& r : in_.replicas) {
      if (r.attempt != st().attempt) continue;
      if (r.phase == ReplicaPhase::kSucceeded) ++succeeded;
      // One the executor deleted itself (a release at the scheduling timeout) did not fail. Nor
      // did one that ended of its deletion once the job had ended (the end's own release: the
      // scheduling timeout, the deadline, cleanPodPolicy), told by its end time, which outlives
      // the executor's memory of its deletes (that ends with the job) and the executor itself.
      const bool ended_by_the_end = r.terminating && EndedOfADeletion(r) && r.finished_at &&
                                    completed && *r.finished_at >= *completed;
      if (r.phase == ReplicaPhase::kFailed && !Released(r) && !ended_by_the_end) ++failed;
      if (r.terminating) continue;
      if (r.phase == ReplicaPhase::kPending) ++c.pending;
      if (r.phase == ReplicaPhase::kRunning) ++c.running;
    }
    c.succeeded = std::max(c.succeeded, succeeded);
    c.failed = std::max(c.failed, failed);
    st().replicas = c;
  }

  // Rank 0's account of the current attempt: a gang restart's cost once its new gang trains,
  // and the in-place recoveries the gang completed since the last look; an event for each.
  void AccountRecoveries(const ObservedProgress& p) {
    if (!p.training) return;
    api::RecoveryAccount& a = st().recovery;
    auto seconds = [](double s) { return std::round(s * 10) / 10; };
    if (a.restart_from_step >= 0 && p.start_step >= 0) {
      const std::int64_t lost = std::max<std::int64_t>(0, a.restart_from_step - p.start_step);
      const auto since = ParseRfc3339(a.restarted_at);
      const double idle =
          since ? seconds(std::max(0.0, std::chrono::duration<double>(in_.now - *since).count()))
                : 0;
      ++a.gang_restarts;
      if (p.start_step > 0) ++a.from_checkpoint;
      a.steps_lost += lost;
      a.seconds_without_training = seconds(a.seconds_without_training + idle);
      a.restart_from_step = -1;
      a.restarted_at.clear();
      plan_.events.push_back(
          {"Normal", "GangRestarted",
           "attempt " + std::to_string(st().attempt) + " trains again from " +
               (p.start_step > 0 ? "its checkpoint's step " + std::to_string(p.start_step)
                                 : std::string("step 0")) +
               ": at least " + std::to_string(lost) +
               " step(s) lost (from the last progress seen), at most " + FormatSeconds(idle) +
               " without training" + Totals()});
    }
    if (p.recoveries > a.attempt_in_place) {
      const int n = p.recoveries - a.attempt_in_place;
      const std::int64_t lost =
          std::max<std::int64_t>(0, p.recovery_steps_lost - a.attempt_steps_lost);
      const double idle = seconds(std::max(0.0, p.recovery_seconds - a.attempt_seconds));
      a.in_place += n;
      a.steps_lost += lost;
      a.seconds_without_training = seconds(a.seconds_without_training + idle);
      a.attempt_in_place = p.recoveries;
      a.attempt_steps_lost = p.recovery_steps_lost;
      a.attempt_seconds = p.recovery_seconds;
      plan_.events.push_back(
          {"Normal", "RecoveredInPlace",
           (n == 1 ? std::string("the gang trains again")
                   : std::to_string(n) + " in-place recoveries: the gang trains again") +
               " from step " + std::to_string(p.last_recovery_step) + ": " + std::to_string(lost) +
               " step(s) lost, " + FormatSeconds(idle) + " without training" + Totals()});
    }
  }

  // ": step 9380, test accuracy 0.8945" (or test MSE), what the job ended with; "" unknown.
  std::string FinalFigures() {
    if (!st().progress) return "";
    const api::Progress& p = *st().progress;
    std::string out = ": step " + std::to_string(p.step);
    char buf[64];
    if (p.test_accuracy >= 0) {
      std::snprintf(buf, sizeof(buf), ", test accuracy %.4f", p.test_accuracy);
      out += buf;
    } else if (p.test_mse >= 0) {
      std::snprintf(buf, sizeof(buf), ", test MSE %.6g", p.test_mse);
      out += buf;
    }
    return out;
  }

  static std::string FormatSeconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1fs", s);
    return buf;
  }

  std::string Totals() {
    const api::RecoveryAccount& a = st().recovery;
    return " (this job: " + std::to_string(a.in_place) + " in place, " +
           std::to_string(a.gang_restarts) + " gang restart(s), " + std::to_string(a.steps_lost) +
           " step(s) lost, " + FormatSeconds(a.seconds_without_training) + " without training)";
  }

  void SetProgress(const ObservedProgress& p) {
    AccountRecoveries(p);
    if (p.idle && st().progress) {
      // A rank 0 that does not train (a new process starting after a gang restart or as a
      // replacement, or a gang recovering) has no step of its own yet: the job's is still the
      // last one seen, and the job trains at no speed. (Its step 0 and the rate it had before
      // a failure were shown before.) The progress deadline still counts from that step.
      st().progress->samples_per_second = 0;
      return;
    }
    // For people (kubectl's SAMPLES/S column): a tenth of a sample per second is plenty; the
    // metrics carry the exact figure.
    const double samples_per_second = p.idle ? 0.0 : std::round(p.samples_per_second * 10) / 10;
    if (!st().progress || st().progress->step != p.step) {
      const api::Progress before = st().progress.value_or(api::Progress{});
      st().progress = api::Progress{p.step, p.epoch, samples_per_second, p.loss, now_s_};
      st().progress->test_accuracy = before.test_accuracy;
      st().progress->test_mse = before.test_mse;
    } else {
      st().progress->samples_per_second = samples_per_second;
      st().progress->loss = p.loss;
      st().progress->epoch = p.epoch;
    }
    // The last evaluation stays until the next one (a restarted gang has not evaluated yet),
    // which replaces it whole: a model of the other kind (an edit changed the task) leaves no
    // figure of the first behind. An accuracy to a millionth: it is a float's ratio of correct
    // answers over the test set.
    if (p.test_accuracy >= 0 || p.test_mse >= 0) {
      st().progress->test_accuracy =
          p.test_accuracy >= 0 ? std::round(p.test_accuracy * 1e6) / 1e6 : -1;
      st().progress->test_mse = p.test_mse;
    }
  }

  // A change of the world (replicas, gpusPerReplica) on a running gang: a new attempt at the new
  // size from the newest checkpoint, never a pod of one world beside ranks of another. The same
  // for any other edit of what a replica runs (PlanInput::spec_hashes): reason SpecChanged.
  bool HandleResize();
  // A replica of this attempt that failed permanently (exit 1-127: its own cause, or another
  // rank's it reports): it dooms the job whatever else changed.
  bool FailedPermanently(const ObservedReplica& r) {
    return r.attempt == st().attempt && r.phase == ReplicaPhase::kFailed && !Retryable(r);
  }
  // IsRetryable under the job's runPolicy.restartPolicy.
  bool Retryable(const ObservedReplica& r) const {
    return IsRetryable(r, spec_.run_policy.restart_policy == "OnFailure");
  }
  bool HandleFailure(const std::vector<const ObservedReplica*>& current);
  // runPolicy.recovery InPlace: the lost replicas are deleted and re-created alone (the same
  // names, the same attempt) while the surviving ones keep running and hand their state to the
  // replacements; true when that is the plan.
  bool RecoverInPlace(const std::vector<const ObservedReplica*>& current,
                      const ObservedReplica& pick, const std::string& what);
  bool HandleStall();
  void NoteRankStalled(std::optional<WallTime> deadline);
  void NoteRankRecovering();
  // How long rank 0 waits for its gang to form again before it gives up recovering in place:
  // what its running replica was started with (an edit of the spec restarts no replica for it),
  // else what the spec says.
  Duration RankZeroRecoveryTimeout() const;
  // Whether the running ranks of `current` wait for a replacement of a lost one: what their
  // replicas were started with (a survivor started with 0 exits at the loss, and one started
  // with a wait keeps waiting after an edit to 0), else, when none says, what the spec says.
  bool SurvivorsWaitInPlace(const std::vector<const ObservedReplica*>& current) const;
  // The Stalled condition from this pass's successful read of rank 0's /status.
  void NoteProgressRead(std::optional<WallTime> deadline);
  // " since step N (its time)": the job's last step seen; "" when none was.
  std::string SinceLastStep();
  // A replica that would keep running beside a replacement built now and was built by another
  // configuration of the executor (PlanInput::options_hash); nullptr when there is none.
  const ObservedReplica* BuiltOtherwise(const std::vector<const ObservedReplica*>& current) const;
  // In place of creating a replica beside `other` (BuiltOtherwise; `instead` says which, and
  // that it is not made): a new attempt of the gang from the newest checkpoint. `counts`: the loss
  // that asked for the replacement counts against backoffLimit (a crash, an OOM kill); the upgrade
  // itself never does.
  void RestartForUpgrade(const ObservedReplica& other, const std::string& instead, bool counts);
  // Where an uncounted restart's new attempt starts, as its message says it: the newest
  // checkpoint, or step 0 when the checkpoints died with the old pods (review: a label edit of
  // a shipped example said "from the newest checkpoint" beside CheckpointsEphemeral and trained
  // from 0); a program of the user's (spec.command) resumes from what it saved itself.
  std::string NewAttemptFrom() const {
    if (!spec_.command.empty()) return "";
    return in_.checkpoints_ephemeral
               ? " from step 0 (spec.checkpoint has no volume: the checkpoints died with the old "
                 "pods)"
               : " from the newest checkpoint";
  }
  // Whether the replica is part of a partial gang the executor released itself (the API refused
  // to create the rest of it): deleted by the executor (its memory, or its mark on the pod for
  // an executor started since), of the current attempt and no rank replaced in place. Its end
  // while it terminates is the release, not a failure of the job: the gang is created again
  // whole once it is gone, within the same placement wait and attempt.
  bool Released(const ObservedReplica& r) const {
    const auto& replaced = plan_.status.replaced_pods;
    return r.terminating && r.attempt == plan_.status.attempt &&
           (MarkedReleased(r) || in_.memory.deleted.contains(r.name)) &&
           std::find(replaced.begin(), replaced.end(), r.name) == replaced.end();
  }
  // Whether the replica's pod was deleted by someone other than this executor: one that vanished
  // (WithVanished: reason Deleted), or one that ended of the deletion while it terminates and
  // that the executor did not delete (PlanMemory::deleted, or, durable across a restart of the
  // executor, its mark on the pod: ObservedReplica::deleted_by_executor). Told from the pod and
  // those alone, not from having seen it before: a freshly started executor first sees such a
  // pod already terminating. Ended of the deletion: it answered the SIGTERM (143), or ignored it
  // and was killed when the grace period ended (137 without OOMKilled; an OOM kill is the job's
  // own).
  bool DeletedByOthers(const ObservedReplica& r) const {
    if (r.reason == "Deleted") return true;
    return r.terminating && EndedOfADeletion(r) && !MarkedReleased(r) &&
           !in_.memory.deleted.contains(r.name);
  }
  // The executor's mark of a release on the pod, taken while a release can be under way: the API
  // refused to create a replica (ReplicaFailure True, until the whole gang is created). A mark
  // left on a pod whose delete then failed, in a gang created whole since, is not trusted: a
  // later deletion of that pod by someone else is told as one.
  bool MarkedReleased(const ObservedReplica& r) const {
    if (!r.deleted_by_executor) return false;
    const Condition* refused = FindCondition(kReplicaFailureCondition);
    return refused != nullptr && refused->status == "True";
  }
  // A replica that failed for a cause of its node: the next attempts stay off that node.
  void AvoidNodeOf(const ObservedReplica& r);
  // Required avoidance left the gang unplaceable for kAvoidanceRelaxAfter: relax it to
  // preferred and start a new attempt (not counted). True when it did.
  bool RelaxAvoidance(const std::string& wait_reason, const std::string& wait_message);
  // Part of the gang is not running: PodsReady=False with the cluster's reason, a Warning event
  // when a real wait starts, and the end of the wait after runPolicy.schedulingTimeoutSeconds
  // (or at once for a reason no wait can heal). True when the job ended.
  bool HandleWait(const std::vector<const ObservedReplica*>& current, int pods);
  // The whole gang runs: open the gate of every replica still waiting at it.
  void OpenGates(const std::vector<const ObservedReplica*>& current);

  const PlanInput& in_;
  const api::TrainingJob& job_;
  const api::JobSpec& spec_;
  const std::string now_s_;
  Plan plan_;
  // The failure being answered is a hung rank 0 (HandleFailure): a gang restart gives it the
  // short grace too, as it can save nothing.
  bool rank0_hung_ = false;
};

bool Planner::HandleResize() {
  // A replica of the attempt that failed permanently (exit 1-127: its own cause, or another
  // rank's it reports) dooms the job whatever the edit (a resize too): failure handling reads it
  // first, or a new attempt of the new spec would stand in for it (an uncounted restart of a job
  // that failed).
  if (std::any_of(in_.replicas.begin(), in_.replicas.end(),
                  [this](const ObservedReplica& r) { return FailedPermanently(r); })) {
    return false;
  }
  const int gpus = std::max(1, spec_.gpus_per_replica);
  const ObservedReplica* other = nullptr;
  for (const auto& r : in_.replicas) {
    if (r.attempt != st().attempt || r.terminating || r.world_size <= 0) continue;
    if (r.world_size != spec_.world_size() || (r.nproc_per_node > 0 && r.nproc_per_node != gpus)) {
      other = &r;
      break;
    }
  }
  if (other != nullptr) {
    const std::string message = "world changed from " + std::to_string(other->world_size) + " to " +
                                std::to_string(spec_.world_size()) + " ranks (" +
                                std::to_string(spec_.replicas) + " replicas x " +
                                std::to_string(gpus) + "): new attempt" + NewAttemptFrom() +
                                ", not counted against backoffLimit";
    Restart("Resized", message, false);
    return true;
  }
  // Any other edit that changes what a replica runs (train.epochs, the image, the template):
  // a replica of the gang that still runs, or waits to, was built from an earlier generation
  // of the spec and would now be built differently. A replica without a stamp (an older
  // operator's) matches; one stamped with the current generation was built from this spec (by
  // an operator that builds pods differently: an upgrade restarts nothing); one that ended
  // meets no replacement.
  // A replica whose labels alone changed (its run hash is the current spec's) runs what the new
  // spec would run: relabeled in place, no restart (a label for cost or a NetworkPolicy lost
  // the gang's work since its last checkpoint). Unless another replica restarts the gang.
  const auto& want = in_.spec_hashes;
  std::vector<const ObservedReplica*> relabel;
  for (const auto& r : in_.replicas) {
    if (r.attempt != st().attempt || r.terminating || r.spec_hash.empty() || r.rank < 0 ||
        r.rank >= static_cast<int>(want.size()) ||
        (r.phase != ReplicaPhase::kPending && r.phase != ReplicaPhase::kRunning) ||
        r.spec_generation == job_.metadata.generation ||
        r.spec_hash == want[static_cast<std::size_t>(r.rank)]) {
      continue;
    }
    const auto rank = static_cast<std::size_t>(r.rank);
    if (!r.run_hash.empty() && rank < in_.run_hashes.size() && r.run_hash == in_.run_hashes[rank]) {
      relabel.push_back(&r);
      continue;
    }
    const std::string message = "the spec changed (generation " +
                                std::to_string(r.spec_generation) + " -> " +
                                std::to_string(job_.metadata.generation) + ") under attempt " +
                                std::to_string(st().attempt) + ": " + r.name +
                                " runs what the old spec built; new attempt of the new spec" +
                                NewAttemptFrom() + ", not counted against backoffLimit";
    Restart("SpecChanged", message, false);
    return true;
  }
  // Said by the executor once the pods are relabeled (a refused patch is no relabel).
  for (const auto* r : relabel) {
    plan_.actions.push_back({Action::Kind::kRelabel, r->rank, r->attempt, r->name,
                             "the spec changed (generation " + std::to_string(r->spec_generation) +
                                 " -> " + std::to_string(job_.metadata.generation) +
                                 ") in the pods' labels only"});
  }
  return false;
}

// An image reference "[registry/]path[:tag][@digest]" as far as SameImage compares it: the
// registry is dropped (a mirror serves the same image under another host), Docker Hub's short
// names are made whole ("runner" is "library/runner"), and no tag or digest means ":latest".
struct ImageRef {
  std::string path;
  std::string tag;
  std::string digest;
};

ImageRef ParseImageRef(std::string_view ref) {
  ImageRef r;
  if (const auto at = ref.find('@'); at != std::string_view::npos) {
    r.digest = ref.substr(at + 1);
    ref = ref.substr(0, at);
  }
  const auto colon = ref.rfind(':');
  const auto slash = ref.rfind('/');
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
    r.tag = ref.substr(colon + 1);
    ref = ref.substr(0, colon);
  }
  if (const auto first = ref.find('/'); first != std::string_view::npos) {
    const std::string_view host = ref.substr(0, first);
    if (host.find_first_of(".:") != std::string_view::npos || host == "localhost") {
      ref = ref.substr(first + 1);
    }
  }
  r.path =
      ref.find('/') == std::string_view::npos ? "library/" + std::string(ref) : std::string(ref);
  if (r.tag.empty() && r.digest.empty()) r.tag = "latest";
  return r;
}

// Whether two references name the same image, allowing for what an admission webhook does to a
// pod's image (a registry mirror's host or path prefix, a digest pinned beside the tag): the
// same digest when both have one, else the same repository (one path a '/'-suffix of the other)
// and the same tag. A reference by digest alone against one by tag alone cannot be told the
// same (a policy webhook that pins tags to digests, an operator now configured by digest): it
// is taken for another image, so the gang restarts rather than mixing two runner builds.
bool SameImage(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const ImageRef x = ParseImageRef(a);
  const ImageRef y = ParseImageRef(b);
  if (!x.digest.empty() && !y.digest.empty()) return x.digest == y.digest;
  if ((x.tag.empty() && y.digest.empty()) || (y.tag.empty() && x.digest.empty())) return false;
  auto suffix = [](const std::string& longer, const std::string& shorter) {
    return longer.size() > shorter.size() && longer.ends_with(shorter) &&
           longer[longer.size() - shorter.size() - 1] == '/';
  };
  if (x.path != y.path && !suffix(x.path, y.path) && !suffix(y.path, x.path)) return false;
  return x.tag.empty() || y.tag.empty() || x.tag == y.tag;
}

// Both images known and not the same (SameImage).
bool OtherImage(const std::string& a, const std::string& b) {
  return !a.empty() && !b.empty() && !SameImage(a, b);
}

const ObservedReplica* Planner::BuiltOtherwise(
    const std::vector<const ObservedReplica*>& current) const {
  if (in_.options_hash.empty()) return nullptr;
  for (const auto* r : current) {
    if (r->terminating ||
        (r->phase != ReplicaPhase::kRunning && r->phase != ReplicaPhase::kPending)) {
      continue;
    }
    // Without a stamp (an older operator's pod) only a runner image of its own tells: its
    // pod's spec, which a webhook may have rewritten (OtherImage allows for that).
    const bool other = r->options_hash.empty() ? OtherImage(r->image, in_.image)
                                               : r->options_hash != in_.options_hash;
    if (other) return r;
  }
  return nullptr;
}

void Planner::RestartForUpgrade(const ObservedReplica& other, const std::string& instead,
                                bool counts) {
  const std::string images = OtherImage(other.image, in_.image)
                                 ? " (runner image " + other.image + " -> " + in_.image + ")"
                                 : "";
  Restart("OperatorUpgraded",
          instead + ": " + other.name + " was built by another operator configuration" + images +
              "; new attempt" + NewAttemptFrom() +
              (counts ? " (the loss counts against backoffLimit)"
                      : ", not counted against backoffLimit"),
          counts);
}

bool Planner::RecoverInPlace(const std::vector<const ObservedReplica*>& current,
                             const ObservedReplica& pick, const std::string& what) {
  if (!api::MayRecoverInPlace(spec_) || !SurvivorsWaitInPlace(current)) return false;
  // A hung rank 0 is no survivor: a replacement would wait for it again.
  if (rank0_hung_) return false;
  // The survivors hold the state: without one running, only a checkpoint can.
  bool survivor = false;
  std::vector<const ObservedReplica*> lost;
  for (const auto* r : current) {
    if (r->phase == ReplicaPhase::kFailed) {
      // A rank whose own in-place recovery failed waited in vain for peers that may still run
      // (a hung one, SIGSTOPped or deadlocked, keeps its pod Running): they are no survivors to
      // recover beside, and replacing the rank that waited would keep the hung one and wait
      // again. The gang restarts from the checkpoint, as a failed recovery does.
      if (r->message.find(contract::kRecoveryFailedMarker) != std::string::npos) return false;
      lost.push_back(r);
    } else if (r->phase == ReplicaPhase::kRunning && !r->terminating) {
      survivor = true;
    }
  }
  if (!survivor) return false;
  auto& replaced = st().replaced_pods;
  bool news = false;
  for (const auto* r : lost) {
    news = news || std::find(replaced.begin(), replaced.end(), r->name) == replaced.end();
  }
  // A disruption, a stop the rank answered (SIGTERM: 143), or a pod deleted by someone (gone, or
  // killed at the end of the deletion's grace period) costs the gang nothing: not counted. Any
  // other loss counts against backoffLimit, a pod the node refused included: its replacement
  // may be refused again, and no placement wait bounds that here (once the budget is spent the
  // gang restarts, uncounted while a scheduling timeout bounds it).
  const bool free = pick.disruption || pick.exit_code == 128 + 15 || DeletedByOthers(pick);
  if (news && !free && st().restarts >= spec_.run_policy.backoff_limit) return false;
  if (news && replaced.size() + lost.size() > api::kMaxReplacedPods) return false;
  // A replacement built now would run another runner build than a survivor (an operator
  // upgrade since the gang started): the gang starts again as a whole instead.
  if (const ObservedReplica* other = BuiltOtherwise(current)) {
    RestartForUpgrade(*other,
                      what + "; rank " + std::to_string(pick.rank) + " is not replaced in place",
                      news && !free);
    return true;
  }
  for (const auto* r : lost) {
    // Deleted even while it terminates: the executor then forgets it (a vanished pod).
    plan_.actions.push_back(
        {Action::Kind::kDeleteReplica, r->rank, r->attempt, r->name, "replaced in place"});
    if (std::find(replaced.begin(), replaced.end(), r->name) == replaced.end()) {
      replaced.push_back(r->name);
    }
  }
  // The replacement takes the lost pod's name, so it is created only once that pod is gone:
  // until then PodsReady (kubectl get tj's PODS) says so, not the AllPodsRunning of before the
  // loss. The placement wait of the replacement starts when it is created (HandleWait).
  std::string names;
  for (const auto* r : lost) names += (names.empty() ? "" : ", ") + r->name;
  int running = 0;
  for (const auto* r : current) {
    running += r->phase == ReplicaPhase::kRunning && !r->terminating ? 1 : 0;
  }
  RecordCondition(kPodsReadyCondition, false, kOldPodsTerminatingReason,
                  "the replacement of " + names + " is created once the lost pod is gone (" +
                      std::to_string(running) + " of " + std::to_string(spec_.replicas) +
                      " replicas running)");
  if (news) {
    if (!free) ++st().restarts;
    ++st().in_place_recoveries;
    const std::string message = what + ": replacing rank " + std::to_string(pick.rank) +
                                " alone; the surviving ranks keep their state and hand it over" +
                                (free ? " (not counted against backoffLimit)" : "");
    // One event per loss: the phase change is it, or (already Restarting) one of its own.
    if (st().phase == "Restarting") plan_.events.push_back({"Warning", "InPlaceRecovery", message});
    SetPhase("Restarting", "InPlaceRecovery", message, true);
    SetCondition("Restarting", true, "InPlaceRecovery", message);
  }
  return true;
}

bool Planner::HandleFailure(const std::vector<const ObservedReplica*>& current) {
  // The root cause first: a replica's own failure over another's consequence ("caused by rank
  // N", "lost peer"); then a permanent failure, which dooms the job whatever else failed; then
  // a new loss over a lost pod already replaced in place (its end was answered then: a new crash
  // beside it must not pass for that loss's failed recovery); then the lowest rank.
  const auto& answered = st().replaced_pods;
  auto was_replaced = [&answered](const ObservedReplica& r) {
    return std::find(answered.begin(), answered.end(), r.name) != answered.end();
  };
  auto better = [this, &was_replaced](const ObservedReplica& a, const ObservedReplica& b) {
    if (IsConsequence(a) != IsConsequence(b)) return !IsConsequence(a);
    if (Retryable(a) != Retryable(b)) return !Retryable(a);
    if (was_replaced(a) != was_replaced(b)) return !was_replaced(a);
    return a.rank < b.rank;
  };
  const ObservedReplica* pick = nullptr;
  std::optional<WallTime> first_end;
  bool active = false;
  for (const auto* r : current) {
    if (r->phase != ReplicaPhase::kFailed) {
      active = active || (!r->terminating && (r->phase == ReplicaPhase::kPending ||
                                              r->phase == ReplicaPhase::kRunning));
      continue;
    }
    if (Released(*r)) continue;
    if (r->finished_at && (!first_end || *r->finished_at < *first_end)) first_end = r->finished_at;
    if (pick == nullptr || better(*r, *pick)) pick = r;
  }
  if (pick == nullptr) return false;
  int rank = pick->rank;
  std::string message = pick->message;
  std::string what;
  if (message.starts_with(contract::kCausedByPrefix)) {
    // "caused by rank N: <N's cause>": name rank N and its cause, as N would have.
    const std::string rest = message.substr(contract::kCausedByPrefix.size());
    const auto colon = rest.find(':');
    const std::string digits = rest.substr(0, colon);
    if (colon != std::string::npos && !digits.empty() && digits.size() <= 6 &&
        digits.find_first_not_of("0123456789") == std::string::npos) {
      rank = std::stoi(digits);
      message = rest.substr(colon + 1);
      while (!message.empty() && message.front() == ' ') message.erase(0, 1);
      what = "rank " + std::to_string(rank) + " failed (reported by " + pick->name + ")";
    }
  }
  // Only the built-in runner's words: a spec.command program's message is its own.
  std::optional<int> waited;
  std::optional<int> silent;
  if (what.empty() && spec_.command.empty()) {
    waited = RecoveryWaitedFor(message);
    // A peer that stopped answering: named only while its own replica shows no failure of its
    // own (it still runs, or ended only of the operator's deletion), with one rank per replica
    // (the runner names world ranks), and only from the reporter's own termination message: a
    // SIGKILLed (137) rank wrote none, and its log tail (several lines) may tell of an earlier
    // outage long recovered from.
    const std::string_view line =
        std::string_view(message).substr(0, message.find_last_not_of("\n ") + 1);
    const bool own_words = pick->exit_code != 128 + 9 && line.find('\n') == std::string::npos;
    if (!waited && own_words && spec_.gpus_per_replica <= 1) silent = StoppedAnswering(line);
  }
  const ObservedReplica* silent_peer = nullptr;
  for (const auto* r : current) {
    if (!silent || r->rank != *silent || r->rank == rank) continue;
    const bool deleted_by_us = r->phase == ReplicaPhase::kFailed && r->terminating &&
                               EndedOfADeletion(*r) && !DeletedByOthers(*r);
    if (r->phase == ReplicaPhase::kRunning || deleted_by_us) silent_peer = r;
  }
  // Rank 0 named by the peer that timed out waiting for it, whose /status (which had answered)
  // was silent for kSilentRankZeroRate before that peer ended (one missed read is a blip) and
  // does not answer now: hung (SIGSTOPped, frozen), not a rank that will still end with a cause
  // of its own, nor one with a save to finish in its grace.
  const auto silent_since = RankZeroSilentSince(in_.memory, st().attempt);
  rank0_hung_ = silent_peer != nullptr && silent_peer->rank == 0 &&
                silent_peer->phase == ReplicaPhase::kRunning && first_end && silent_since &&
                *first_end - *silent_since >= kSilentRankZeroRate &&
                !(in_.progress && in_.progress->reachable);
  // Only a consequence is known yet and the replica with the cause still runs: deleting the
  // gang now would lose why. It ends on its own (collective timeout); wait for it, bounded.
  if (IsConsequence(*pick) && active && first_end && !rank0_hung_) {
    const WallTime until = *first_end + kRootCauseGrace;
    if (in_.now < until) {
      Requeue(until);
      return true;
    }
  }
  if (waited && *waited != rank && *waited < spec_.replicas) {
    // The rank that waited for a peer's return in vain reports the peer's loss: the peer is
    // named, as a "caused by" report names its rank (its pod may well still run: a hung one).
    std::string peer;
    for (const auto* r : current) {
      if (r->rank == *waited) peer = " (" + r->name + ")";
    }
    rank = *waited;
    // The exit code and reason are the reporter's (the peer may never have exited).
    what = "rank " + std::to_string(rank) + peer + " never rejoined the gang (reported by " +
           pick->name + ", which waited for it and exited";
    if (pick->exit_code != 0) what += " with code " + std::to_string(pick->exit_code);
    if (!pick->reason.empty()) what += ", reason " + pick->reason;
    what += ")";
  } else if (silent_peer != nullptr) {
    // A hung peer (SIGSTOPped, a livelock) fails no collective of its own: the rank that timed
    // out waiting for it reports it, and is no cause of its own.
    rank = silent_peer->rank;
    what = "rank " + std::to_string(rank) + " (" + silent_peer->name +
           ") stopped answering (reported by " + pick->name + ", which waited for it and exited";
    if (pick->exit_code != 0) what += " with code " + std::to_string(pick->exit_code);
    if (!pick->reason.empty()) what += ", reason " + pick->reason;
    what += ")";
  } else {
    if (what.empty()) what = "rank " + std::to_string(rank) + " (" + pick->name + ") failed";
    if (pick->exit_code != 0) what += " with exit code " + std::to_string(pick->exit_code);
    if (pick->exit_code == 128 + 9) what += " (SIGKILL)";
    if (!pick->reason.empty()) what += ", reason " + pick->reason;
  }
  st().last_failure = api::Failure{rank, pick->exit_code, pick->reason, message};
  if (!message.empty()) what += ": " + Headline(message);
  for (const auto* r : current) {
    if (r->phase == ReplicaPhase::kFailed) AvoidNodeOf(*r);
  }
  // The peer that stopped answering may be gone with its node (the taint manager deletes its
  // pod, DisruptionTarget, after the survivor timed out waiting): its node is avoided as a
  // failed one's is (a node fault only: AvoidNodeOf), and the restart is a disruption's.
  if (silent_peer != nullptr) AvoidNodeOf(*silent_peer);
  const bool disrupted = pick->disruption || (silent_peer != nullptr && silent_peer->disruption);
  if (!Retryable(*pick)) {
    // A program of the user's may exit 1 for what a restart heals (torchrun, for a lost worker).
    if (!spec_.command.empty() && pick->exit_code >= 1 && pick->exit_code <= 127) {
      what +=
          " (exit codes 1-127 fail the job under runPolicy.restartPolicy ExitCode; "
          "OnFailure restarts the gang for them, within backoffLimit)";
    }
    Finish(false, "PermanentFailure", what);
    Cleanup();
    return true;
  }
  if (RecoverInPlace(current, *pick, what)) return true;
  if (disrupted) {
    Restart("Disrupted", what + " (disruption: not counted against backoffLimit)", false);
    return true;
  }
  // Pods deleted by someone else (kubectl delete pod, a drain without DisruptionTarget), as
  // RecoverInPlace does not count them: no failure of the job's, as long as every replica that
  // failed with a cause of its own was such a deletion.
  if (!IsConsequence(*pick) && DeletedByOthers(*pick) &&
      std::all_of(current.begin(), current.end(), [this](const ObservedReplica* r) {
        return r->phase != ReplicaPhase::kFailed || IsConsequence(*r) || r->disruption ||
               DeletedByOthers(*r);
      })) {
    // What ended it was the deletion, whatever its container's end reads (a kubelet reports the
    // SIGTERM's 143 as Error before it removes the pod).
    if (st().last_failure) st().last_failure->reason = "Deleted";
    Restart("PodDeleted",
            what + " (its pod was deleted, not by the operator: not counted against backoffLimit)",
            false);
    return true;
  }
  // Placement's doing is not counted while runPolicy.schedulingTimeoutSeconds bounds it (the
  // placement wait goes on across such restarts); unbounded, it counts like any failure, so a
  // node that keeps refusing pods cannot restart the gang forever.
  const bool bounded = spec_.run_policy.scheduling_timeout_seconds > 0 &&
                       !job_.metadata.labels.contains(api::kKueueQueueLabel);
  // The node refused the pod before anything of the job ran: the placement's doing, as NotPlaced.
  if (pick->never_ran && bounded) {
    Restart("NodeRejected", what + " (it never started: not counted against backoffLimit)", false);
    return true;
  }
  // A gang that was never whole did not run: a rank of a spec.command image (which knows no
  // gang gate) that timed its own rendezvous out against a peer still waiting to be placed is
  // the placement's doing.
  for (const auto* r : current) {
    if (!bounded) break;
    if (r->phase != ReplicaPhase::kPending || r->terminating || r->wait_reason.empty()) continue;
    Restart("NotPlaced",
            what + " while " + r->name + " was not placed yet (" + r->wait_reason + ": " +
                r->wait_message + "): not counted against backoffLimit",
            false);
    return true;
  }
  // Nor was a rank the API refused to create (a quota, a webhook: ReplicaFailure): the
  // survivors of an in-place recovery that waited for their replacement in vain.
  const Condition* refused = FindCondition(kReplicaFailureCondition);
  for (int rank = 0;
       bounded && refused != nullptr && refused->status == "True" && rank < spec_.replicas;
       ++rank) {
    if (std::any_of(current.begin(), current.end(),
                    [rank](const ObservedReplica* r) { return r->rank == rank; })) {
      continue;
    }
    Restart("NotPlaced",
            what + " while " + ReplicaName(job_.metadata.name, st().attempt, rank) +
                " could not be created (" + refused->reason + ": " + refused->message +
                "): not counted against backoffLimit",
            false);
    return true;
  }
  // The in-place recovery of a loss already counted (when its rank was replaced) failed, and no
  // placement bound took it for its own above: the failure picked is that replaced rank's own,
  // or a survivor's consequence of it while the replacement has not run yet (the survivors
  // waited for it in vain: an old pod that would not go, a replacement refused with no
  // scheduling timeout). The same loss is not counted twice.
  const auto& replaced = st().replaced_pods;
  if (std::find(replaced.begin(), replaced.end(), pick->name) != replaced.end() ||
      (IsConsequence(*pick) && !replaced.empty())) {
    Restart("RecoveryFailed",
            what + " (the in-place recovery of a loss already answered when its rank was " +
                "replaced, and counted then unless it cost nothing, failed: not counted again)",
            false);
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

namespace {

// How much a wait reason says, to pick the one to show from a gang of waiting replicas: a
// reason no wait heals, then image and container-config problems, then storage, then the
// scheduler, then a queue's gate; 0 for a replica that is merely starting.
int WaitSeverity(const std::string& reason) {
  if (IsPermanentWait(reason)) return 6;
  if (reason == "ErrImagePull" || reason == "ImagePullBackOff" || reason == "ErrImageNeverPull") {
    return 5;
  }
  if (reason == "CreateContainerConfigError" || reason == "CreateContainerError" ||
      reason == "RunContainerError") {
    return 4;
  }
  if (reason == "PersistentVolumeClaimPending") return 3;
  if (reason == "Unschedulable") return 2;
  if (reason == "SchedulingGated") return 1;
  return 0;
}

// A replica's wait as WaitSeverity weighs it, but for the kubelet's own passing trouble: its
// cache of a Secret or ConfigMap the pod mounts not yet synced ("failed to sync secret cache:
// timed out waiting for the condition", a second after the pod was created, on the cluster) is
// retried by the kubelet and is no problem of the job's: the replica is starting.
int WaitSeverity(const ObservedReplica& r) {
  if (r.wait_reason == "CreateContainerConfigError" &&
      (r.wait_message.starts_with("failed to sync secret cache") ||
       r.wait_message.starts_with("failed to sync configmap cache"))) {
    return 0;
  }
  return WaitSeverity(r.wait_reason);
}

}  // namespace

void Planner::AvoidNodeOf(const ObservedReplica& r) {
  const bool fault = IsNodeFault(r);
  // A pod stopped before it started by a deletion or a preemption was not refused by its node.
  const bool refused = r.never_ran && !r.terminating && !r.disruption;
  if (r.node.empty() || (!fault && !refused)) return;
  auto& list = st().avoided_nodes;
  auto known = std::find_if(list.begin(), list.end(),
                            [&r](const api::AvoidedNode& a) { return a.node == r.node; });
  // Any other refusal of the kubelet (OutOfcpu, NodeAffinity, ...) is usually a race between
  // the scheduler's view of the node and the kubelet's: the next attempts only prefer other
  // nodes (a required avoidance would hold a one-node cluster for kAvoidanceRelaxAfter), and
  // never weaken a required avoidance of the node.
  if (!fault && known != list.end() && known->required) return;
  if (known != list.end()) list.erase(known);
  const std::string fallback = fault ? "NodeFault" : "NodeRejected";
  list.push_back({r.node, r.reason.empty() ? fallback : r.reason, st().attempt, fault});
  while (list.size() > api::kMaxAvoidedNodes) list.erase(list.begin());
  std::string message = "replica " + r.name +
                        (fault ? " failed on node " : " was refused by node ") + r.node + " (" +
                        list.back().reason + "): ";
  message += fault ? "the next " + std::to_string(kRequiredAvoidanceAttempts) +
                         " attempts must not use it, later ones prefer not to"
                   : "the next attempts prefer not to use it";
  plan_.events.push_back({"Warning", "AvoidingNode", message});
}

bool Planner::RelaxAvoidance(const std::string& wait_reason, const std::string& wait_message) {
  bool required = false;
  for (const auto& a : st().avoided_nodes) {
    required = required || IsAvoidanceRequired(a, st().attempt);
  }
  // Only when the avoidance itself is what blocks: the scheduler names node affinity and no
  // shortage ("Insufficient cpu" would not go away by relaxing anything).
  if (!required || wait_reason != "Unschedulable" ||
      wait_message.find("didn't match Pod's node affinity") == std::string::npos ||
      wait_message.find("Insufficient") != std::string::npos) {
    return false;
  }
  const Condition* waiting = FindCondition(kPodsReadyCondition);
  const auto since = waiting != nullptr ? StoredSecondEnd(waiting->last_transition_time)
                                        : std::optional<WallTime>();
  if (!since) return false;
  if (in_.now < *since + kAvoidanceRelaxAfter) {
    Requeue(*since + kAvoidanceRelaxAfter);
    return false;
  }
  for (auto& a : st().avoided_nodes) a.required = false;
  Restart("NodeAvoidanceRelaxed",
          "no node but the avoided ones can take the gang (" + wait_message +
              "): the avoided nodes are only preferred against from now on",
          false);
  return true;
}

bool Planner::HandleWait(const std::vector<const ObservedReplica*>& current, int pods) {
  // The gang of a new attempt exists (or is created now): its placement wait starts here.
  if (const Condition* old = FindCondition(kPodsReadyCondition);
      old != nullptr && old->reason == kOldPodsTerminatingReason) {
    std::erase_if(st().conditions,
                  [](const Condition& c) { return c.type == kPodsReadyCondition; });
  }
  const ObservedReplica* pick = nullptr;
  for (const auto* r : current) {
    if (r->phase != ReplicaPhase::kPending || r->terminating) continue;
    if (pick == nullptr || WaitSeverity(*r) > WaitSeverity(*pick)) pick = r;
  }
  const int not_running = pods - st().replicas.running - st().replicas.succeeded;
  const std::string count =
      std::to_string(not_running) + " of " + std::to_string(pods) + " replicas not running";
  std::string reason = kPodsStartingReason;
  std::string message = count + " yet";
  if (pick != nullptr && !pick->wait_message.empty()) {
    message += " (" + pick->name + ": " + pick->wait_message + ")";
  }
  if (pick != nullptr && WaitSeverity(*pick) > 0) {
    reason = pick->wait_reason;
    message = pick->name + ": " + pick->wait_message + " (" + count + ")";
  }
  // The API refused a replica (quota, PodSecurity, a PodGroup the cluster cannot serve, an
  // invalid pod): that is why it waits, and what a timeout must name.
  int wait_rank = pick != nullptr ? pick->rank : -1;
  std::string wait_message = pick != nullptr ? pick->wait_message : "";
  // A pod refused as invalid by an earlier generation of the spec: the edit since may have
  // fixed it, and the creates go on (refused again, it is said again, of this generation).
  if (const Condition* refused = FindCondition(kReplicaFailureCondition);
      refused != nullptr && refused->status == "True" && IsPermanentWait(refused->reason) &&
      job_.status.observed_generation != job_.metadata.generation) {
    SetCondition(kReplicaFailureCondition, false, "SpecChanged",
                 "the spec changed since the API refused a pod: created again");
  }
  if (const Condition* refused = FindCondition(kReplicaFailureCondition);
      refused != nullptr && refused->status == "True" &&
      (WaitSeverity(reason) < 4 || WaitSeverity(refused->reason) > WaitSeverity(reason))) {
    reason = refused->reason;
    message = refused->message + " (" + count + ")";
    wait_message = refused->message;
    wait_rank = -1;  // the refused rank, when the API's words name its pod
    for (int rank = 0; rank < spec_.replicas; ++rank) {
      const std::string name = ReplicaName(job_.metadata.name, st().attempt, rank);
      if (refused->message.find('"' + name + '"') != std::string::npos ||
          refused->message.starts_with("pod " + name + ":")) {
        wait_rank = rank;
        break;
      }
    }
  }
  const Condition* before = FindCondition(kPodsReadyCondition);
  const int severity_before =
      before != nullptr && before->status == "False" ? WaitSeverity(before->reason) : 0;
  RecordCondition(kPodsReadyCondition, false, reason, message);
  // A queue's gate (Kueue) is a wait in line, not a problem: a Normal event and the Queued
  // condition, and no scheduling timeout while it lasts.
  const bool queued =
      reason == "SchedulingGated" && job_.metadata.labels.contains(api::kKueueQueueLabel);
  // A permanent wait is said once, as the job's end below.
  if (WaitSeverity(reason) > 0 && WaitSeverity(reason) != severity_before &&
      !IsPermanentWait(reason)) {
    plan_.events.push_back({queued ? "Normal" : "Warning", queued ? "Queued" : reason,
                            "waiting for the gang: " + message});
  }
  if (queued) {
    RecordCondition(kQueuedCondition, true, reason, message);
    return false;
  }
  SetCondition(kQueuedCondition, false, "Admitted", "the queue admitted the gang");
  if (pick != nullptr && RelaxAvoidance(pick->wait_reason, pick->wait_message)) return true;

  if (IsPermanentWait(reason)) {
    st().last_failure = api::Failure{wait_rank, 0, reason, wait_message};
    Finish(false, reason, message + ": a restart cannot fix this; correct the spec");
    for (const auto& r : in_.replicas) Delete(r, reason);
    return true;
  }
  const std::int64_t timeout_s = spec_.run_policy.scheduling_timeout_seconds;
  const Condition* waiting = FindCondition(kPodsReadyCondition);
  if (timeout_s <= 0 || waiting == nullptr) return false;
  auto since = StoredSecondEnd(waiting->last_transition_time);
  if (!since) return false;
  // Time in a queue does not count: the wait starts again when the queue admits the gang.
  if (const Condition* q = FindCondition(kQueuedCondition); q != nullptr && q->status == "False") {
    if (auto admitted = StoredSecondEnd(q->last_transition_time); admitted && *admitted > *since) {
      since = admitted;
    }
  }
  const WallTime deadline = AfterSeconds(*since, timeout_s);
  if (in_.now < deadline) {
    Requeue(deadline);
    return false;
  }
  // Placed replicas must not hold their nodes for a gang that cannot be whole: every replica
  // of the attempt goes, whatever cleanPodPolicy says.
  int released = 0;
  for (const auto& r : in_.replicas) {
    if (r.terminating || !Active(r)) continue;
    released += r.phase != ReplicaPhase::kPending ? 1 : 0;
    Delete(r, "scheduling timeout");
  }
  Finish(false, kSchedulingTimeoutReason,
         "the gang was not placed within runPolicy.schedulingTimeoutSeconds (" +
             std::to_string(timeout_s) + "s): " + reason + ": " + message + "; released " +
             std::to_string(released) + " placed replica" + (released == 1 ? "" : "s"));
  return true;
}

void Planner::OpenGates(const std::vector<const ObservedReplica*>& current) {
  for (const auto* r : current) {
    if (r->gated && r->phase == ReplicaPhase::kRunning && !r->terminating) {
      plan_.actions.push_back(
          {Action::Kind::kOpenGate, r->rank, r->attempt, r->name, "the whole gang is placed"});
    }
  }
}

std::string Planner::SinceLastStep() {
  if (!st().progress) return "";
  std::string since = " since step " + std::to_string(st().progress->step);
  if (!st().progress->updated_at.empty()) since += " (" + st().progress->updated_at + ")";
  return since;
}

// Rank 0 said "stalled" on this pass's read (trains, but completed no step for longer than its
// stall threshold): the condition Stalled=True (reason RankStalled) and one Warning event say so
// before any deadline, with what happens next; a read that says otherwise ends it (SetCondition
// False), and a pass that read nothing leaves it as it is.
void Planner::NoteRankStalled(std::optional<WallTime> deadline) {
  const Condition* before = FindCondition("Stalled");
  const bool already = before != nullptr && before->status == "True";
  std::string msg = "rank 0 reports no completed step" + SinceLastStep();
  msg += ": a peer hung in a collective, or a starved input; ";
  // What ends it first: a collective that waits on a hung peer fails once the ranks' collective
  // timeout has passed since the last step (the ring then recovers in place or fails), unless a
  // shorter progress deadline restarts the gang before.
  const Duration collective = in_.collective_timeout > Duration::zero()
                                  ? in_.collective_timeout
                                  : api::CollectiveTimeoutFor(spec_);
  std::optional<WallTime> last_step;
  if (st().progress) last_step = StoredSecondEnd(st().progress->updated_at);
  const bool collective_first = !deadline || last_step.value_or(in_.now) + collective < *deadline;
  if (collective_first) {
    msg += "a collective that waits on a hung peer fails within the collective timeout (" +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(collective).count()) +
           "s)";
  }
  msg += deadline ? std::string(collective_first ? ", else " : "") +
                        "the gang restarts at the progress deadline (" + FormatRfc3339(*deadline) +
                        ") unless it trains again"
                  : "; no spec.runPolicy.progressDeadlineSeconds is set to end any other stall";
  SetCondition("Stalled", true, "RankStalled", msg);
  if (!already) plan_.events.push_back({"Warning", "RankStalled", msg});
}

// Rank 0 says "recovering": it lost a peer and waits, keeping its state, for the gang to train
// again in place. Stalled=False (reason Recovering) says so with the loss in rank 0's words and
// how long it waits. A loss the operator answered itself (a lost pod replaced in place: the
// Restarting condition turned False, the gang whole again, after the outage began) had its
// event then; any other (a peer hung in a collective, the network cut between running pods:
// every pod still runs) gets one Warning event RankRecovering per outage, or nothing on the job
// would say why it does not train until the recovery ends or fails. An outage is given
// kUnseenLossGrace of age and kLossReportGrace of the operator's reads first: a pod's end
// reaches the operator a moment after its peers notice it, and they may notice it long after
// their last step (a slow step, a checkpoint, an evaluation).
Duration Planner::RankZeroRecoveryTimeout() const {
  for (const auto& r : in_.replicas) {
    if (r.rank == 0 && r.attempt == plan_.status.attempt && r.phase == ReplicaPhase::kRunning &&
        !r.terminating && r.recovery_timeout) {
      return *r.recovery_timeout;
    }
  }
  return api::RecoveryTimeoutFor(spec_);
}

bool Planner::SurvivorsWaitInPlace(const std::vector<const ObservedReplica*>& current) const {
  bool said = false;
  for (const auto* r : current) {
    if (r->phase != ReplicaPhase::kRunning || r->terminating || !r->recovery_timeout) continue;
    if (*r->recovery_timeout <= Duration::zero()) return false;
    said = true;
  }
  return said || api::RecoversInPlace(spec_);
}

void Planner::NoteRankRecovering() {
  const ObservedProgress& p = *in_.progress;
  std::string msg = "rank 0 recovers a lost peer in place";
  if (!p.recovery_cause.empty()) {
    // Bounded, so that the wait after it survives an Event's 1024 bytes.
    constexpr std::size_t kMaxCause = 512;
    const std::size_t cut = Utf8Cut(p.recovery_cause, kMaxCause);
    msg += " (" + p.recovery_cause.substr(0, cut) + (cut < p.recovery_cause.size() ? "...)" : ")");
  }
  msg += ": no completed step" + SinceLastStep();
  if (const Duration wait = RankZeroRecoveryTimeout(); wait > Duration::zero()) {
    msg += "; it waits up to " +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(wait).count()) +
           "s for the gang to form again, else " +
           (st().restarts >= spec_.run_policy.backoff_limit
                ? "the job fails (backoffLimit " + std::to_string(spec_.run_policy.backoff_limit) +
                      " spent)"
                : std::string("the gang restarts"));
  }
  // Written even when rank 0 never stalled (a collective timeout shorter than its stall
  // threshold): the condition is where a person looks.
  RecordCondition("Stalled", false, "Recovering", msg);
  const std::pair<int, int> outage{st().attempt, p.recoveries};
  if (in_.memory.recovery_said == outage) return;
  // Read recovering from this outage for the first time on this pass: not yet.
  const auto& seen = in_.memory.recovery_seen;
  if (!seen || seen->first != outage || in_.now - seen->second < kLossReportGrace) return;
  // When the outage began: rank 0's own account, else (an older runner) the last step seen.
  std::optional<WallTime> began;
  if (p.recovering_seconds >= 0) {
    const auto age =
        std::chrono::duration_cast<Duration>(std::chrono::duration<double>(p.recovering_seconds));
    if (age < kUnseenLossGrace) return;
    began = in_.now - age;
  } else if (!p.recovery_cause.empty()) {
    return;  // a runner that says its cause has just counted the outage as over: no age to judge
  } else if (st().progress) {
    began = ParseRfc3339(st().progress->updated_at);
  }
  bool answered = false;
  if (const Condition* restarting = FindCondition("Restarting"); restarting != nullptr && began) {
    const auto whole = StoredSecondEnd(restarting->last_transition_time);
    answered = whole && *whole >= *began;
  }
  if (!answered) plan_.events.push_back({"Warning", kRankRecoveringReason, msg});
}

// Rank 0's read says what the Stalled condition says, before any deadline: "stalled" is
// RankStalled (NoteRankStalled); a rank 0 that does not train (starting, recovering a lost peer
// in place) is neither a stall (the progress deadline waits for it) nor progress, and the
// condition says which (False, reason Starting or Recovering); one that trains again says so
// (Resumed) until its step moves. Only a read of it training, with a new step after any of
// those, is "making progress". A pass that read nothing leaves the condition as it is.
void Planner::NoteProgressRead(std::optional<WallTime> deadline) {
  const ObservedProgress& p = *in_.progress;
  if (p.state == "stalled") {
    NoteRankStalled(deadline);
    return;
  }
  if (p.idle) {
    if (p.state == "recovering") {
      NoteRankRecovering();
      return;
    }
    SetCondition("Stalled", false, "Starting",
                 "rank 0 is starting (a new process): no completed step" + SinceLastStep());
    return;
  }
  const Condition* c = FindCondition("Stalled");
  const bool moved = !job_.status.progress || job_.status.progress->step != p.step;
  if (!moved && c != nullptr &&
      (c->reason == "Recovering" || c->reason == "Starting" || c->reason == "Resumed")) {
    SetCondition("Stalled", false, "Resumed",
                 "rank 0 trains again; no step past step " + std::to_string(p.step) + " seen yet");
    return;
  }
  SetCondition("Stalled", false, "Progressing", "training is making progress");
}

bool Planner::HandleStall() {
  const auto deadline_s = spec_.run_policy.progress_deadline_seconds;
  if (st().phase != "Running") return false;
  // Whether rank 0 was read on this pass.
  const bool read = in_.progress && in_.progress->reachable;
  if (deadline_s <= 0) {
    if (read) NoteProgressRead(std::nullopt);
    return false;
  }
  std::optional<WallTime> since;
  if (st().progress && !st().progress->updated_at.empty()) {
    since = StoredSecondEnd(st().progress->updated_at);
  }
  if (const Condition* running = FindCondition("Running");
      running != nullptr && running->status == "True") {
    auto t = StoredSecondEnd(running->last_transition_time);
    if (t && (!since || *t > *since)) since = t;
  }
  if (const auto& idle = in_.memory.last_idle; idle && (!since || *idle > *since)) since = idle;
  if (!since) return false;
  const WallTime deadline = AfterSeconds(*since, deadline_s);
  if (in_.now < deadline) {
    if (read) NoteProgressRead(deadline);
    Requeue(deadline);
    return false;
  }
  // Past the deadline only a read that succeeded may say "no progress": a failed read is
  // reported, and a read not made this time decides nothing.
  if (!in_.progress) return false;
  // Nor does a rank 0 that does not train: one starting (a replacement, a new attempt) or a
  // gang recovering a lost rank. Its rendezvous and recovery timeouts bound that; the deadline
  // counts again from its first step (a new step resets the progress time).
  if (in_.progress->reachable && in_.progress->idle) return false;
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
    // As batch/v1's: unset while a job created suspended waits (Resume sets it).
    if (!spec_.run_policy.suspend) st().start_time = now_s_;
  }
  st().observed_generation = job_.metadata.generation;
  ForceDeleteStuck();

  if (api::IsTerminal(st().phase)) {
    CountFinalReplicas();
    Cleanup();
    if (const Condition* ready = FindCondition(kPodsReadyCondition);
        ready != nullptr && ready->reason == "JobFinished") {
      SayReplicasEnded(st().phase == "Succeeded");
    }
    if (spec_.run_policy.ttl_seconds_after_finished) {
      const Duration left =
          TtlLeft(st().completion_time, *spec_.run_policy.ttl_seconds_after_finished, in_.now);
      if (left <= Duration::zero()) {
        plan_.actions.push_back(
            {Action::Kind::kDeleteJob, 0, 0, job_.metadata.name, "ttlSecondsAfterFinished"});
      } else {
        Requeue(in_.now + left);
      }
    }
    return std::move(plan_);
  }

  if (spec_.run_policy.suspend) {
    for (const auto& r : in_.replicas) Delete(r, "suspended");
    // Deleted once none is observed: a pod in its termination grace (a rank that ignores or
    // cannot answer SIGTERM) is still there for up to its grace period.
    const std::string replicas = in_.replicas.empty()
                                     ? "its replicas are deleted"
                                     : "its replicas are being deleted (" +
                                           std::to_string(in_.replicas.size()) + " still there)";
    SetPhase("Suspended", "Suspended", "job suspended: " + replicas);
    SetCondition("Suspended", true, "Suspended", "spec.runPolicy.suspend is true");
    EndCondition("Running", "Suspended", "job suspended");
    EndCondition("Restarting", "Suspended", "job suspended");
    // No replica runs (kubectl get tj shows this reason as PODS), and nothing trains: said of a
    // job created suspended too, whose PODS column was empty.
    RecordCondition(kPodsReadyCondition, false, "Suspended", "the job is suspended: " + replicas);
    if (st().progress) st().progress->samples_per_second = 0;
    st().replicas = {};
    return std::move(plan_);
  }
  if (st().phase == "Suspended") Resume();

  if (spec_.run_policy.active_deadline_seconds) {
    // status.startTime is stored to the second: counted from its end (StoredSecondEnd).
    const WallTime start = StoredSecondEnd(st().start_time).value_or(in_.now);
    const WallTime deadline = AfterSeconds(start, *spec_.run_policy.active_deadline_seconds);
    if (in_.now >= deadline) {
      std::string message = "job ran longer than activeDeadlineSeconds (" +
                            std::to_string(*spec_.run_policy.active_deadline_seconds) + "s)";
      if (const Condition* ready = FindCondition(kPodsReadyCondition);
          ready != nullptr && ready->status == "False") {
        message += " while waiting for its replicas: " + ready->reason + ": " + ready->message;
      }
      // Deleted first, whatever cleanPodPolicy says (as batch/v1's deadline): Finish then
      // says no replica is left running.
      for (const auto& r : in_.replicas) {
        if (Active(r)) Delete(r, "deadline exceeded");
      }
      Finish(false, "DeadlineExceeded", message);
      return std::move(plan_);
    }
    Requeue(deadline);
  }

  // One replica (pod or process) per node of the gang, not per rank.
  const int pods = spec_.replicas;
  // A replica of the attempt that failed permanently beyond the gang's new size (an edit shrank
  // it, with the survivors waiting in place): the failure is read over the whole attempt, or
  // its pod would go as a replica outside the gang and an uncounted Resized restart would stand
  // in for it once it is gone.
  if (std::any_of(in_.replicas.begin(), in_.replicas.end(), [&](const ObservedReplica& r) {
        return r.rank >= pods && FailedPermanently(r);
      })) {
    std::vector<const ObservedReplica*> attempt;
    for (const auto& r : in_.replicas) {
      if (r.attempt == st().attempt && r.rank >= 0) attempt.push_back(&r);
    }
    CountReplicas(attempt);
    if (HandleFailure(attempt)) return std::move(plan_);
  }
  // Replicas of earlier attempts must be gone before the new gang starts: a restarted gang
  // never meets a stale one.
  if (HandleResize()) return std::move(plan_);
  std::vector<const ObservedReplica*> current;
  bool stale = false;
  for (const auto& r : in_.replicas) {
    if (r.attempt == st().attempt && r.rank >= 0 && r.rank < pods) {
      current.push_back(&r);
      continue;
    }
    Delete(r, "replica of attempt " + std::to_string(r.attempt));
    // One whose processes have ended can meet no one, even while a finalizer (Kueue's) keeps
    // the pod object until the new gang exists.
    const bool ended = r.phase == ReplicaPhase::kSucceeded || r.phase == ReplicaPhase::kFailed;
    stale = stale || !(r.terminating && ended);
  }
  CountReplicas(current);
  // A replacement that runs (or waits to) under a replaced name: the loss it replaced is over,
  // and a loss of its own will be a new one.
  std::erase_if(st().replaced_pods, [&](const std::string& name) {
    return std::any_of(current.begin(), current.end(), [&](const ObservedReplica* r) {
      return r->name == name && r->phase != ReplicaPhase::kFailed;
    });
  });
  if (stale) return std::move(plan_);

  if (HandleFailure(current)) return std::move(plan_);

  if (st().replicas.succeeded == pods) {
    // Rank 0 leaves its final /status as its termination message: the last poll may be
    // seconds old, the final step and epoch are only known from it.
    for (const auto* r : current) {
      if (r->rank != 0) continue;
      if (auto final_status = ParseRunnerStatus(r->message)) {
        SetProgress(*final_status);
      } else if (in_.progress && in_.progress->reachable) {
        SetProgress(*in_.progress);
      }
    }
    Finish(true, "Succeeded",
           "all " + std::to_string(pods) + " replicas succeeded" + FinalFigures());
    // A pod whose sidecar outlives the runner goes now (cleanPodPolicy Running).
    Cleanup();
    return std::move(plan_);
  }

  if (in_.progress && in_.progress->reachable) SetProgress(*in_.progress);

  std::vector<bool> present(static_cast<std::size_t>(pods), false);
  bool releasing = false;
  for (const auto* r : current) {
    present[static_cast<std::size_t>(r->rank)] = true;
    releasing = releasing || r->terminating;
  }
  // No replica is created beside one of another runner build: an in-place replacement whose
  // loss an operator configured otherwise planned, or a rank missing from a gang it began to
  // create.
  const ObservedReplica* other = releasing ? nullptr : BuiltOtherwise(current);
  for (int rank = 0; rank < pods && other != nullptr; ++rank) {
    if (present[static_cast<std::size_t>(rank)]) continue;
    const std::string name = ReplicaName(job_.metadata.name, st().attempt, rank);
    const auto& replaced = st().replaced_pods;
    const bool lost = std::find(replaced.begin(), replaced.end(), name) != replaced.end();
    RestartForUpgrade(*other,
                      (lost ? "lost rank " : "missing rank ") + std::to_string(rank) + " (" + name +
                          ") is not " + (lost ? "replaced in place" : "created"),
                      /*counts=*/false);  // a lost rank's loss was counted when it was replaced
    return std::move(plan_);
  }
  // A gang is created whole: while a released part of it (a partial gang the API refused to
  // complete) is still going, no new replica joins it.
  for (int rank = 0; rank < pods && !releasing; ++rank) {
    if (!present[static_cast<std::size_t>(rank)]) {
      plan_.actions.push_back({Action::Kind::kCreateReplica, rank, st().attempt,
                               ReplicaName(job_.metadata.name, st().attempt, rank), "missing"});
    }
  }

  // Every rank has a pod again (none of them going): the refused create is over, and what the
  // gang waits for now is its pods' own reason (Unschedulable, an image pull), not the refusal
  // HandleWait would otherwise keep naming until the whole gang runs.
  if (!releasing && std::all_of(present.begin(), present.end(), [](bool p) { return p; })) {
    SetCondition(kReplicaFailureCondition, false, "Created", "all replicas created");
  }
  if (st().replicas.running + st().replicas.succeeded == pods) {
    SetPhase("Running", "Running", "all " + std::to_string(pods) + " replicas running");
    SetCondition("Running", true, "Running", "all replicas running");
    SetCondition("Restarting", false, "Running", "gang running");
    SetCondition(kReplicaFailureCondition, false, "Created", "all replicas created");
    SetCondition(kPodsReadyCondition, true, "AllPodsRunning",
                 "all " + std::to_string(pods) + " replicas are running");
    SetCondition(kQueuedCondition, false, "Admitted", "the queue admitted the gang");
    OpenGates(current);
    if (HandleStall()) return std::move(plan_);
  } else {
    if (HandleWait(current, pods)) {
      // The wait ended the job or this attempt: no replica is created for it any more.
      std::erase_if(plan_.actions,
                    [](const Action& a) { return a.kind == Action::Kind::kCreateReplica; });
      return std::move(plan_);
    }
    if (st().phase != "Restarting") {
      SetPhase("Pending", "Pending", "waiting for replicas to start");
    }
  }
  return std::move(plan_);
}

}  // namespace

std::optional<ObservedProgress> ParseRunnerStatus(std::string_view text) {
  auto read = contract::ParseRunnerStatus(text);
  // A final status without a step (an older runner's message, "{}") says nothing: keep the
  // last poll rather than rewinding the progress to 0.
  if (!read.ok() || read->step <= 0) return std::nullopt;
  return ObserveRunnerStatus(read);
}

bool IsConsequence(const ObservedReplica& r) {
  // A SIGKILLed process (137: the OOM killer, a kill -9) wrote no message of its own: what it
  // has is the tail of its log, which may name an earlier lost peer it had recovered from.
  if (r.exit_code == 128 + 9) return false;
  // Runners before the contract only said "lost peer"; those after it name the first failure.
  return r.message.starts_with(contract::kCausedByPrefix) ||
         r.message.find("lost peer") != std::string::npos;
}

bool IsRetryable(const ObservedReplica& r, bool on_failure) {
  if (r.disruption || r.never_ran) return true;
  if (IsNodeFault(r)) return true;
  // The runtime could not start the program (not found, not executable): exit 128 from the
  // kubelet, but no restart finds a missing program. Other start errors (a GPU runtime hook, a
  // cgroup) belong to the node and are retried.
  // containerd words them in lower case ("no such file or directory"), `ringtrain run` with
  // strerror's ("No such file or directory"): compared in lower case.
  if (r.reason == "StartError") {
    std::string message = r.message;
    std::transform(message.begin(), message.end(), message.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    // Not "exec format error": an image of another architecture may run on another node (the
    // retry avoids this one); but `ringtrain run`'s ("not a binary for this machine", and a
    // script with no #! line) has no other machine. "Argument list too long" (E2BIG): the same
    // arguments on every node.
    for (const char* missing : {"executable file not found", "no such file or directory",
                                "not found on path", "permission denied", "not a directory",
                                "not a binary for this machine", "argument list too long"}) {
      if (message.find(missing) != std::string::npos) return false;
    }
    return true;
  }
  if (on_failure) return true;
  if (r.reason == "Evicted" || r.reason == "NodeLost" || r.reason == "Deleted" ||
      r.reason == "Preempted" || r.reason == "OOMKilled") {
    return true;
  }
  return r.exit_code >= 128 && r.exit_code <= 255;
}

void SetJobCondition(api::JobStatus* st, const std::string& type, bool value,
                     const std::string& reason, const std::string& message,
                     const std::string& now) {
  SetJobConditionStatus(st, type, value ? "True" : "False", reason, message, now);
}

void SetJobConditionStatus(api::JobStatus* st, const std::string& type, const std::string& status,
                           const std::string& reason, const std::string& message,
                           const std::string& now, bool record_false) {
  for (auto& c : st->conditions) {
    if (c.type != type) continue;
    if (c.status != status) c.last_transition_time = now;
    c.status = status;
    c.reason = reason;
    c.message = message;
    return;
  }
  if (status == "False" && !record_false) return;  // one that never held is not worth writing
  st->conditions.push_back({type, status, reason, message, now});
}

bool IsNodeFault(const ObservedReplica& r) {
  // The taint manager and the pod GC delete the pods of a lost node (DisruptionTarget).
  return r.reason == "NodeLost" || r.reason == "Evicted" ||
         r.reason == "UnexpectedAdmissionError" ||
         r.disruption_reason == "DeletionByTaintManager" ||
         r.disruption_reason == "DeletionByPodGC" ||
         r.message.find(kNodeFaultMarker) != std::string::npos;
}

bool IsAvoidanceRequired(const api::AvoidedNode& a, int attempt) {
  return a.required && attempt - a.attempt <= kRequiredAvoidanceAttempts;
}

Duration TtlLeft(const std::string& completion_time, std::int64_t ttl_seconds, WallTime now) {
  const WallTime done = ParseRfc3339(completion_time).value_or(now);
  const WallTime expiry = AfterSeconds(done, ttl_seconds);
  if (now >= expiry) return Duration::zero();
  // Rounded up: a job is never looked at again before it expired.
  const auto left = expiry - now;
  const auto most = std::chrono::seconds(api::kMaxPolicySeconds);
  return left >= most ? std::chrono::duration_cast<Duration>(most)
                      : std::chrono::ceil<Duration>(left);
}

bool IsPermanentWait(const std::string& wait_reason) {
  return wait_reason == "InvalidImageName" || wait_reason == kPodInvalidReason;
}

std::string ReplicaName(const std::string& job, int attempt, int rank) {
  return job + "-a" + std::to_string(attempt) + "-" + std::to_string(rank);
}

namespace {

// The vanished-replica policy: remembers the replicas of the current attempt (a terminating one
// refreshes what was seen, since a pod the taint manager deletes carries DisruptionTarget only
// while it terminates, but is never added: one the executor deletes leaves the memory first),
// and returns what is observed plus, for each remembered replica that is gone, a retryable
// failure with reason "Deleted". A replica deleted while no executor remembered it (a drain that
// evicted the operator with the gang) is told from the status: the attempt ran (phase Running,
// or the Running condition True through an in-place recovery), so each of its replicas that is
// gone, that no executor deleted and no in-place replacement waits for, vanished unwatched: a
// failure with reason "Deleted" too, marked a disruption (not counted), naming them all. Before
// the gang ran, a missing replica is one still to create.
std::vector<ObservedReplica> WithVanished(const PlanInput& in, PlanMemory* memory) {
  const api::TrainingJob& job = *in.job;
  const int attempt = job.status.attempt;
  const bool over = api::IsTerminal(job.status.phase) || job.spec.run_policy.suspend;
  if (memory->seen_attempt != attempt || over) {
    memory->seen.clear();
    memory->deleted.clear();
    memory->recreated.clear();
    memory->seen_attempt = attempt;
  }
  std::vector<ObservedReplica> replicas = in.replicas;
  std::map<std::string, bool> present;
  for (const auto& r : in.replicas) {
    present[r.name] = true;
    if (r.attempt != attempt || r.rank < 0) continue;
    if (!r.terminating && memory->recreated.erase(r.name) > 0) memory->deleted.erase(r.name);
    if (!r.terminating || memory->seen.contains(r.name)) memory->seen[r.name] = r;
  }
  for (const auto& [name, last] : memory->seen) {
    if (present.contains(name)) continue;
    ObservedReplica gone = last;
    gone.phase = ReplicaPhase::kFailed;
    gone.reason = "Deleted";
    gone.exit_code = last.phase == ReplicaPhase::kFailed ? last.exit_code : 0;
    gone.message = "pod " + name + " was deleted while the gang ran";
    gone.terminating = true;  // nothing left to delete
    replicas.push_back(std::move(gone));
  }
  const bool ran = job.status.phase == "Running" ||
                   std::any_of(job.status.conditions.begin(), job.status.conditions.end(),
                               [](const api::Condition& c) {
                                 return c.type == "Running" && c.status == "True";
                               });
  // Peers that report a rank's failure ("caused by rank N") tell more of it than its absence.
  const bool reported = std::any_of(in.replicas.begin(), in.replicas.end(), [&](const auto& r) {
    return r.attempt == attempt && r.phase == ReplicaPhase::kFailed &&
           r.message.starts_with(contract::kCausedByPrefix);
  });
  if (!ran || over || reported || job.status.phase == "Suspended") return replicas;
  const auto& replaced = job.status.replaced_pods;
  std::vector<std::pair<int, std::string>> unwatched;
  for (int rank = 0; rank < job.spec.replicas; ++rank) {
    std::string name = ReplicaName(job.metadata.name, attempt, rank);
    if (present.contains(name) || memory->seen.contains(name) || memory->deleted.contains(name) ||
        std::find(replaced.begin(), replaced.end(), name) != replaced.end()) {
      continue;
    }
    unwatched.emplace_back(rank, std::move(name));
  }
  std::string names;
  for (const auto& [rank, name] : unwatched) names += (names.empty() ? "" : ", ") + name;
  for (const auto& [rank, name] : unwatched) {
    ObservedReplica gone;
    gone.name = name;
    gone.rank = rank;
    gone.attempt = attempt;
    gone.phase = ReplicaPhase::kFailed;
    gone.reason = "Deleted";
    gone.disruption = true;  // deleted or evicted from outside: a drain, most likely
    gone.message = (unwatched.size() == 1 ? "pod " + names + " of the running gang is"
                                          : "pods " + names + " of the running gang are") +
                   " gone: deleted while no operator watched";
    gone.terminating = true;  // nothing left to delete
    replicas.push_back(std::move(gone));
  }
  return replicas;
}

// Without spec.checkpoint.volumeClaim or .volume the checkpoints die with rank 0's pod: say so
// once, as a Warning event and a condition, rather than let a user find out at a restart.
void NoteCheckpointStorage(const PlanInput& in, Plan* plan) {
  auto& conditions = plan->status.conditions;
  auto it = std::find_if(conditions.begin(), conditions.end(), [](const api::Condition& c) {
    return c.type == kCheckpointsEphemeralCondition;
  });
  if (!in.checkpoints_ephemeral) {
    if (it != conditions.end()) conditions.erase(it);
    return;
  }
  if (it != conditions.end() || api::IsTerminal(plan->status.phase)) return;
  const std::string message =
      "spec.checkpoint has neither volumeClaim nor volume: checkpoints go to an emptyDir that "
      "dies with the pod, so a gang restart starts from step 0";
  conditions.push_back({kCheckpointsEphemeralCondition, "True", "NoCheckpointVolume", message,
                        FormatRfc3339(in.now)});
  plan->events.push_back({"Warning", "NoCheckpointVolume", message});
}

// The create-retry gate: after a refused create, the gang is created again only once its
// backoff has passed, whatever woke this pass; the plan is requeued for then.
void GateCreates(const PlanInput& in, Plan* plan) {
  const bool creates = std::any_of(plan->actions.begin(), plan->actions.end(), [](const Action& a) {
    return a.kind == Action::Kind::kCreateReplica;
  });
  const PlanMemory& m = in.memory;
  if (!creates || m.failed_creates == 0 || in.steady_now >= m.create_retry_at) return;
  const auto wait = std::chrono::duration_cast<Duration>(m.create_retry_at - in.steady_now);
  std::erase_if(plan->actions,
                [](const Action& a) { return a.kind == Action::Kind::kCreateReplica; });
  if (!plan->requeue_after || wait < *plan->requeue_after) plan->requeue_after = wait;
}

// The Stalled condition speaks of rank 0 of a running gang (RankStalled, Progressing,
// Recovering, Starting, Resumed, ProgressUnknown): once the job is no longer Running (it
// finished, restarts, recovers a rank in place, is suspended), it says so, whatever path left
// Running (NotTraining, then JobFinished or Suspended as the phase moves on). Only the progress
// deadline's verdict (ProgressDeadlineExceeded) stays, as the reason the gang restarted.
void EndRankStalled(const PlanInput& in, Plan* plan) {
  const std::string& phase = plan->status.phase;
  // A job finished before this pass is left as it is.
  if (phase == "Running" || api::IsTerminal(in.job->status.phase)) return;
  const std::string reason = api::IsTerminal(phase) ? "JobFinished"
                             : phase == "Suspended" ? "Suspended"
                                                    : "NotTraining";
  for (const auto& c : plan->status.conditions) {
    // What rank 0's last read said (stalled, progressing, recovering, unknown, ...) is over;
    // the progress deadline's verdict stays: it is why the gang restarted or the job failed.
    if (c.type != "Stalled" || c.reason == "ProgressDeadlineExceeded") continue;
    SetJobConditionStatus(&plan->status, "Stalled", "False", reason,
                          "the job is " + phase + ": no gang of it trains now",
                          FormatRfc3339(in.now));
    return;
  }
}

// SAMPLES/S (status.progress.samplesPerSecond) is what the gang trains at: 0 unless the job is
// Running (restarting, recovering a rank in place, pending, suspended, failed: no gang of it
// trains), as while rank 0 says it does not train; the last rate read otherwise stayed through
// a gang restart until the new rank 0 first answered. A succeeded job keeps rank 0's final
// report.
void NoRateWithoutTraining(Plan* plan) {
  const std::string& phase = plan->status.phase;
  if (phase == "Running" || phase == "Succeeded" || !plan->status.progress) return;
  plan->status.progress->samples_per_second = 0;
}

// A rank 0 whose /status has not answered for kSilentRankZeroRate (SIGSTOPped, frozen, cut off)
// shows no rate: the last one read is not the job's any more.
void NoRateFromASilentRankZero(const PlanInput& in, const PlanMemory& memory, Plan* plan) {
  const auto since = RankZeroSilentSince(memory, plan->status.attempt);
  if (!since || !plan->status.progress || plan->status.phase != "Running" ||
      in.now - *since < kSilentRankZeroRate) {
    return;
  }
  plan->status.progress->samples_per_second = 0;
}

// PlanMemory's account of rank 0's /status, after this pass's read (if any).
void NoteRankZeroRead(const PlanInput& in, PlanMemory* memory) {
  const int attempt = in.job->status.attempt;
  const bool runs = std::any_of(in.replicas.begin(), in.replicas.end(), [attempt](const auto& r) {
    return r.attempt == attempt && r.rank == 0 && r.phase == ReplicaPhase::kRunning &&
           !r.terminating;
  });
  if (!runs || memory->rank0_attempt != attempt) {
    memory->rank0_attempt = runs ? attempt : -1;
    memory->rank0_answered = false;
    memory->rank0_unanswered_since.reset();
  }
  if (!runs || !in.progress) return;
  if (in.progress->reachable) {
    memory->rank0_answered = true;
    memory->rank0_unanswered_since.reset();
  } else if (memory->rank0_answered && !memory->rank0_unanswered_since) {
    memory->rank0_unanswered_since = in.now;
  }
}

}  // namespace

std::optional<WallTime> RankZeroSilentSince(const PlanMemory& memory, int attempt) {
  if (memory.rank0_attempt != attempt || !memory.rank0_answered) return std::nullopt;
  return memory.rank0_unanswered_since;
}

Plan PlanReconcile(const PlanInput& in) {
  PlanMemory memory = in.memory;
  PlanInput observed = in;
  observed.replicas = WithVanished(in, &memory);
  Plan plan = Planner(observed).Run();
  EndRankStalled(in, &plan);
  NoRateWithoutTraining(&plan);
  NoteCheckpointStorage(in, &plan);
  GateCreates(in, &plan);
  for (const Action& a : plan.actions) {
    if (a.kind == Action::Kind::kCreateReplica && memory.deleted.contains(a.name)) {
      memory.recreated.insert(a.name);
    }
  }
  if (in.progress && in.progress->reachable && in.progress->idle) memory.last_idle = in.now;
  NoteRankZeroRead(in, &memory);
  NoRateFromASilentRankZero(in, memory, &plan);
  if (in.progress && in.progress->reachable && in.progress->state == "recovering") {
    // The attempt the read belongs to: a pass that read it and restarted the gang must not
    // leave the next attempt's first outage as seen.
    const std::pair<int, int> outage{in.job->status.attempt, in.progress->recoveries};
    if (!memory.recovery_seen || memory.recovery_seen->first != outage) {
      memory.recovery_seen = std::pair{outage, in.now};
    }
  }
  for (const Event& e : plan.events) {
    if (e.reason == kRankRecoveringReason && in.progress) {
      memory.recovery_said = std::pair<int, int>{plan.status.attempt, in.progress->recoveries};
    }
  }
  plan.memory = std::move(memory);
  return plan;
}

void RecordReplicaDeleted(PlanMemory* memory, const std::string& name) {
  memory->seen.erase(name);
  memory->deleted.insert(name);
}

void RecordFailedCreate(PlanMemory* memory, SteadyTime now, const BackoffOptions& backoff) {
  memory->failed_creates = std::min(memory->failed_creates + 1, 30);
  memory->create_retry_at = now + BackoffDelay(backoff, memory->failed_creates - 1);
}

void RecordGangCreated(PlanMemory* memory) { memory->failed_creates = 0; }

}  // namespace ringtrain::reconcile
