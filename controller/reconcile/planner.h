// PlanReconcile: the pure gang planner shared by the Kubernetes executor and `ringtrain run`.
// Observed job + replicas + the executor's memory + clock in; actions, the new status, events and
// the next memory out. No I/O, no clock reads, no randomness: the same input always gives the
// same plan (level-triggered). Every decision is here; an executor observes, writes the status
// and carries out the actions, and reports what it did to the memory (Record* below).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/backoff.h"
#include "common/clock.h"
#include "controller/api/training_job.h"

namespace ringtrain::reconcile {

enum class ReplicaPhase { kPending, kRunning, kSucceeded, kFailed };

// One replica (a pod, or a local process) as observed now. A replica is one node of the gang:
// with gpusPerReplica = g it runs the ranks rank*g ... rank*g+g-1 (its local launcher).
struct ObservedReplica {
  std::string name;
  int rank = 0;  // the replica's index (node rank), 0 ... spec.replicas-1
  int attempt = 0;
  ReplicaPhase phase = ReplicaPhase::kPending;
  int exit_code = 0;              // when failed: the runner's code, or 128+signal
  std::string reason;             // "Error", "OOMKilled", "Evicted", "NodeLost", "Deleted", ...
  std::string message;            // the termination message (failed, or rank 0's final /status)
  bool disruption = false;        // pod condition DisruptionTarget (preemption, eviction)
  std::string disruption_reason;  // its reason (DeletionByTaintManager, PreemptionByScheduler, ...)
  bool terminating = false;       // deletion requested, not gone yet
  // When a terminating pod was due to be gone (metadata.deletionTimestamp: the delete plus its
  // grace); nullopt when not terminating or not known (a local process).
  std::optional<WallTime> deletion_deadline;
  // Deleted with grace 0 already (metadata.deletionGracePeriodSeconds 0): a finalizer keeps it.
  bool deletion_forced = false;
  // The executor marked it before deleting it (a released partial gang): its deletion is the
  // executor's own, as PlanMemory::deleted says, but durable across an executor's restart.
  bool deleted_by_executor = false;
  // Ended (succeeded or failed) while its pod still runs another container (a sidecar:
  // istio-proxy, one of spec.template's): the pod holds its node until it is deleted.
  bool pod_running = false;
  // Failed before any of its containers started: the node's kubelet refused the pod (OutOfcpu,
  // OutOfnvidia.com/gpu, NodeAffinity, UnexpectedAdmissionError, ...) or stopped it first.
  // Nothing of the job ran: retryable, and not counted against backoffLimit.
  bool never_ran = false;
  // The world it was started into (0 = unknown): a gang never mixes worlds.
  int world_size = 0;
  int nproc_per_node = 0;
  std::optional<WallTime> finished_at;  // when it terminated, if known
  // Not running yet: why, in the cluster's words. wait_reason is the scheduler's
  // (Unschedulable, SchedulingGated), the kubelet's (ErrImagePull, ImagePullBackOff,
  // InvalidImageName, CreateContainerConfigError, ContainerCreating, ...) or ClaimPending;
  // empty while nothing is known (a pod the scheduler has not looked at yet).
  std::string wait_reason;
  std::string wait_message;
  std::string node;    // where it was placed (spec.nodeName), "" until scheduled
  bool gated = false;  // its ranks wait at the gang gate until the executor opens it
  // What the replica was built from, as its executor stamped it: a hash of the replica as the
  // spec of metadata.generation `spec_generation` built it (PlanInput::spec_hashes). "" when it
  // carries no stamp (made by an older operator, or an executor that does not stamp): taken as
  // matching the current spec.
  std::string spec_hash;
  std::int64_t spec_generation = 0;
  // The same hash with the pod's labels left out (PlanInput::run_hashes): equal where only the
  // labels of the spec changed. "" when it carries none (an older operator's pod).
  std::string run_hash;
  // What the executor's own configuration gave the replica (PlanInput::options_hash), "" when it
  // carries no stamp, and its runner's image ("" when unknown).
  std::string options_hash;
  std::string image;
  // How long its runner waits for a lost peer's return before it gives up recovering in place
  // (RINGTRAIN_RECOVERY_TIMEOUT_SECONDS as the replica was started with it: the pod's own plain
  // value); nullopt when the replica does not say (no such entry, a reference, an executor that
  // does not observe it): the spec's (api::RecoveryTimeoutFor) is taken. An edit of the value
  // restarts no replica, so a running one may wait otherwise than the spec now says.
  std::optional<Duration> recovery_timeout;
};

// One attempt to read rank 0's /status. reachable=false: it was asked and did not answer (or
// answered garbage); the fields are then meaningless, and the stall deadline is judged only on
// reads that succeeded, so "could not ask" is never taken for "no progress".
struct ObservedProgress {
  std::int64_t step = 0;
  int epoch = 0;
  double samples_per_second = 0;
  double loss = 0;
  // The last evaluation's (common/runner_status.h): -1 before the first one, and for the other
  // kind of model.
  double test_accuracy = -1;
  double test_mse = -1;
  bool reachable = true;
  std::string error;  // why it could not be read, when !reachable
  // Rank 0 trains (past its start): start_step and the recovery totals below are known.
  bool training = false;
  // Rank 0 says it does not train now: "starting" (a new process, its step not yet known) or
  // "recovering" (its gang lost a rank). Its step and rate say nothing of the job's.
  bool idle = false;
  // Rank 0's own word for what it does (common/runner_status.h: running, stalled, recovering,
  // ...), for a person to read; the planner judges by the fields above.
  std::string state;
  std::int64_t start_step = -1;  // where this gang started: a checkpoint's step, or 0
  // The attempt's in-place recoveries as the gang counts them (common/runner_status.h).
  int recoveries = 0;
  std::int64_t recovery_steps_lost = 0;
  double recovery_seconds = 0;
  std::int64_t last_recovery_step = -1;
  // While "recovering": the loss rank 0 recovers from, in its words (one line); "" unknown; and
  // the seconds since that outage began (-1 unknown: an older runner).
  std::string recovery_cause;
  double recovering_seconds = -1;
};

struct Action {
  // kOpenGate: the whole gang is placed; tell this replica's ranks to start their rendezvous.
  // kRelabel: give the replica the labels the current spec builds, and stamp it as that
  // generation's (an edit of the template's labels only; nothing it runs changed). The executor
  // says what it relabeled (a Normal event Relabeled naming the pods, with the reason).
  enum class Kind { kCreateReplica, kDeleteReplica, kDeleteJob, kOpenGate, kRelabel };
  Kind kind;
  int rank = 0;
  int attempt = 0;
  std::string name;    // for deletes
  std::string reason;  // why, for logs
  // For deletes: the termination grace the replica gets (SIGTERM, then SIGKILL after it);
  // nullopt: its own (the pod's terminationGracePeriodSeconds).
  std::optional<Duration> grace;
  // For deletes: remove the object now (gracePeriodSeconds 0), without its node's word that the
  // containers stopped: for a pod whose node stopped answering (kStuckTerminatingAfter).
  bool force = false;
};

// How long past its deletion deadline a terminating pod whose containers are not known to have
// ended is waited for before it is force-deleted. A healthy kubelet kills the containers at the
// deadline and reports it within seconds; a node that stopped answering (partitioned, its
// kubelet or driver hung) keeps the pod Terminating until the Node object goes, which a
// machine still alive never does: waiting for it blocked the gang's restart for good.
inline constexpr Duration kStuckTerminatingAfter = std::chrono::seconds(120);

struct Event {
  std::string type;  // Normal | Warning
  std::string reason;
  std::string message;
};

// What an executor keeps of one job between passes, for the planner: its own memory, lost on a
// restart by design (it only sharpens decisions the observed state alone could also make). The
// planner returns the next one in Plan::memory; the executor stores it and reports what it did
// with RecordReplicaDeleted, RecordFailedCreate and RecordGangCreated.
struct PlanMemory {
  // Replicas of attempt `seen_attempt` observed before, as last seen, by name. One that vanishes
  // without the executor's delete was deleted by someone else (a person, a drain, a node
  // controller): the planner shows it as a retryable failure with reason "Deleted", so the whole
  // gang restarts instead of just that rank being re-created into a gang that has moved on.
  int seen_attempt = -1;
  std::map<std::string, ObservedReplica> seen;
  // Replicas of `seen_attempt` the executor deleted itself (RecordReplicaDeleted): one that is
  // gone is no loss, even for an executor that never saw it; any other that ends of its deletion
  // while it terminates was deleted by someone else (not counted), even one a freshly started
  // executor first sees terminating.
  std::set<std::string> deleted;
  // Of those, the ones created again since (an in-place replacement, a released gang created
  // anew): once that new replica is seen, its name leaves `deleted`, so a later deletion of it
  // from outside is told as one.
  std::set<std::string> recreated;
  // The create-retry gate: creates the API refused in a row, and when the gang may be created
  // again (whatever woke the pass; watch events of the released replicas would otherwise retry
  // at once).
  int failed_creates = 0;
  SteadyTime create_retry_at{};
  // When rank 0 last said it does not train (starting, recovering): the progress deadline
  // counts from then at the earliest, as from a step (a rank 0 that trains again after a long
  // recovery has had no time to step yet).
  std::optional<WallTime> last_idle;
  // The outage a RankRecovering event was said for: (attempt, rank 0's completed in-place
  // recoveries of it), so an outage is said once and the next one again.
  std::optional<std::pair<int, int>> recovery_said;
  // The outage rank 0 was last read recovering from, as above, and when it was first read so.
  std::optional<std::pair<std::pair<int, int>, WallTime>> recovery_seen;
  // Rank 0 of attempt `rank0_attempt` as its /status was read while it ran (not terminating):
  // whether it answered once, and when the first read that failed since the last that succeeded
  // was made. Forgotten whenever no rank 0 of the job's attempt runs (a replacement starts
  // afresh). Silence counts only after an answer: an operator that cannot reach the pods at all
  // (a NetworkPolicy) knows nothing. A rank 0 silent for kSilentRankZeroRate shows no samples/s;
  // one silent that long before the peer that timed out waiting for it ended, and not answering
  // now, is hung (RankZeroSilentSince).
  int rank0_attempt = -1;
  bool rank0_answered = false;
  std::optional<WallTime> rank0_unanswered_since;
};

// When rank 0 of `attempt` went silent after it had answered (PlanMemory), if it is silent.
std::optional<WallTime> RankZeroSilentSince(const PlanMemory& memory, int attempt);

struct Plan {
  std::vector<Action> actions;
  api::JobStatus status;
  std::vector<Event> events;
  std::optional<Duration> requeue_after;  // when the plan may change with time alone
  PlanMemory memory;                      // the executor's memory for the next pass
};

struct PlanInput {
  const api::TrainingJob* job = nullptr;
  // What exists now; a replica deleted and gone is simply absent (the planner tells a vanished
  // one from the memory).
  std::vector<ObservedReplica> replicas;
  std::optional<ObservedProgress> progress;  // nullopt: not asked this time
  WallTime now;
  SteadyTime steady_now{};  // what the create-retry gate is measured on
  PlanMemory memory;        // the previous pass's Plan::memory (default: a fresh executor)
  // The executor keeps the checkpoints where they die with rank 0 (a pod's emptyDir): said
  // once, as a Warning event and the condition kCheckpointsEphemeralCondition.
  bool checkpoints_ephemeral = false;
  // What the current spec builds for each rank of the current attempt, as the executor stamps
  // its replicas (ObservedReplica::spec_hash); empty when it does not stamp them. A replica of
  // the current attempt that still runs (or waits to) and was built differently by an earlier
  // generation of the spec means the spec changed under the gang: a new attempt (reason
  // SpecChanged, not counted), never a replacement of the new spec beside ranks of the old.
  std::vector<std::string> spec_hashes;
  // The same for ObservedReplica::run_hash (what each rank runs, its labels left out; empty
  // when the executor does not stamp it). A replica that differs from spec_hashes only in its
  // labels (the same run hash) is not restarted: it is relabeled in place (Action::kRelabel).
  std::vector<std::string> run_hashes;
  // What the executor's own configuration (not the spec: an operator upgrade) gives a replica it
  // builds now, as it stamps them (ObservedReplica::options_hash), and the runner image it gives
  // it; "" when it does not stamp. A lost replica is replaced in place only while no survivor was
  // built otherwise: one stamped differently, or an unstamped one (an older operator's) whose
  // image differs. Else the gang restarts (reason OperatorUpgraded, not counted), never two
  // runner builds in one gang. A gang that loses no replica is not restarted by an upgrade.
  std::string options_hash;
  std::string image;
  // How long a rank's collective waits on a peer before it fails, as the executor starts its
  // ranks (RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS: `ringtrain run`'s ranks inherit its
  // environment); zero: what api::CollectiveTimeoutFor reads from the spec (a pod's).
  Duration collective_timeout{0};
};

// How long a failed gang waits for its other replicas to end on their own when the failure seen
// so far is only a consequence ("caused by rank N", "lost peer"), so the root cause is read
// from the replica that has it before the gang is deleted.
inline constexpr std::chrono::seconds kRootCauseGrace{30};

// Rank 0's /status JSON (or its final status in the termination message on success), read
// leniently: unknown or mistyped fields are ignored; nullopt when it is not a JSON object.
std::optional<ObservedProgress> ParseRunnerStatus(std::string_view json);

// Whether a termination message reports another rank's failure rather than its own.
bool IsConsequence(const ObservedReplica& r);

// Exit codes 1-127 are permanent; 128-255, signals, evictions, lost nodes and replicas that never
// ran are retryable. With `on_failure` (runPolicy.restartPolicy OnFailure) every failure is but
// a program the runtime cannot find or start with these arguments (no restart finds it).
bool IsRetryable(const ObservedReplica& r, bool on_failure = false);

std::string ReplicaName(const std::string& job, int attempt, int rank);

// Sets a condition of the status (metav1.Condition rules: lastTransitionTime moves only when
// the status flips; a condition that never held is not written as False).
void SetJobCondition(api::JobStatus* status, const std::string& type, bool value,
                     const std::string& reason, const std::string& message,
                     const std::string& now_rfc3339);
// The same with a metav1.Condition status: "True", "False" or "Unknown"; record_false writes a
// False condition that never held.
void SetJobConditionStatus(api::JobStatus* status, const std::string& type,
                           const std::string& condition_status, const std::string& reason,
                           const std::string& message, const std::string& now,
                           bool record_false = false);

// Reported by the executor when it could not create a replica (the API refused it); cleared
// by the planner once the whole gang runs.
inline constexpr char kReplicaFailureCondition[] = "ReplicaFailure";
inline constexpr char kFailedCreateReason[] = "FailedCreate";
// The reason of a ReplicaFailure whose pod the API server refused as invalid (422 `Pod "x" is
// invalid: <field>: ...`: a template field the CRD's schema does not check, an env name, a
// volume mount of no volume, a GPU request unlike its limit). Every pod of the job is built
// the same way, so no retry or restart heals it: a permanent wait (the job fails at once).
inline constexpr char kPodInvalidReason[] = "PodInvalid";

// False while any replica of the current attempt is not running, with the cluster's reason
// (see ObservedReplica::wait_reason) and message; True once the whole gang runs. Its
// lastTransitionTime to False starts the scheduling wait that
// runPolicy.schedulingTimeoutSeconds bounds (not kOldPodsTerminatingReason's, below: that wait
// starts when the new gang is created).
inline constexpr char kPodsReadyCondition[] = "PodsReady";
// PodsReady's reason while replicas start normally (no reason from the cluster yet).
inline constexpr char kPodsStartingReason[] = "PodsStarting";
// PodsReady's reason from a new attempt (a gang restart, a resume) until its gang is created:
// the pods of earlier attempts terminate first; and while a rank replaced in place waits for
// its lost pod to go. Its placement wait starts at that creation.
inline constexpr char kOldPodsTerminatingReason[] = "OldPodsTerminating";
inline constexpr char kSchedulingTimeoutReason[] = "SchedulingTimeout";
// True while the gang waits at a queue's scheduling gate (Kueue); False ("Admitted") once it
// passed, which restarts the scheduling wait: time in line is the queue's to bound.
inline constexpr char kQueuedCondition[] = "Queued";

// A Warning event: rank 0 recovers in place from a loss the operator did not see (a hung peer,
// a network cut: every pod runs); once per outage, once the outage is kUnseenLossGrace old and
// the operator has read it for kLossReportGrace (a lost pod's end, which the kubelet reports a
// few seconds after the peers notice it, would make it a loss the operator answers itself; the
// outage's age alone is no guard where a step or a checkpoint takes longer than the grace).
inline constexpr char kRankRecoveringReason[] = "RankRecovering";
inline constexpr Duration kUnseenLossGrace = std::chrono::seconds(10);
// The termination grace of a built-in runner's rank other than 0 deleted by a gang restart
// after a failure: it has nothing to save (only rank 0 writes checkpoints) and exits at the
// SIGTERM; a hung one is killed after this instead of after the pod's 30 s.
inline constexpr Duration kNoWorkLeftGrace = std::chrono::seconds(1);
// How long rank 0's /status may go unanswered before the job shows no samples/s.
inline constexpr Duration kSilentRankZeroRate = std::chrono::seconds(10);
inline constexpr Duration kLossReportGrace = std::chrono::seconds(5);

// True while the checkpoints die with rank 0's replica (PlanInput::checkpoints_ephemeral).
inline constexpr char kCheckpointsEphemeralCondition[] = "CheckpointsEphemeral";

// Bad-node avoidance: a replica that failed for a cause of its node (the pod's reason
// NodeLost, Evicted or UnexpectedAdmissionError, a DisruptionTarget of the taint manager or the
// pod GC, or a termination message carrying kNodeFaultMarker, e.g. a GPU the driver lost) puts
// the node in status.avoidedNodes; such a failure is always retryable. The
// next kRequiredAvoidanceAttempts attempts must not use it (required node affinity), later
// ones prefer not to; when the required form leaves the gang unschedulable for
// kAvoidanceRelaxAfter, it is relaxed to preferred at once (a new, uncounted attempt). Any other
// pod the node refused (ObservedReplica::never_ran: OutOfcpu, NodeAffinity, ...) puts it there
// as preferred only (AvoidedNode::required false), never weakening a required entry.
inline constexpr char kNodeFaultMarker[] = "node fault: ";
inline constexpr int kRequiredAvoidanceAttempts = 2;
inline constexpr std::chrono::seconds kAvoidanceRelaxAfter{60};
bool IsNodeFault(const ObservedReplica& r);
// Whether attempt `attempt` must stay off the node (else it only prefers to).
bool IsAvoidanceRequired(const api::AvoidedNode& a, int attempt);

// Whether a wait reason is one a restart cannot heal (the job fails at once): the image name
// itself is invalid, or the API server refused the pod as invalid (kPodInvalidReason).
bool IsPermanentWait(const std::string& wait_reason);

// runPolicy.ttlSecondsAfterFinished of a finished job, counted from its status.completionTime
// (from `now` when that does not parse): how long the job has left, zero once it is to be
// deleted, never more than api::kMaxPolicySeconds. The planner's rule, and the Kubernetes
// executor's for a finished job whose spec no longer parses.
Duration TtlLeft(const std::string& completion_time, std::int64_t ttl_seconds, WallTime now);

Plan PlanReconcile(const PlanInput& in);

// The executor deleted a replica (its own delete, planned or a release): it is no longer
// expected, so its disappearance is no failure.
void RecordReplicaDeleted(PlanMemory* memory, const std::string& name);
// The API refused to create a child of the gang (a replica or what it needs), and the executor
// released the gang's replicas (each reported with RecordReplicaDeleted). The gang is created
// again only after BackoffDelay(backoff, n - 1) for the n-th refusal in a row, from `now`.
void RecordFailedCreate(PlanMemory* memory, SteadyTime now, const BackoffOptions& backoff);
// Every create of a plan succeeded: the next refusal starts from the first backoff again.
void RecordGangCreated(PlanMemory* memory);

}  // namespace ringtrain::reconcile
