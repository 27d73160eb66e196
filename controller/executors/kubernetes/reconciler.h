// The Kubernetes executor of the shared planner, in four phases per pass: observe (a TrainingJob
// and its pods from the informer cache, its claims, rank 0's /status), plan
// (reconcile::PlanReconcile decides everything), write the status (only when it changed), act
// (carry out the plan with pods, a headless Service, a token Secret and the checkpoint PVC). Owns
// the expectations and the small per-job memory; must not watch or list anything itself.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "controller/executors/kubernetes/controller_metrics.h"
#include "controller/executors/kubernetes/pod_builder.h"
#include "controller/executors/kubernetes/status_poller.h"
#include "controller/kube/kube_client.h"
#include "controller/reconcile/planner.h"
#include "controller/runtime/event_recorder.h"
#include "controller/runtime/expectations.h"

namespace ringtrain::op {

// What the informers hold. Implementations are thread-safe and return copies.
class ClusterCache {
 public:
  virtual ~ClusterCache() = default;
  virtual std::optional<Json> GetJob(const std::string& ns, const std::string& name) const = 0;
  // Pods labelled ringtrain.dev/job=<job> in ns, whoever owns them.
  virtual std::vector<Json> JobPods(const std::string& ns, const std::string& job) const = 0;
};

// What the spec builds for one rank of an attempt, as BuildPod stamps it (PodSpecHash).
using SpecHasher = std::function<PodHashes(const api::TrainingJob& job, int attempt, int rank)>;

struct ReconcilerOptions {
  PodOptions pods;
  // A seam for tests (PodSpecHash otherwise): what a hash costs is a whole pod built.
  SpecHasher spec_hash = PodSpecHashes;
  Duration progress_interval{5000};  // how often rank 0's /status is read while running
  Duration progress_timeout{500};
  // Threads that read rank 0's /status (StatusPoller): a pass asks for a read and goes on, and
  // the answer wakes the job's next pass through `status_read`. 0: the pass that asks reads
  // (one pass asks and sees the answer; for tests).
  int status_readers = 0;
  std::function<void(const std::string& key)> status_read;
  Duration expectations_timeout{30'000};
  Duration expectations_recheck{1000};  // requeue while waiting for the cache to catch up
  // Delete pods, Service and Secret ourselves when a job goes (ttl or deleted), rather than
  // leave it to the garbage collector alone: the fake API server has none, and a real one
  // does the same a moment later.
  bool delete_children = true;
  // After the API refused a child (quota, PodSecurity, invalid), the gang is released and
  // created again whole after this delay, doubling up to create_retry_max (common/backoff.h's
  // BackoffDelay, gated by the planner); a gang created whole resets it. Kept here, not only in
  // the work queue: watch events of the released pods would otherwise retry at once.
  Duration create_retry_base{1000};
  Duration create_retry_max{60'000};
};

struct ReconcileResult {
  std::optional<Duration> requeue_after;
};

std::string JobKey(const std::string& ns, const std::string& name);

class Reconciler {
 public:
  // `events` and `metrics` may be null.
  Reconciler(kube::KubeClient* client, const ClusterCache* cache, const Clock* clock,
             EventRecorder* events, ControllerMetrics* metrics, ReconcilerOptions options,
             ProgressFetcher fetch = HttpProgressFetcher());

  // One level-triggered pass over one job. Errors (conflicts, API errors) mean "retry with
  // backoff"; the job is never reconciled by two threads at once (the work queue sees to it).
  StatusOr<ReconcileResult> Reconcile(const std::string& ns, const std::string& name);
  // Ends the /status readers (ReconcilerOptions::status_readers): no read is asked or answered
  // after; passes go on without one.
  void StopStatusReads();

 private:
  // What the reconciler remembers about a job between passes; lost on restart by design: it
  // only sharpens decisions the cache alone could also make.
  struct JobMemory {
    std::string uid;
    // The job is gone and its children were deleted (HandleGone): its pods that still terminate
    // need nothing more, until the last one vanishes and the memory with it.
    bool children_deleted = false;
    bool children_ready = false;
    reconcile::PlanMemory plan;  // the planner's (vanished pods, the create-retry gate)
    SteadyTime last_poll{};
    // Reads of rank 0's /status that failed in a row: each doubles the wait before the next
    // (up to 8 progress intervals). A read that times out holds one of the shared workers for
    // its whole timeout; many jobs whose /status does not answer (a NetworkPolicy that drops
    // the packets) queued every other job behind them (review: 13.6 s to create a new job's
    // pods beside 150 such jobs).
    int failed_polls = 0;
    std::string polled_uid;  // the rank 0 pod they were of
    bool pods_ready_observed = false;
    int pod_group_attempt = -1;  // the attempt whose PodGroup is known to be right
    // Since when pod creates of an attempt (first) are refused in a row with a retryable error
    // (a 500 of an admission webhook that is down, a 503): past kTransientCreatesSaidAfter, a
    // refusal like any other (FailedCreate). Reset by a create that succeeds.
    std::optional<std::pair<int, SteadyTime>> transient_creates_since;
    // Pods relabeled in place (Action::kRelabel), by uid, and the generation their stamp now
    // says, until the cache shows it: a pass on a cache that lagged behind the patch read the
    // old stamp and relabeled (and said so) again.
    std::map<std::string, std::int64_t> relabeled;
    // Pods whose relabel the API refused (a policy, an invalid label value), by uid, and the
    // generation refused: said once (RelabelFailed), not patched again until the spec changes.
    std::map<std::string, std::int64_t> relabel_refused;
    // The invalid-spec message last reported on a finished job (one Warning event each).
    std::string invalid_reported;
    // The generation whose ignored template command (api::IgnoredRunnerCommand) was looked
    // for: one TemplateCommandIgnored Warning event per generation that sets one.
    std::int64_t command_checked_generation = -1;
    // PlanInput::spec_hashes as last built, and what they were built from: the generation, the
    // attempt, and the job's labels (the pods carry Kueue's, and no generation counts a label).
    // Each rank's hash is built once per generation, not on every pass of an edited job.
    struct SpecHashes {
      std::int64_t generation = -1;
      int attempt = -1;
      std::map<std::string, std::string> labels;
      std::vector<std::string> hashes;
      std::vector<std::string> run_hashes;
    };
    SpecHashes spec_hashes;
  };
  // One pass over a job, phase by phase (defined in reconciler.cc).
  struct Pass;

  // The phases of Reconcile: observe the job, its pods and claims into the planner's input;
  // plan (reconcile::PlanReconcile, nothing decided here); write the status; act on the plan.
  // Observe and WriteStatus return a result when the pass ends there.
  std::optional<StatusOr<ReconcileResult>> Observe(const std::string& ns, const std::string& name,
                                                   Pass& pass);
  void PlanPass(Pass& pass);
  std::optional<StatusOr<ReconcileResult>> WriteStatus(Pass& pass);
  StatusOr<ReconcileResult> Act(Pass& pass);
  // When the pass comes back: when the plan asks, and at the /status poll interval while a
  // replica of a job that has not ended runs.
  ReconcileResult Requeue(const Pass& pass) const;
  // Act's steps: one replica's pod (and what it needs first), the job itself (ttl), and the
  // pods-ready metric once the whole gang exists.
  Status CreateReplica(Pass& pass, const reconcile::Action& a);
  // The job (runPolicy.ttlSecondsAfterFinished) with its children `owned` and the rest
  // DeleteChildren deletes, when options_.delete_children.
  Status DeleteJob(const Json& raw, const std::vector<Json>& owned);
  void NotePodsReady(const Pass& pass);
  // Rank 0's /status, at most every progress_interval, while it runs.
  std::optional<reconcile::ObservedProgress> ObserveProgress(const Pass& pass);

  StatusOr<ReconcileResult> HandleGone(const std::string& ns, const std::string& name,
                                       const std::vector<Json>& pods);
  StatusOr<ReconcileResult> HandleInvalid(const Json& raw, const std::vector<Json>& pods,
                                          const Status& error);
  // A finished job whose spec does not parse: its runPolicy.ttlSecondsAfterFinished, read
  // alone (api::ReadTtlSecondsAfterFinished), counted from status.completionTime as the planner
  // counts it; deleted with DeleteJob once expired, else requeued for then.
  StatusOr<ReconcileResult> ApplyTtl(const Json& raw, const Json& status,
                                     const std::vector<Json>& pods);
  // An unschedulable pod whose claim is not bound: the claim and why, in place of the
  // scheduler's generic words (one GET per claim and pass, only on that path).
  // `problems`: claim → why it is unbound ("" = bound), filled once per claim and pass.
  void ExplainPendingClaims(const Json& pod, reconcile::ObservedReplica* r,
                            std::map<std::string, std::string>* problems);
  Status EnsureChildren(const api::TrainingJob& job, JobMemory& memory);
  // The PodGroup of runPolicy.podGroup, created (or its minMember corrected after a resize)
  // before the pods of an attempt.
  Status EnsurePodGroup(const api::TrainingJob& job, int attempt, JobMemory& memory);
  // The PVC of spec.checkpoint.volumeClaim, created once and never replaced.
  Status EnsureCheckpointClaim(const api::TrainingJob& job);
  // A child's create found the name taken: Ok when the object is this job's. One an earlier job
  // of the same name left (its ownerReference names another TrainingJob uid, so the garbage
  // collector would delete it under this job) is deleted and the create retried on the next
  // pass (an Unavailable error); one no TrainingJob owns is a FailedPrecondition naming it.
  Status CheckExistingChild(const kube::Resource& resource, const api::TrainingJob& job,
                            const std::string& name);
  Status DeleteCheckpointClaim(const std::string& ns, const std::string& name);
  // The API refused a child: tell the user (a Warning event FailedCreate, correlated, and the
  // ReplicaFailure condition, written before any pod is marked and released: a fresh operator
  // trusts a mark only while it is True), release the partial gang (pass.gang) and report the
  // refusal to the planner's create-retry gate. Returns the error and sets pass.refused: the
  // pass ends there, and Act retries after the planner's backoff, as a wait of the job (its
  // status says so), not as a failed reconcile (ringtrain_controller_reconcile_errors_total,
  // whose alert speaks of the controller's own trouble), unless the refusal is that trouble:
  // RBAC, or a resource type the cluster does not serve (a PodGroup CRD), counted there though
  // the job waits the same way. A failure of the condition's write
  // (when there is a pod to release) or of the release itself is returned alone.
  // `replacement`: the create was of a pod replaced in place (status.replacedPods); the
  // survivors hold the gang's state and are kept while the create is retried (see the .cc).
  Status FailedCreate(Pass& pass, const Status& error, const std::string& what, bool replacement);
  Status DeleteChildren(const std::string& ns, const std::string& name,
                        const std::vector<Json>& pods);
  // Deletes the pod observed (its uid), not a namesake. `record`: the planner's memory of the
  // executor's own deletes (reconcile::RecordReplicaDeleted), written only once the delete
  // succeeded or found the pod gone (404); a delete that failed is no release (the pod may still
  // end of someone else's deletion, or run on), and a namesake (409 on the uid) none of ours.
  // `grace`: the pod's termination grace for this delete (nullopt: its own), in whole seconds,
  // at least 1 (0 would remove it from the API before its containers stop), unless `force`
  // (reconcile::Action::force: a pod whose node no longer answers).
  Status DeletePod(const std::string& key, const Json& pod, reconcile::PlanMemory* record = nullptr,
                   std::optional<Duration> grace = std::nullopt, bool force = false);
  JobMemory& Memory(const std::string& key);
  void ForgetMemory(const std::string& key);

  kube::KubeClient* client_;
  const ClusterCache* cache_;
  const Clock* clock_;
  EventRecorder* events_;
  ControllerMetrics* metrics_;
  const ReconcilerOptions options_;
  StatusPoller polls_;
  Expectations expectations_;
  std::mutex memory_mu_;  // guards the map; an entry is only touched by its key's worker
  std::map<std::string, JobMemory> memory_;
};

}  // namespace ringtrain::op
