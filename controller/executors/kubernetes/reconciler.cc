#include "controller/executors/kubernetes/reconciler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/json_fields.h"
#include "common/random.h"
#include "common/runner_status.h"
#include "common/time_format.h"
#include "controller/reconcile/observe_status.h"

namespace ringtrain::op {
namespace {

using reconcile::Action;
using reconcile::ObservedReplica;
using reconcile::ReplicaPhase;

std::string MetaString(const Json& obj, const char* field) {
  auto m = obj.find("metadata");
  if (m == obj.end() || !m->is_object()) return "";
  auto it = m->find(field);
  return it != m->end() && it->is_string() ? it->get<std::string>() : "";
}

bool Deleting(const Json& obj) {
  auto m = obj.find("metadata");
  return m != obj.end() && m->contains("deletionTimestamp") && !(*m)["deletionTimestamp"].is_null();
}

std::optional<Duration> Earliest(std::optional<Duration> a, std::optional<Duration> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// How long pod creates of one attempt may be refused retryably, in a row, before the refusal
// is said on the job (FailedCreate). Time, not a count: the queue retries within milliseconds
// (20 ms, 40 ms, ...), so three refusals were a sub-second blip of an API server (an etcd
// leader change, a webhook's pod rolling over) that released placed ranks (review).
constexpr Duration kTransientCreatesSaidAfter = std::chrono::seconds(30);

// The API server could not answer now (down, overloaded, slow): retried by the work queue,
// not the user's business (for a pod create, until kTransientCreatesSaidAfter). Every other
// refusal is about the job and is shown on it.
bool Transient(const Status& st) {
  return st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kResourceExhausted ||
         st.code() == StatusCode::kDeadlineExceeded;
}

// A refusal caused by the controller's own configuration, not by the job: the API's authorizer
// (RBAC: "... is forbidden: User \"system:serviceaccount:...\" cannot create resource ...") or a
// resource type the cluster does not serve (a create answered 404: a PodGroup CRD that is not
// installed; not a namespace that is gone). The job waits on it like on any refusal, but only a
// person fixing the controller's Role or the cluster ends the wait. A quota, PodSecurity, an
// admission webhook's policy (403s of other words) or an invalid object (422) is the job's.
bool ControllerMisconfigured(const Status& st) {
  const std::string& m = st.message();
  if (st.code() == StatusCode::kNotFound) return m.find("namespaces \"") == std::string::npos;
  return st.code() == StatusCode::kPermissionDenied && m.find("User \"") != std::string::npos &&
         m.find("\" cannot ") != std::string::npos;
}

int MetricsPort(const Json& pod) {
  auto m = pod.find("metadata");
  if (m != pod.end() && m->contains("annotations") && (*m)["annotations"].is_object()) {
    const Json& a = (*m)["annotations"];
    if (auto it = a.find(kMetricsPortAnnotation); it != a.end() && it->is_string()) {
      try {
        int port = std::stoi(it->get<std::string>());
        if (port > 0 && port < 65536) return port;
      } catch (const std::exception&) {
      }
    }
  }
  return kMetricsPort;
}

const kube::Resource kPersistentVolumeClaims{"", "v1", "persistentvolumeclaims"};
const kube::Resource kCoschedulingPodGroups{"scheduling.x-k8s.io", "v1alpha1", "podgroups"};
const kube::Resource kVolcanoPodGroups{"scheduling.volcano.sh", "v1beta1", "podgroups"};

}  // namespace

// One pass over a job: what Observe read, what the planner made of it, what was written.
struct Reconciler::Pass {
  std::string ns;
  std::string name;
  std::string key;
  Json raw;  // the job as the cache has it
  api::TrainingJob job;
  std::vector<Json> owned;                         // its pods (this job's uid)
  std::map<std::string, const Json*> pod_by_name;  // into `owned`
  JobMemory* memory = nullptr;
  reconcile::PlanInput in;  // what was observed
  bool any_running = false;
  reconcile::Plan plan;
  Json latest;  // the job as last written (raw until the status is)
  // Act: the pods of the plan's attempt that exist (released whole if the API refuses one),
  // and how many this pass created.
  std::vector<Json> gang;
  int created = 0;
  bool refused = false;  // the API refused a create, and FailedCreate handled it
};

std::string JobKey(const std::string& ns, const std::string& name) { return ns + "/" + name; }

Reconciler::Reconciler(kube::KubeClient* client, const ClusterCache* cache, const Clock* clock,
                       EventRecorder* events, ControllerMetrics* metrics, ReconcilerOptions options,
                       ProgressFetcher fetch)
    : client_(client),
      cache_(cache),
      clock_(clock),
      events_(events),
      metrics_(metrics),
      options_(std::move(options)),
      polls_(std::move(fetch), options_.status_readers, options_.status_read),
      expectations_(options_.expectations_timeout, clock_) {}

Reconciler::JobMemory& Reconciler::Memory(const std::string& key) {
  std::lock_guard<std::mutex> lock(memory_mu_);
  return memory_[key];
}

void Reconciler::ForgetMemory(const std::string& key) {
  polls_.Forget(key);
  std::lock_guard<std::mutex> lock(memory_mu_);
  memory_.erase(key);
}

void Reconciler::StopStatusReads() { polls_.Stop(); }

Status Reconciler::DeletePod(const std::string& key, const Json& pod, reconcile::PlanMemory* record,
                             std::optional<Duration> grace, bool force) {
  const std::string name = MetaString(pod, "name");
  kube::DeleteOptions opts;
  // Only ever delete the pod we observed, not a namesake created since.
  opts.precondition_uid = MetaString(pod, "uid");
  if (grace) {
    // 0 only when forced: 0 removes the object at once, without the kubelet's word.
    opts.grace_period_seconds = std::max<std::int64_t>(
        force ? 0 : 1, std::chrono::duration_cast<std::chrono::seconds>(*grace).count());
  }
  expectations_.ExpectDelete(key, name);
  Status st = client_->Delete(kube::kPods, MetaString(pod, "namespace"), name, opts);
  if (st.ok()) {
    if (record != nullptr) reconcile::RecordReplicaDeleted(record, name);
    return st;
  }
  expectations_.Lower(key, name);
  if (st.code() == StatusCode::kNotFound) {
    if (record != nullptr) reconcile::RecordReplicaDeleted(record, name);
    return Status::Ok();  // gone already: nothing of ours to delete, and nothing lost
  }
  // A different pod by now (the uid precondition failed): nothing of ours to delete, and the
  // namesake is no delete of ours to remember.
  if (st.code() == StatusCode::kAborted) return Status::Ok();
  return st.WithContext("delete pod " + name);
}

Status Reconciler::DeleteChildren(const std::string& ns, const std::string& name,
                                  const std::vector<Json>& pods) {
  const std::string key = JobKey(ns, name);
  for (const auto& pod : pods) {
    if (!Deleting(pod)) RETURN_IF_ERROR(DeletePod(key, pod));
  }
  for (const auto& [r, child] :
       {std::pair{&kube::kServices, ServiceName(name)}, {&kube::kSecrets, TokenSecretName(name)}}) {
    Status st = client_->Delete(*r, ns, child);
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      return st.WithContext("delete " + r->plural + " " + child);
    }
  }
  return DeleteCheckpointClaim(ns, name);
}

Status Reconciler::DeleteCheckpointClaim(const std::string& ns, const std::string& name) {
  // A claim of that name may be the user's own (spec.checkpoint.volume): only the one a
  // TrainingJob of this name controls is ours to delete, and only that very object.
  const std::string claim = CheckpointClaimName(name);
  auto got = client_->Get(kPersistentVolumeClaims, ns, claim);
  if (!got.ok()) {
    return got.status().code() == StatusCode::kNotFound
               ? Status::Ok()
               : got.status().WithContext("get persistentvolumeclaims " + claim);
  }
  const Json* controller = ControllerRef(*got);
  if (controller == nullptr || StringField(*controller, "kind") != api::kKind ||
      StringField(*controller, "name") != name) {
    return Status::Ok();
  }
  kube::DeleteOptions opts;
  opts.precondition_uid = MetaString(*got, "uid");
  Status st = client_->Delete(kPersistentVolumeClaims, ns, claim, opts);
  if (st.ok() || st.code() == StatusCode::kNotFound || st.code() == StatusCode::kAborted) {
    return Status::Ok();
  }
  return st.WithContext("delete persistentvolumeclaims " + claim);
}

StatusOr<ReconcileResult> Reconciler::HandleGone(const std::string& ns, const std::string& name,
                                                 const std::vector<Json>& pods) {
  const std::string key = JobKey(ns, name);
  if (metrics_ != nullptr) metrics_->SetJobPhase(key, "");
  bool known = false;
  bool children_deleted = false;
  {
    std::lock_guard<std::mutex> lock(memory_mu_);
    auto it = memory_.find(key);
    known = it != memory_.end();
    children_deleted = known && it->second.children_deleted;
  }
  if (!options_.delete_children || (pods.empty() && (!known || children_deleted))) {
    ForgetMemory(key);
    expectations_.Clear(key);
    return ReconcileResult{};
  }
  // Deleted on an earlier pass: each terminating pod's updates end here, not in another round
  // of deletes (and another "is gone" line).
  if (children_deleted && std::all_of(pods.begin(), pods.end(), Deleting)) {
    return ReconcileResult{};
  }
  // The cache may lag behind a job created a moment ago: only the API's word deletes pods.
  auto live = client_->Get(kube::kTrainingJobs, ns, name);
  if (live.ok()) return ReconcileResult{};
  if (live.status().code() != StatusCode::kNotFound) return live.status();
  spdlog::info("job {} is gone: deleting its {} pods, Service and Secret", key, pods.size());
  RETURN_IF_ERROR(DeleteChildren(ns, name, pods));
  JobMemory& memory = Memory(key);
  memory = JobMemory{};
  memory.children_deleted = true;
  return ReconcileResult{};
}

StatusOr<ReconcileResult> Reconciler::HandleInvalid(const Json& raw, const std::vector<Json>& pods,
                                                    const Status& error) {
  const std::string ns = MetaString(raw, "namespace");
  const std::string name = MetaString(raw, "name");
  const std::string key = JobKey(ns, name);
  const std::string message = "invalid spec: " + error.message();
  Json status = raw.value("status", Json::object());
  if (!status.is_object()) status = Json::object();
  const std::string phase = StringField(status, "phase");
  bool already = phase == "Failed";
  bool failed_invalid = false;  // by an earlier pass of this function
  Json conditions = Json::array();
  if (status.contains("conditions") && status["conditions"].is_array()) {
    for (const auto& c : status["conditions"]) {
      if (StringField(c, "type") == "Failed") {
        failed_invalid = StringField(c, "reason") == "InvalidSpec";
        already = already && failed_invalid && StringField(c, "message") == message;
        continue;
      }
      if (c.value("type", "") == "Running" && c.value("status", "") == "True") continue;
      conditions.push_back(c);
    }
  } else {
    already = false;
  }
  // A job that finished for its own reasons keeps its outcome, its conditions and its pods: an
  // edit of its spec (or a stricter operator) after the end changes nothing that ran.
  if (api::IsTerminal(phase) && !failed_invalid) {
    if (metrics_ != nullptr) {
      metrics_->SetJobPhase(key, phase);
      const Json progress = status.value("progress", Json::object());
      metrics_->SetJobFigures(key, static_cast<long long>(NumberField(progress, "step", -1)),
                              NumberField(progress, "testAccuracy", -1),
                              NumberField(progress, "testMSE", -1));
    }
    JobMemory& memory = Memory(key);
    if (const std::string uid = MetaString(raw, "uid"); memory.uid != uid) memory = JobMemory{uid};
    if (memory.invalid_reported != message) {
      memory.invalid_reported = message;
      spdlog::warn("job {} ({}): {}; left as it is", key, phase, message);
      if (events_ != nullptr) {
        events_->Record(raw, "Warning", "InvalidSpec",
                        message + " (the job has " +
                            (phase == "Succeeded" ? "succeeded" : "failed") +
                            ": its status and pods are left as they are)");
      }
    }
    // Its runPolicy.ttlSecondsAfterFinished still ends it, read on its own.
    return ApplyTtl(raw, status, pods);
  }
  if (metrics_ != nullptr) metrics_->SetJobPhase(key, "Failed");
  // Whatever ran under the old spec cannot be planned any more.
  for (const auto& pod : pods) {
    if (!Deleting(pod) && OwnedBy(pod, MetaString(raw, "uid"))) {
      RETURN_IF_ERROR(DeletePod(key, pod));
    }
  }
  // Its pods are deleted above: the ttl deletes the job and its other children.
  if (already) return ApplyTtl(raw, status, {});
  const std::string now = FormatRfc3339(clock_->Now());
  conditions.push_back({{"type", "Failed"},
                        {"status", "True"},
                        {"reason", "InvalidSpec"},
                        {"message", message},
                        {"lastTransitionTime", now}});
  status["phase"] = "Failed";
  status["conditions"] = conditions;
  if (!status.contains("completionTime")) status["completionTime"] = now;
  Json obj = raw;
  obj["status"] = status;
  auto written = client_->UpdateStatus(kube::kTrainingJobs, ns, obj);
  if (!written.ok()) {
    if (written.status().code() == StatusCode::kNotFound) return ReconcileResult{};
    return written.status().WithContext("update status of " + key);
  }
  expectations_.ExpectJobVersion(key, MetaString(*written, "resourceVersion"));
  spdlog::warn("job {}: {}", key, message);
  if (events_ != nullptr) events_->Record(raw, "Warning", "InvalidSpec", message);
  return ApplyTtl(raw, status, {});
}

Status Reconciler::EnsureChildren(const api::TrainingJob& job, JobMemory& memory) {
  if (memory.children_ready) return Status::Ok();
  const std::string& ns = job.metadata.ns;
  for (auto [r, obj] : {std::pair{&kube::kSecrets, BuildTokenSecret(job, RandomToken())},
                        std::pair{&kube::kServices, BuildService(job)}}) {
    const std::string child = obj["metadata"]["name"].get<std::string>();
    auto created = client_->Create(*r, ns, obj);
    if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists) {
      RETURN_IF_ERROR(CheckExistingChild(*r, job, child));
    } else if (!created.ok()) {
      return created.status().WithContext("create " + r->plural + " " + child);
    }
  }
  RETURN_IF_ERROR(EnsureCheckpointClaim(job));
  memory.children_ready = true;
  return Status::Ok();
}

Status Reconciler::EnsurePodGroup(const api::TrainingJob& job, int attempt, JobMemory& memory) {
  std::optional<Json> group = BuildPodGroup(job);
  if (!group || memory.pod_group_attempt == attempt) return Status::Ok();
  const bool volcano = job.spec.run_policy.pod_group->type == api::PodGroupType::kVolcano;
  const std::string& ns = job.metadata.ns;
  const std::string name = PodGroupName(job.metadata.name);
  auto created = volcano ? client_->Create(kVolcanoPodGroups, ns, *group)
                         : client_->Create(kCoschedulingPodGroups, ns, *group);
  if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists) {
    RETURN_IF_ERROR(
        CheckExistingChild(volcano ? kVolcanoPodGroups : kCoschedulingPodGroups, job, name));
    // Ours from an earlier attempt: the gang's size may have changed since.
    const Json patch = {{"spec", (*group)["spec"]}};
    created =
        volcano ? client_->Patch(kVolcanoPodGroups, ns, name, patch, kube::PatchType::kMerge)
                : client_->Patch(kCoschedulingPodGroups, ns, name, patch, kube::PatchType::kMerge);
    // Deleted since the create met it: no unserved kind (the cluster served it a moment ago).
    if (!created.ok() && created.status().code() == StatusCode::kNotFound) {
      return Unavailable("PodGroup " + name +
                         " existed a moment ago and is gone: created again "
                         "next time");
    }
  }
  if (!created.ok()) {
    const std::string api = (*group)["apiVersion"].get<std::string>();
    if (created.status().code() == StatusCode::kNotFound) {
      // Still a 404: the controller's configuration (ControllerMisconfigured), not the job's.
      return NotFound("runPolicy.podGroup: this cluster does not serve PodGroups of " + api +
                      " (install " +
                      (volcano ? "Volcano" : "the scheduler-plugins coscheduling plugin") +
                      " and its CRD, or remove runPolicy.podGroup)");
    }
    return created.status().WithContext("PodGroup " + name + " (" + api + ")");
  }
  memory.pod_group_attempt = attempt;
  return Status::Ok();
}

Status Reconciler::EnsureCheckpointClaim(const api::TrainingJob& job) {
  std::optional<Json> claim = BuildCheckpointClaim(job);
  if (!claim) return Status::Ok();
  // An existing claim (ours from an earlier pass, or kept across a controller restart) holds
  // the checkpoints a restarted gang resumes from: never replace it.
  const std::string name = CheckpointClaimName(job.metadata.name);
  auto created = client_->Create(kPersistentVolumeClaims, job.metadata.ns, *claim);
  if (!created.ok() && created.status().code() == StatusCode::kAlreadyExists) {
    return CheckExistingChild(kPersistentVolumeClaims, job, name);
  }
  if (!created.ok()) return created.status().WithContext("create persistentvolumeclaims " + name);
  return Status::Ok();
}

Status Reconciler::CheckExistingChild(const kube::Resource& resource, const api::TrainingJob& job,
                                      const std::string& name) {
  const std::string what = resource.plural + " " + name;
  auto existing = client_->Get(resource, job.metadata.ns, name);
  if (!existing.ok()) {
    if (existing.status().code() == StatusCode::kNotFound) {
      return Unavailable(what + " existed a moment ago and is gone: created again next time");
    }
    return existing.status().WithContext("get " + what);
  }
  if (OwnedBy(*existing, job.metadata.uid)) return Status::Ok();
  const Json* controller = ControllerRef(*existing);
  // No controller at all: kept on purpose (`kubectl delete --cascade=orphan`, a claim restored
  // from a snapshot: the checkpoints a new job of this name resumes from). Used as before.
  if (controller == nullptr) {
    spdlog::info("job {}/{}: using {}, which has no controller", job.metadata.ns, job.metadata.name,
                 what);
    return Status::Ok();
  }
  const bool earlier_job = StringField(*controller, "apiVersion").starts_with(api::kGroup) &&
                           StringField(*controller, "kind") == api::kKind;
  if (!earlier_job) {
    return FailedPrecondition(what + " already exists and is not this TrainingJob's (its " +
                              "controller is " + StringField(*controller, "kind") + " " +
                              StringField(*controller, "name") +
                              "): delete it or give the job another name");
  }
  // An earlier job of the same name left it: the garbage collector deletes it whenever it gets
  // to it, under this job. Delete it now (that object only), and create ours next time.
  if (!Deleting(*existing)) {
    kube::DeleteOptions opts;
    opts.precondition_uid = MetaString(*existing, "uid");
    Status st = client_->Delete(resource, job.metadata.ns, name, opts);
    if (!st.ok() && st.code() != StatusCode::kNotFound && st.code() != StatusCode::kAborted) {
      return st.WithContext("delete " + what + " of an earlier TrainingJob");
    }
    spdlog::info("job {}/{}: deleted {} left by an earlier job of the same name (uid {})",
                 job.metadata.ns, job.metadata.name, what, StringField(*controller, "uid"));
  }
  return Unavailable(what + " belongs to an earlier TrainingJob of the same name (uid " +
                     StringField(*controller, "uid") + "): deleted, created again next time");
}

Status Reconciler::FailedCreate(Pass& pass, const Status& error, const std::string& what,
                                bool replacement) {
  const std::string& key = pass.key;
  // The API's words, which name the pod they refused in most refusals (`pods "x" is forbidden:
  // exceeded quota`), but not in all: an admission webhook's denial or outage names the
  // webhook only, and a gang's ranks may be refused one by one (a webhook's objectSelector).
  std::string api_message = error.message();
  if (what.starts_with("pod ") &&
      api_message.find('"' + what.substr(4) + '"') == std::string::npos) {
    api_message = what + ": " + api_message;
  }
  // Counted as a failed reconcile although the pass ends as the job's wait: the reconcile-errors
  // alert is how a person hears of the controller's own trouble, and no job's wait ends before
  // it is fixed.
  const bool misconfigured = ControllerMisconfigured(error);
  if (misconfigured && metrics_ != nullptr) metrics_->IncReconcileErrors();
  // A pod the API server validated and refused (422 `Pod "x" is invalid: ...`): every pod of
  // the job is built alike, so no retry heals it and the planner fails the job on the next
  // pass (kPodInvalidReason is a permanent wait). Not a replacement's: its gang was created
  // from the same spec, so what changed is outside the job (a webhook's mutation, a newer API
  // server); the survivors wait for it as for any refusal, bounded by their recovery timeout.
  const bool invalid = !replacement && what.starts_with("pod ") &&
                       error.code() == StatusCode::kInvalidArgument &&
                       error.message().starts_with("Pod \"" + what.substr(4) + "\" is invalid: ");
  const char* reason = invalid ? reconcile::kPodInvalidReason : reconcile::kFailedCreateReason;
  spdlog::warn("job {}: create {}: {}{}{}{}", key, what, error.message(),
               replacement ? " (an in-place replacement: the surviving pods are kept)" : "",
               misconfigured ? " (the controller's configuration: a reconcile error)" : "",
               invalid ? " (an invalid pod: the job fails)" : "");
  if (events_ != nullptr) {
    events_->Record(pass.latest, "Warning", reconcile::kFailedCreateReason,
                    "Error creating: " + api_message);
  }
  // Nothing of a gang that cannot be whole may hold quota, GPUs or nodes meanwhile. Except the
  // survivors of an in-place recovery: they hold the gang's state (releasing them would turn a
  // free recovery into a gang restart that a quota or a webhook refuses just the same). The
  // replacement is retried after the backoff; the wait shows as PodsReady False FailedCreate
  // and is bounded by runPolicy.schedulingTimeoutSeconds and by the survivors' own recovery
  // timeout, after which they fail and the gang restarts.
  // Each is marked as the operator's before it is deleted: its runner ends of the deletion while
  // it terminates, and an operator that starts meanwhile has none of this memory. The memory of
  // the release is written once the delete succeeded (DeletePod): a pod whose delete failed is
  // not released, and a deletion of it by someone else until the next pass retries the release
  // is theirs. One already terminating was released by an earlier pass (remembered then, or
  // marked) or deleted by someone else: no delete of this pass, nothing to remember.
  const bool releases = !replacement && std::any_of(pass.gang.begin(), pass.gang.end(),
                                                    [](const Json& pod) { return !Deleting(pod); });
  // The condition ReplicaFailure first, as WriteStatus writes a restart before its deletes: a
  // mark is trusted only while it is True (the planner's MarkedReleased), so it is on record
  // before any pod is marked. An operator lost after the deletes leaves marks the next one
  // trusts; written after them, a loss in between left marks it did not, and each release read
  // as a pod deleted by someone else (a PodDeleted restart). Not written, nothing is released:
  // the pass fails and is retried (a partial gang holds its quota only that long).
  const api::JobStatus& status = pass.plan.status;
  api::JobStatus next = status;
  reconcile::SetJobCondition(&next, reconcile::kReplicaFailureCondition, true, reason, api_message,
                             FormatRfc3339(clock_->Now()));
  if (next != status) {
    Json obj = pass.latest;
    obj["status"] = Json::parse(api::StatusToJson(next));
    auto written = client_->UpdateStatus(kube::kTrainingJobs, pass.ns, obj);
    if (written.ok()) {
      expectations_.ExpectJobVersion(key, MetaString(*written, "resourceVersion"));
      pass.latest = *written;
    } else if (written.status().code() == StatusCode::kNotFound) {
      pass.refused = true;  // the job is gone: HandleGone deletes its pods
      return error.WithContext("create " + what);
    } else if (releases) {
      return written.status().WithContext("update status of " + key +
                                          " before releasing its partial gang");
    } else {
      spdlog::warn("job {}: condition {} not written: {}", key, reconcile::kReplicaFailureCondition,
                   written.status().ToString());
    }
  }
  reconcile::PlanMemory& memory = pass.memory->plan;
  if (releases) {
    for (const auto& pod : pass.gang) {
      const std::string pod_name = MetaString(pod, "name");
      if (Deleting(pod)) continue;
      // The uid: only the pod observed, not a namesake created since. The API refuses another
      // uid as a change of an immutable field (422 Invalid, not a 409: t4-02 in the fake API
      // server's transcripts). Whatever refused the mark (that, a policy that forbids the
      // annotation with a 403, an outage), the pod is still released: the delete's own uid
      // precondition tells a namesake, and an unmarked release is only what a fresh operator
      // cannot tell from a deletion by others; a partial gang never keeps its quota for it.
      const Json mark = {{"metadata",
                          {{"uid", MetaString(pod, "uid")},
                           {"annotations", {{kDeletedByOperatorAnnotation, "released"}}}}}};
      auto marked = client_->Patch(kube::kPods, pass.ns, pod_name, mark, kube::PatchType::kMerge);
      if (!marked.ok()) {
        if (marked.status().code() == StatusCode::kNotFound) {
          reconcile::RecordReplicaDeleted(&memory, pod_name);  // gone already
          continue;
        }
        spdlog::warn("job {}: pod {} released unmarked: {}", key, pod_name,
                     marked.status().ToString());
      }
      RETURN_IF_ERROR(DeletePod(key, pod, &memory));
    }
  }
  reconcile::RecordFailedCreate(
      &memory, clock_->SteadyNow(),
      BackoffOptions{options_.create_retry_base, options_.create_retry_max, 2.0});

  pass.refused = true;
  return error.WithContext("create " + what);
}

void Reconciler::ExplainPendingClaims(const Json& pod, ObservedReplica* r,
                                      std::map<std::string, std::string>* problems) {
  // The scheduler only says "unbound immediate PersistentVolumeClaims": name the claim and why
  // nothing binds it.
  if (r->wait_message.find("PersistentVolumeClaim") == std::string::npos) return;
  const std::string ns = MetaString(pod, "namespace");
  auto text = [](const Json& obj, const char* a, const char* b) {
    const Json* o = obj.is_object() && obj.contains(a) ? &obj[a] : nullptr;
    if (o == nullptr || !o->is_object() || !o->contains(b) || !(*o)[b].is_string())
      return std::string();
    return (*o)[b].get<std::string>();
  };
  const Json* volumes = nullptr;
  if (auto sp = pod.find("spec"); sp != pod.end() && sp->is_object()) {
    if (auto v = sp->find("volumes"); v != sp->end() && v->is_array()) volumes = &*v;
  }
  if (volumes == nullptr) return;
  for (const auto& v : *volumes) {
    const std::string claim = text(v, "persistentVolumeClaim", "claimName");
    if (claim.empty()) continue;
    if (auto known = problems->find(claim); known != problems->end()) {
      if (known->second.empty()) continue;
      r->wait_reason = "PersistentVolumeClaimPending";
      r->wait_message = known->second + "; the scheduler says: " + r->wait_message;
      return;
    }
    std::string& why = (*problems)[claim];
    auto got = client_->Get(kPersistentVolumeClaims, ns, claim);
    if (!got.ok() && got.status().code() == StatusCode::kNotFound) {
      why = "PersistentVolumeClaim " + claim + " does not exist";
    } else if (!got.ok()) {
      continue;  // cannot tell: the scheduler's words stand
    } else if (text(*got, "status", "phase") == "Pending") {
      const std::string sc = text(*got, "spec", "storageClassName");
      const Json* spec = got->is_object() && got->contains("spec") ? &(*got)["spec"] : nullptr;
      const bool asks_none = spec != nullptr && spec->is_object() &&
                             spec->contains("storageClassName") &&
                             (*spec)["storageClassName"] == "";
      why = "PersistentVolumeClaim " + claim + " is Pending: " +
            (asks_none    ? std::string("it asks for no StorageClass (storageClassName \"\"), so "
                                           "only a PersistentVolume made for it binds it, and none "
                                           "has")
             : sc.empty() ? std::string("it names no StorageClass and the cluster had no default "
                                        "one, so nothing provisions it (set a storageClassName, "
                                        "or mark a StorageClass as the default)")
                          : "StorageClass " + sc + " has not provisioned a volume for it yet");
    } else {
      continue;
    }
    r->wait_reason = "PersistentVolumeClaimPending";
    r->wait_message = why + "; the scheduler says: " + r->wait_message;
    return;
  }
}

StatusOr<ReconcileResult> Reconciler::Reconcile(const std::string& ns, const std::string& name) {
  Pass pass;
  if (auto done = Observe(ns, name, pass)) return *done;
  PlanPass(pass);
  if (auto done = WriteStatus(pass)) return *done;
  return Act(pass);
}

std::optional<StatusOr<ReconcileResult>> Reconciler::Observe(const std::string& ns,
                                                             const std::string& name, Pass& pass) {
  pass.ns = ns;
  pass.name = name;
  pass.key = JobKey(ns, name);
  const std::string& key = pass.key;
  std::optional<Json> cached = cache_->GetJob(ns, name);
  std::vector<Json> pods = cache_->JobPods(ns, name);
  if (!cached) return HandleGone(ns, name, pods);
  if (Deleting(*cached)) return ReconcileResult{};  // the garbage collector takes it from here
  pass.raw = std::move(*cached);

  const std::string uid = MetaString(pass.raw, "uid");
  // Pods of another job of the same name (deleted and re-created) are strays.
  for (auto& pod : pods) {
    if (OwnedBy(pod, uid)) {
      pass.owned.push_back(std::move(pod));
    } else if (!Deleting(pod) && !MetaString(pod, "uid").empty()) {
      if (Status st = DeletePod(key, pod); !st.ok()) return st;
    }
  }

  auto parsed = api::ParseJobJson(pass.raw.dump());
  if (!parsed.ok()) return HandleInvalid(pass.raw, pass.owned, parsed.status());
  pass.job = *std::move(parsed);
  const api::TrainingJob& job = pass.job;

  JobMemory& memory = Memory(key);
  if (memory.uid != uid) memory = JobMemory{uid};
  pass.memory = &memory;
  if (memory.command_checked_generation != job.metadata.generation) {
    memory.command_checked_generation = job.metadata.generation;
    const std::string ignored = api::IgnoredRunnerCommand(job.spec);
    if (!ignored.empty() && !api::IsTerminal(job.status.phase) && events_ != nullptr) {
      events_->Record(pass.raw, "Warning", "TemplateCommandIgnored", ignored);
    }
    const std::string env = api::IgnoredRecoveryTimeout(job.spec);
    if (!env.empty() && !api::IsTerminal(job.status.phase) && events_ != nullptr) {
      events_->Record(pass.raw, "Warning", "TemplateEnvIgnored", env);
    }
    const std::string momentum = api::IgnoredMomentum(job.spec);
    if (!momentum.empty() && !api::IsTerminal(job.status.phase) && events_ != nullptr) {
      events_->Record(pass.raw, "Warning", "MomentumIgnored", momentum);
    }
    for (const std::string& ignored : api::IgnoredTemplateFields(job.spec)) {
      if (!api::IsTerminal(job.status.phase) && events_ != nullptr) {
        events_->Record(pass.raw, "Warning", "TemplateFieldIgnored", ignored);
      }
    }
    // An edit after the end (review: a job failed as InvalidSpec, its spec fixed, stayed Failed
    // quoting the old error with no word of why): a finished job runs no more.
    const bool failed_invalid = std::any_of(
        job.status.conditions.begin(), job.status.conditions.end(), [](const api::Condition& c) {
          return c.type == "Failed" && c.status == "True" && c.reason == "InvalidSpec";
        });
    const std::int64_t ended_with = job.status.observed_generation;
    if (api::IsTerminal(job.status.phase) && events_ != nullptr &&
        ((ended_with > 0 && ended_with < job.metadata.generation) ||
         (ended_with == 0 && failed_invalid))) {
      const std::string edit =
          ended_with > 0
              ? "the spec was edited (generation " + std::to_string(ended_with) + " -> " +
                    std::to_string(job.metadata.generation) + ") after the job " +
                    (job.status.phase == "Succeeded" ? "succeeded" : "failed")
              : "the spec is valid now (generation " + std::to_string(job.metadata.generation) +
                    "), but the job failed as InvalidSpec";
      events_->Record(pass.raw, "Warning", "SpecEditedAfterEnd",
                      edit +
                          ": a finished job does not run again; delete and re-create it to run "
                          "the new spec");
    }
  }

  std::vector<ObservedReplica> replicas;
  std::map<std::string, bool> present;
  for (const auto& pod : pass.owned) {
    replicas.push_back(ObserveReplica(pod));
    present[replicas.back().name] = replicas.back().terminating;
    pass.pod_by_name[replicas.back().name] = &pod;
  }
  if (!expectations_.Satisfied(key, present, job.metadata.resource_version)) {
    return ReconcileResult{options_.expectations_recheck};
  }
  // A relabel this operator wrote that the cache does not show yet.
  std::map<std::string, std::int64_t> relabeled;
  for (std::size_t i = 0; i < pass.owned.size() && !pass.memory->relabeled.empty(); ++i) {
    auto it = pass.memory->relabeled.find(MetaString(pass.owned[i], "uid"));
    if (it == pass.memory->relabeled.end() || replicas[i].spec_generation >= it->second) continue;
    replicas[i].spec_generation = it->second;
    relabeled.insert(*it);
  }
  pass.memory->relabeled = std::move(relabeled);
  std::map<std::string, std::string> claim_problems;  // one GET per claim and pass
  for (std::size_t i = 0; i < pass.owned.size(); ++i) {
    if (replicas[i].wait_reason == "Unschedulable") {
      ExplainPendingClaims(pass.owned[i], &replicas[i], &claim_problems);
    }
  }

  for (const auto& r : replicas) {
    pass.any_running =
        pass.any_running || (r.attempt == job.status.attempt && r.phase == ReplicaPhase::kRunning);
  }
  pass.in.job = &pass.job;
  pass.in.steady_now = clock_->SteadyNow();
  pass.in.progress = ObserveProgress(pass);
  pass.in.replicas = std::move(replicas);
  pass.in.now = clock_->Now();
  pass.in.memory = memory.plan;
  pass.in.checkpoints_ephemeral = CheckpointsAreEphemeral(job.spec);
  pass.in.options_hash = PodOptionsHash(job, options_.pods);
  pass.in.image = RunnerImage(job.spec, options_.pods);
  // What the current spec builds for each rank: only worth building while a pod of the attempt
  // was built from another generation of the spec.
  const bool edited = std::any_of(
      pass.in.replicas.begin(), pass.in.replicas.end(), [&job](const ObservedReplica& r) {
        return r.attempt == job.status.attempt && !r.spec_hash.empty() &&
               r.spec_generation != job.metadata.generation;
      });
  if (edited) {
    JobMemory::SpecHashes& built = memory.spec_hashes;
    if (built.generation != job.metadata.generation || built.attempt != job.status.attempt ||
        built.labels != job.metadata.labels) {
      built = {job.metadata.generation, job.status.attempt, job.metadata.labels, {}, {}};
      for (int rank = 0; rank < job.spec.replicas; ++rank) {
        PodHashes hashes = options_.spec_hash(job, job.status.attempt, rank);
        built.hashes.push_back(std::move(hashes.spec));
        built.run_hashes.push_back(std::move(hashes.run));
      }
    }
    pass.in.spec_hashes = built.hashes;
    pass.in.run_hashes = built.run_hashes;
  }
  return std::nullopt;
}

std::optional<reconcile::ObservedProgress> Reconciler::ObserveProgress(const Pass& pass) {
  JobMemory& memory = *pass.memory;
  auto it = pass.pod_by_name.find(reconcile::ReplicaName(pass.name, pass.job.status.attempt, 0));
  if (it == pass.pod_by_name.end()) return std::nullopt;
  const Json& pod = *it->second;
  const std::string uid = MetaString(pod, "uid");
  // Another rank 0 (a new attempt, a replacement): it inherits no backoff of the old one's.
  if (uid != memory.polled_uid) {
    memory.polled_uid = uid;
    memory.failed_polls = 0;
  }
  const Json status = pod.value("status", Json::object());
  const std::string ip = status.value("podIP", "");
  // A runner that ended serves no /status, though a sidecar may keep its pod Running; an answer
  // read before it ended is dropped with it (the planner reads only a running rank 0's).
  if (status.value("phase", "") != "Running" || ip.empty() || Deleting(pod) ||
      ObserveReplica(pod).phase != ReplicaPhase::kRunning) {
    polls_.Take(pass.key, uid);
    return std::nullopt;
  }
  const Duration wait = options_.progress_interval * (1 << std::min(memory.failed_polls, 3));
  if (pass.in.steady_now - memory.last_poll >= wait &&
      polls_.Start(pass.key, uid, ip, MetricsPort(pod), options_.progress_timeout,
                   /*suspect=*/memory.failed_polls > 0)) {
    memory.last_poll = pass.in.steady_now;
  }
  // The answer of a read asked now (status_readers 0) or by an earlier pass.
  std::optional<reconcile::ObservedProgress> progress = polls_.Take(pass.key, uid);
  if (progress && !progress->reachable) {
    spdlog::debug("job {}: rank 0's /status: {}", pass.key, progress->error);
    ++memory.failed_polls;
  } else if (progress) {
    memory.failed_polls = 0;
  }
  return progress;
}

void Reconciler::PlanPass(Pass& pass) {
  pass.plan = reconcile::PlanReconcile(pass.in);
  // The planner's memory of an event said (RankRecovering once per outage) holds once the event
  // is recorded (WriteStatus, after the status write, which may fail): a failed write must not
  // swallow it for good.
  const auto said = pass.memory->plan.recovery_said;
  pass.memory->plan = pass.plan.memory;
  pass.memory->plan.recovery_said = said;
}

std::optional<StatusOr<ReconcileResult>> Reconciler::WriteStatus(Pass& pass) {
  // Status first: a gang restart is on record (attempt+1, restarts) before any pod is deleted,
  // so a crash between the two never loses the failure that caused it.
  const api::JobStatus& before = pass.job.status;
  const api::JobStatus& after = pass.plan.status;
  pass.latest = pass.raw;
  if (after != before) {
    Json obj = pass.raw;
    obj["status"] = Json::parse(api::StatusToJson(after));
    auto written = client_->UpdateStatus(kube::kTrainingJobs, pass.ns, obj);
    if (!written.ok()) {
      if (written.status().code() == StatusCode::kNotFound) return ReconcileResult{};
      return written.status().WithContext("update status of " + pass.key);
    }
    expectations_.ExpectJobVersion(pass.key, MetaString(*written, "resourceVersion"));
    pass.latest = *written;
    if (after.phase != before.phase) {
      spdlog::info("job {}: {} -> {} (attempt {}, restarts {})", pass.key, before.phase,
                   after.phase, after.attempt, after.restarts);
    }
  }
  if (metrics_ != nullptr) {
    metrics_->SetJobPhase(pass.key, after.phase);
    if (after.progress) {
      metrics_->SetJobFigures(pass.key, after.progress->step, after.progress->test_accuracy,
                              after.progress->test_mse);
    } else {
      metrics_->SetJobFigures(pass.key, -1, -1, -1);
    }
    if (after.attempt > before.attempt && after.phase == "Restarting") {
      metrics_->IncGangRestarts();
    }
    if (after.in_place_recoveries > before.in_place_recoveries) {
      metrics_->IncInPlaceRecoveries();
    }
    metrics_->AddRecoveredInPlace(after.recovery.in_place - before.recovery.in_place);
  }
  for (const auto& e : pass.plan.events) {
    if (events_ != nullptr) events_->Record(pass.raw, e.type, e.reason, e.message);
  }
  pass.memory->plan.recovery_said = pass.plan.memory.recovery_said;
  return std::nullopt;
}

StatusOr<ReconcileResult> Reconciler::Act(Pass& pass) {
  const reconcile::Plan& plan = pass.plan;
  // The pods of this attempt that exist: a gang the API refuses to complete releases them.
  for (const auto& pod : pass.owned) {
    if (ObserveReplica(pod).attempt == plan.status.attempt) pass.gang.push_back(pod);
  }
  bool creates = false;
  std::string relabeled;  // the pods relabeled in place, and why (Action::kRelabel)
  std::string relabel_reason;
  for (const auto& a : plan.actions) {
    switch (a.kind) {
      case Action::Kind::kCreateReplica: {
        creates = true;
        Status created = CreateReplica(pass, a);
        if (!created.ok() && pass.refused) {
          // A refusal the job waits on (FailedCreate said it): retried after the backoff, or
          // sooner when the plan asks (a deadline, the scheduling timeout, /status polls of
          // the survivors): nothing else may wake the job meanwhile.
          const SteadyTime retry = pass.memory->plan.create_retry_at;
          const SteadyTime now = clock_->SteadyNow();
          ReconcileResult waiting = Requeue(pass);
          waiting.requeue_after = Earliest(
              waiting.requeue_after,
              retry > now ? std::chrono::duration_cast<Duration>(retry - now) : Duration(0));
          return waiting;
        }
        RETURN_IF_ERROR(created);
        break;
      }
      case Action::Kind::kDeleteReplica: {
        auto it = pass.pod_by_name.find(a.name);
        if (it == pass.pod_by_name.end()) {
          reconcile::RecordReplicaDeleted(&pass.memory->plan, a.name);  // gone already
          break;
        }
        spdlog::debug("job {}: deleting pod {} ({})", pass.key, a.name, a.reason);
        // Remembered once the delete succeeded (DeletePod): a failed one is retried by the next
        // pass, and until then the pod's end is not ours.
        if (a.force) {
          // Its deletion was asked for before (ours or another's, as remembered then): this
          // delete only stops waiting for its node, and is not remembered as one of ours.
          spdlog::warn(
              "job {}: force-deleting pod {}, still terminating past its deletion "
              "deadline (its node does not answer)",
              pass.key, a.name);
          RETURN_IF_ERROR(DeletePod(pass.key, *it->second, nullptr, Duration::zero(), true));
          break;
        }
        RETURN_IF_ERROR(DeletePod(pass.key, *it->second, &pass.memory->plan, a.grace));
        break;
      }
      case Action::Kind::kOpenGate: {
        if (!pass.pod_by_name.contains(a.name)) break;
        auto patched =
            client_->Patch(kube::kPods, pass.ns, a.name, GangGatePatch(), kube::PatchType::kMerge);
        if (!patched.ok() && patched.status().code() != StatusCode::kNotFound) {
          return patched.status().WithContext("open the gang gate of pod " + a.name);
        }
        spdlog::debug("job {}: opened the gang gate of pod {}", pass.key, a.name);
        break;
      }
      case Action::Kind::kRelabel: {
        auto it = pass.pod_by_name.find(a.name);
        if (it == pass.pod_by_name.end() || Deleting(*it->second)) break;
        const std::string uid = MetaString(*it->second, "uid");
        auto& refused = pass.memory->relabel_refused;
        if (auto r = refused.find(uid);
            r != refused.end() && r->second == pass.job.metadata.generation) {
          break;
        }
        // The labels the current spec builds, added or changed (one another party added is
        // kept, and so is one the edit removed: no pod says which of its labels the template
        // gave it), and the stamps of this generation. The uid: only the pod observed.
        const Json built = BuildPod(pass.job, a.attempt, a.rank, options_.pods);
        const Json& meta = built["metadata"];
        Json annotations = Json::object();
        for (const char* k : {kSpecHashAnnotation, kRunHashAnnotation, kSpecGenerationAnnotation}) {
          annotations[k] = meta["annotations"][k];
        }
        const Json patch = {
            {"metadata", {{"uid", uid}, {"labels", meta["labels"]}, {"annotations", annotations}}}};
        auto patched = client_->Patch(kube::kPods, pass.ns, a.name, patch, kube::PatchType::kMerge);
        if (patched.ok()) {
          pass.memory->relabeled[uid] = pass.job.metadata.generation;
          spdlog::info("job {}: relabeled pod {} ({})", pass.key, a.name, a.reason);
          relabeled += (relabeled.empty() ? "" : ", ") + a.name;
          relabel_reason = a.reason;
          break;
        }
        if (patched.status().code() == StatusCode::kNotFound) break;
        // Refused for good (a label value the API finds invalid, a policy; or a namesake's uid):
        // said once, and not tried again until the spec changes; the replica runs on as it is.
        if (patched.status().code() != StatusCode::kInvalidArgument &&
            patched.status().code() != StatusCode::kPermissionDenied) {
          return patched.status().WithContext("relabel pod " + a.name);
        }
        spdlog::warn("job {}: relabel pod {}: {}", pass.key, a.name, patched.status().message());
        if (refused.size() > 4096) refused.clear();  // pods come and go; a bound, never a leak
        refused[uid] = pass.job.metadata.generation;
        if (events_ != nullptr) {
          events_->Record(pass.latest, "Warning", "RelabelFailed",
                          "pod " + a.name + " keeps its labels: " + patched.status().message());
        }
        break;
      }
      case Action::Kind::kDeleteJob:
        spdlog::info("job {}: deleting ({})", pass.key, a.reason);
        RETURN_IF_ERROR(DeleteJob(pass.raw, pass.owned));
        return ReconcileResult{};
    }
  }
  if (!relabeled.empty() && events_ != nullptr) {
    events_->Record(pass.latest, "Normal", "Relabeled",
                    relabel_reason + ": " + relabeled +
                        " relabeled in place, no restart (a label removed stays on them until "
                        "the next attempt)");
  }
  NotePodsReady(pass);
  if (creates) reconcile::RecordGangCreated(&pass.memory->plan);

  return Requeue(pass);
}

ReconcileResult Reconciler::Requeue(const Pass& pass) const {
  ReconcileResult result;
  result.requeue_after = pass.plan.requeue_after;
  if (pass.any_running && !api::IsTerminal(pass.plan.status.phase)) {
    result.requeue_after = Earliest(result.requeue_after, options_.progress_interval);
  }
  return result;
}

Status Reconciler::CreateReplica(Pass& pass, const Action& a) {
  const api::TrainingJob& job = pass.job;
  const std::vector<std::string>& replaced = pass.plan.status.replaced_pods;
  const bool replacement = std::find(replaced.begin(), replaced.end(), a.name) != replaced.end();
  if (Status st = EnsureChildren(job, *pass.memory); !st.ok()) {
    if (Transient(st)) return st;
    return FailedCreate(pass, st, "children", replacement);
  }
  if (Status st = EnsurePodGroup(job, a.attempt, *pass.memory); !st.ok()) {
    if (Transient(st)) return st;
    return FailedCreate(pass, st, "PodGroup", replacement);
  }
  Json pod = BuildPod(job, a.attempt, a.rank, options_.pods);
  expectations_.ExpectCreate(pass.key, a.name);
  auto r = client_->Create(kube::kPods, pass.ns, pod);
  if (!r.ok() && r.status().code() != StatusCode::kAlreadyExists) {
    expectations_.Lower(pass.key, a.name);
    // A retryable refusal is retried by the queue, unsaid, a few times: an API server's moment
    // of trouble. One that persists (an admission webhook that is down answers every create
    // with a 500) is said on the job and releases a partial gang, as a 403 or a 422 is: it
    // held the placed ranks, and said nothing but in the controller's log (review).
    if (Transient(r.status())) {
      auto& since = pass.memory->transient_creates_since;
      const SteadyTime now = clock_->SteadyNow();
      if (!since || since->first != a.attempt) since = std::pair{a.attempt, now};
      if (now - since->second < kTransientCreatesSaidAfter) {
        return r.status().WithContext("create pod " + a.name);
      }
    }
    pass.memory->transient_creates_since.reset();
    return FailedCreate(pass, r.status(), "pod " + a.name, replacement);
  }
  if (r.ok()) pass.memory->transient_creates_since.reset();
  if (!r.ok()) {
    // The name is taken. By this job's own pod (a create whose answer was lost, not yet in the
    // cache): expected, as created. By another's (the pod of a job of this name deleted a moment
    // ago, still terminating): no pod of this job will appear under it, and the expectation
    // held the job for its whole timeout (30 s) after the old pod had gone (review). Retried
    // with the queue's backoff instead. Looked for in the informer's cache, which holds every
    // pod of the job's label whoever owns it (the role grants no get on pods); one not there
    // (not yet seen, or of no job of ours) is expected as before.
    std::optional<Json> holder;
    for (Json& p : cache_->JobPods(pass.ns, pass.name)) {
      if (MetaString(p, "name") == a.name) holder = std::move(p);
    }
    if (!holder || OwnedBy(*holder, job.metadata.uid)) return Status::Ok();
    expectations_.Lower(pass.key, a.name);
    const Json* controller = ControllerRef(*holder);
    return Unavailable("create pod " + a.name + ": the name is held by another owner's pod (uid " +
                       MetaString(*holder, "uid") + ", " +
                       (controller != nullptr ? "controller " + StringField(*controller, "kind") +
                                                    " uid " + StringField(*controller, "uid")
                                              : std::string("no controller")) +
                       (Deleting(*holder) ? ", terminating" : "") + "): created once it is gone");
  }
  if (r.ok()) {
    pass.gang.push_back(*r);
    ++pass.created;
    if (metrics_ != nullptr) metrics_->IncPodsCreated();
    spdlog::debug("job {}: created pod {} ({})", pass.key, a.name, a.reason);
  }
  return Status::Ok();
}

Status Reconciler::DeleteJob(const Json& raw, const std::vector<Json>& owned) {
  const std::string ns = MetaString(raw, "namespace");
  const std::string name = MetaString(raw, "name");
  const std::string key = JobKey(ns, name);
  if (options_.delete_children) RETURN_IF_ERROR(DeleteChildren(ns, name, owned));
  kube::DeleteOptions opts;
  opts.precondition_uid = MetaString(raw, "uid");
  Status st = client_->Delete(kube::kTrainingJobs, ns, name, opts);
  if (!st.ok() && st.code() != StatusCode::kNotFound) return st.WithContext("delete " + key);
  ForgetMemory(key);
  expectations_.Clear(key);
  return Status::Ok();
}

StatusOr<ReconcileResult> Reconciler::ApplyTtl(const Json& raw, const Json& status,
                                               const std::vector<Json>& pods) {
  const std::optional<std::int64_t> ttl = api::ReadTtlSecondsAfterFinished(raw.dump());
  if (!ttl) return ReconcileResult{};
  const Duration left =
      reconcile::TtlLeft(StringField(status, "completionTime"), *ttl, clock_->Now());
  if (left > Duration::zero()) return ReconcileResult{left};
  spdlog::info("job {}/{}: deleting (ttlSecondsAfterFinished)", MetaString(raw, "namespace"),
               MetaString(raw, "name"));
  RETURN_IF_ERROR(DeleteJob(raw, pods));
  return ReconcileResult{};
}

void Reconciler::NotePodsReady(const Pass& pass) {
  JobMemory& memory = *pass.memory;
  if (memory.pods_ready_observed || pass.created == 0 || metrics_ == nullptr) return;
  // Only the job's first gang: its creation time says nothing of a later attempt's pods or of a
  // rank replaced in place, which an operator started since (with none of this memory) creates.
  const api::JobStatus& st = pass.job.status;
  // A gang that ran, or one restarted before it ran (a node's refusal, the scheduling timeout),
  // is no first gang; one created suspended starts at attempt 1, none the less its first.
  const bool ran_or_restarted = std::any_of(
      st.conditions.begin(), st.conditions.end(),
      [](const api::Condition& c) { return c.type == "Running" || c.type == "Restarting"; });
  if (ran_or_restarted || !pass.plan.status.replaced_pods.empty()) {
    memory.pods_ready_observed = true;
    return;
  }
  int current = pass.created;
  for (const auto& r : pass.in.replicas) {
    current += r.attempt == pass.plan.status.attempt && !r.terminating ? 1 : 0;
  }
  if (current < pass.job.spec.replicas) return;
  memory.pods_ready_observed = true;
  if (auto t = ParseRfc3339(pass.job.metadata.creation_timestamp)) {
    metrics_->ObservePodsReady(std::chrono::duration<double>(clock_->Now() - *t).count());
  }
}

}  // namespace ringtrain::op
