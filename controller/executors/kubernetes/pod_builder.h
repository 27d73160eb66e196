// The Kubernetes objects of a TrainingJob (its pods, headless Service and token Secret) and the
// reading of a pod back into the planner's ObservedReplica. Pure JSON in, JSON out: no I/O.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/runner_env.h"
#include "controller/api/training_job.h"
#include "controller/reconcile/planner.h"

namespace ringtrain::op {

using Json = nlohmann::json;

inline constexpr char kJobLabel[] = "ringtrain.dev/job";
inline constexpr char kRankLabel[] = "ringtrain.dev/rank";
inline constexpr char kAttemptLabel[] = "ringtrain.dev/attempt";
// The world of the pod's attempt (ranks in all, ranks in this pod): a gang never mixes worlds.
inline constexpr char kWorldSizeLabel[] = "ringtrain.dev/world-size";
inline constexpr char kNprocLabel[] = "ringtrain.dev/nproc-per-node";
// The port rank 0 serves /status on; the operator polls podIP:<this>. Set to the metrics port on
// every pod; a test kubelet that maps ports rewrites it.
inline constexpr char kMetricsPortAnnotation[] = "ringtrain.dev/metrics-port";
// What the pod was built from: a hash of the pod as BuildPod made it (less the node avoidance of
// status.avoidedNodes and the gang gate's own timeout, which no edit of the training changes),
// and the job's metadata.generation it was built from. A pod of the running gang that the
// current spec would build differently is never joined by a replacement built from the new
// spec: the planner restarts the gang (SpecChanged).
inline constexpr char kSpecHashAnnotation[] = "ringtrain.dev/spec-hash";
inline constexpr char kSpecGenerationAnnotation[] = "ringtrain.dev/spec-generation";
// The same hash with the pod's labels left out: what the pod runs. A pod whose spec hash differs
// from the current spec's while its run hash does not changed only in its labels (a team or cost
// label added to the template): the operator relabels it in place rather than restarting the
// gang. Pods of operators before it carry none, and restart on such an edit as they did.
inline constexpr char kRunHashAnnotation[] = "ringtrain.dev/run-hash";
// What the operator's own configuration (PodOptions, which kSpecHashAnnotation leaves out: an
// upgrade restarts no running job) gave the pod: PodOptionsHash. A lost rank is never replaced
// in place by a pod of other options than its survivors: the planner restarts the gang
// (OperatorUpgraded).
inline constexpr char kOptionsHashAnnotation[] = "ringtrain.dev/options-hash";
// Set by the operator on a pod of the current attempt just before it deletes it outside the
// planner's own plan (a partial gang released after a refused create). Its runner then ends of
// the deletion (143, or 137 at the end of the grace period): an operator started meanwhile, whose
// memory is empty, reads the mark and takes that for the operator's own delete, as the one that
// made it did, not for a pod deleted by someone else (reason PodDeleted).
inline constexpr char kDeletedByOperatorAnnotation[] = "ringtrain.dev/deleted-by-operator";
inline constexpr char kContainerName[] = "runner";
inline constexpr char kTokenKey[] = "token";
inline constexpr int kMasterPort = contract::kMasterPort;
inline constexpr int kMetricsPort = contract::kMetricsPort;
// The runner image's non-root user; also the group that owns mounted volumes (fsGroup).
inline constexpr int kRunnerUid = 65532;
inline constexpr char kCheckpointVolume[] = "ringtrain-checkpoints";
// The gang gate (contract::kEnvGangGate): the operator sets this annotation on every pod of an
// attempt once all of them run; a downward-API volume shows it to the runner as a file.
inline constexpr char kGangPlacedAnnotation[] = "ringtrain.dev/gang-placed";
// Set at creation on a pod whose ranks wait at the gate (its value: the gate file): the pod
// cache drops specs, so this is how the operator knows which pods wait for kGangPlacedAnnotation.
inline constexpr char kGangGateAnnotation[] = "ringtrain.dev/gang-gate";
inline constexpr char kGangGateVolume[] = "ringtrain-gang";
inline constexpr char kGangGateDir[] = "/etc/ringtrain/gang";
inline constexpr char kGangGateFile[] = "placed";
// How much longer than runPolicy.schedulingTimeoutSeconds a rank waits at the gate on its own:
// the operator ends the wait first, with the cluster's reason.
inline constexpr std::chrono::seconds kGangGateSlack{60};

struct PodOptions {
  // Used for jobs whose spec.image is the built-in default ("" = keep spec.image).
  std::string runner_image;
  std::string runner_binary = "ringtrain-runner";
  std::string default_checkpoint_dir = "/ckpt";
  // A spec.command program's LOCAL_WORLD_SIZE and torchrun settings (PET_*). Off only in the
  // build the spec hash is taken of: operators before them hashed none, and a template's own
  // entry of one of those names, which the pod builder's now shadows, was hashed as it stood.
  bool launcher_env = true;
};

std::string TokenSecretName(const std::string& job);
// The PVC of spec.checkpoint.volumeClaim.
std::string CheckpointClaimName(const std::string& job);
std::string ServiceName(const std::string& job);
// Rank 0's stable DNS name through the headless Service.
std::string MasterAddr(const api::TrainingJob& job, int attempt);

Json BuildPod(const api::TrainingJob& job, int attempt, int rank, const PodOptions& options);
// The kSpecHashAnnotation BuildPod gives the pod of that attempt and rank: a hash of the pod
// the spec makes, whatever this operator's PodOptions (an upgrade changes no job's hash).
std::string PodSpecHash(const api::TrainingJob& job, int attempt, int rank);
// Both hashes BuildPod stamps on that pod, from one build: kSpecHashAnnotation's and
// kRunHashAnnotation's.
struct PodHashes {
  std::string spec;
  std::string run;
};
PodHashes PodSpecHashes(const api::TrainingJob& job, int attempt, int rank);
// The kOptionsHashAnnotation BuildPod gives the job's pods: a hash of what `options` decide of
// them (the runner image when spec.image is the built-in default, the runner binary without
// spec.command, the checkpoint directory without spec.checkpoint.path).
std::string PodOptionsHash(const api::TrainingJob& job, const PodOptions& options);
// The image of the runner container BuildPod makes.
std::string RunnerImage(const api::JobSpec& spec, const PodOptions& options);
Json BuildService(const api::TrainingJob& job);
Json BuildTokenSecret(const api::TrainingJob& job, const std::string& token);
// The PVC of spec.checkpoint.volumeClaim, owned by the job (nullopt without one).
std::optional<Json> BuildCheckpointClaim(const api::TrainingJob& job);
// Neither spec.checkpoint.volumeClaim nor .volume: checkpoints live in an emptyDir and die
// with the pod, so a gang restart starts from step 0. Never for a program of the user's
// (spec.command), which keeps its state where it chooses.
bool CheckpointsAreEphemeral(const api::JobSpec& spec);
Json OwnerReference(const api::TrainingJob& job);

// Phase, exit code, reason and termination message of the "runner" container, disruption and
// deletion. Pods without valid rank/attempt labels come back with rank -1 (the planner deletes
// them as strays).
reconcile::ObservedReplica ObserveReplica(const Json& pod);
// What the operator's pod index keeps of a pod: only what ObserveReplica and the reconciler read
// (the index holds thousands of pods, and a pod's spec is most of its size).
Json TrimPodForCache(const Json& pod);

// Gang schedulers (runPolicy.podGroup) and Kueue: what a pod carries to join its group.
inline constexpr char kCoschedulingPodGroupLabel[] = "scheduling.x-k8s.io/pod-group";
inline constexpr char kVolcanoGroupAnnotation[] = "scheduling.k8s.io/group-name";
inline constexpr char kCoschedulingSchedulerName[] = "scheduler-plugins-scheduler";
inline constexpr char kVolcanoSchedulerName[] = "volcano";
// Kueue's plain-pod groups: a TrainingJob labelled with a queue name gets its pods queued as
// one group of spec.replicas (Kueue gates them until the group is admitted).
inline constexpr const char* kKueueQueueLabel = api::kKueueQueueLabel;
inline constexpr char kKueuePriorityClassLabel[] = "kueue.x-k8s.io/priority-class";
inline constexpr char kKueueGroupLabel[] = "kueue.x-k8s.io/pod-group-name";
inline constexpr char kKueueGroupCountAnnotation[] = "kueue.x-k8s.io/pod-group-total-count";
inline constexpr char kKueueAdmissionGate[] = "kueue.x-k8s.io/admission";

// The PodGroup of runPolicy.podGroup (nullopt without one): named after the job, owned by it,
// minMember = spec.replicas; a coscheduling group also gets scheduleTimeoutSeconds from
// runPolicy.schedulingTimeoutSeconds, a Volcano group its queue.
std::optional<Json> BuildPodGroup(const api::TrainingJob& job);
std::string PodGroupName(const std::string& job);

// The merge patch that opens the gang gate of a pod.
Json GangGatePatch();

// The object's controller reference (the ownerReferences entry with controller: true; the API
// server allows one), or nullptr.
const Json* ControllerRef(const Json& object);
// Whether the object is controlled by the owner with this uid.
bool OwnedBy(const Json& object, const std::string& uid);

}  // namespace ringtrain::op
