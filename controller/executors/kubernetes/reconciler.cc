#include "controller/executors/kubernetes/reconciler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

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

// The API server could not answer now (down, overloaded, slow): retried by the work queue,
// not the user's business. Every other refusal is about the job and is shown on it.
bool Transient(const Status& st) {
  return st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kResourceExhausted ||
         st.code() == StatusCode::kDeadlineExceeded;
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

constexpr char kEphemeralCondition[] = "CheckpointsEphemeral";

// Without spec.checkpoint.volumeClaim or .volume the checkpoints die with rank 0's pod: say so
// once, as a Warning event and a condition, rather than let a user find out at a restart.
void NoteCheckpointStorage(const api::TrainingJob& job, WallTime now, reconcile::Plan* plan) {
  auto& conditions = plan->status.conditions;
  auto it = std::find_if(conditions.begin(), conditions.end(),
                         [](const api::Condition& c) { return c.type == kEphemeralCondition; });
  if (!CheckpointsAreEphemeral(job.spec)) {
    if (it != conditions.end()) conditions.erase(it);
    return;
  }
  if (it != conditions.end() || api::IsTerminal(plan->status.phase)) return;
  const std::string message =
      "spec.checkpoint has neither volumeClaim nor volume: checkpoints go to an emptyDir that "
      "dies with the pod, so a gang restart starts from step 0";
  conditions.push_back(
      {kEphemeralCondition, "True", "NoCheckpointVolume", message, FormatRfc3339(now)});
  plan->events.push_back({"Warning", "NoCheckpointVolume", message});
}

}  // namespace

std::string JobKey(const std::string& ns, const std::string& name) { return ns + "/" + name; }

ProgressFetcher HttpProgressFetcher() {
  return [](const std::string& ip, int port,
            Duration timeout) -> std::optional<reconcile::ObservedProgress> {
    return reconcile::ObserveRunnerStatus(contract::FetchRunnerStatus(ip, port, timeout));
  };
}

Reconciler::Reconciler(kube::KubeClient* client, const ClusterCache* cache, const Clock* clock,
                       EventRecorder* events, ControllerMetrics* metrics, ReconcilerOptions options,
                       ProgressFetcher fetch)
    : client_(client),
      cache_(cache),
      clock_(clock),
      events_(events),
      metrics_(metrics),
      options_(std::move(options)),
      fetch_(std::move(fetch)),
      expectations_(options_.expectations_timeout, clock_) {}

Reconciler::JobMemory& Reconciler::Memory(const std::string& key) {
  std::lock_guard<std::mutex> lock(memory_mu_);
  return memory_[key];
}

void Reconciler::ForgetMemory(const std::string& key) {
  std::lock_guard<std::mutex> lock(memory_mu_);
  memory_.erase(key);
}

Status Reconciler::DeletePod(const std::string& key, const Json& pod) {
  const std::string name = MetaString(pod, "name");
  kube::DeleteOptions opts;
  // Only ever delete the pod we observed, not a namesake created since.
  opts.precondition_uid = MetaString(pod, "uid");
  expectations_.ExpectDelete(key, name);
  Status st = client_->Delete(kube::kPods, MetaString(pod, "namespace"), name, opts);
  if (st.ok()) return st;
  expectations_.Lower(key, name);
  if (st.code() == StatusCode::kNotFound || st.code() == StatusCode::kAborted) {
    return Status::Ok();  // gone already, or a different pod by now: nothing of ours to delete
  }
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
  bool ours = false;
  for (const auto& ref :
       got->value(Json::json_pointer("/metadata/ownerReferences"), Json::array())) {
    ours = ours || (ref.value("kind", "") == api::kKind && ref.value("name", "") == name &&
                    ref.value("controller", false));
  }
  if (!ours) return Status::Ok();
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
  {
    std::lock_guard<std::mutex> lock(memory_mu_);
    known = memory_.count(key) > 0;
  }
  if (!options_.delete_children || (pods.empty() && !known)) {
    ForgetMemory(key);
    expectations_.Clear(key);
    return ReconcileResult{};
  }
  // The cache may lag behind a job created a moment ago: only the API's word deletes pods.
  auto live = client_->Get(kube::kTrainingJobs, ns, name);
  if (live.ok()) return ReconcileResult{};
  if (live.status().code() != StatusCode::kNotFound) return live.status();
  spdlog::info("job {} is gone: deleting its {} pods, Service and Secret", key, pods.size());
  RETURN_IF_ERROR(DeleteChildren(ns, name, pods));
  ForgetMemory(key);
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
  bool already = status.value("phase", "") == "Failed";
  Json conditions = Json::array();
  if (status.contains("conditions") && status["conditions"].is_array()) {
    for (const auto& c : status["conditions"]) {
      if (c.value("type", "") == "Failed") {
        already =
            already && c.value("reason", "") == "InvalidSpec" && c.value("message", "") == message;
        continue;
      }
      if (c.value("type", "") == "Running" && c.value("status", "") == "True") continue;
      conditions.push_back(c);
    }
  } else {
    already = false;
  }
  if (metrics_ != nullptr) metrics_->SetJobPhase(key, "Failed");
  // Whatever ran under the old spec cannot be planned any more.
  for (const auto& pod : pods) {
    if (!Deleting(pod) && OwnedBy(pod, MetaString(raw, "uid"))) {
      RETURN_IF_ERROR(DeletePod(key, pod));
    }
  }
  if (already) return ReconcileResult{};
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
  return ReconcileResult{};
}

Status Reconciler::EnsureChildren(const api::TrainingJob& job, JobMemory& memory) {
  if (memory.children_ready) return Status::Ok();
  const std::string& ns = job.metadata.ns;
  for (auto [r, obj] : {std::pair{&kube::kSecrets, BuildTokenSecret(job, RandomToken())},
                        std::pair{&kube::kServices, BuildService(job)}}) {
    auto created = client_->Create(*r, ns, obj);
    if (!created.ok() && created.status().code() != StatusCode::kAlreadyExists) {
      return created.status().WithContext("create " + r->plural + " " +
                                          obj["metadata"]["name"].get<std::string>());
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
    // Ours from an earlier attempt: the gang's size may have changed since.
    const Json patch = {{"spec", (*group)["spec"]}};
    created =
        volcano ? client_->Patch(kVolcanoPodGroups, ns, name, patch, kube::PatchType::kMerge)
                : client_->Patch(kCoschedulingPodGroups, ns, name, patch, kube::PatchType::kMerge);
  }
  if (!created.ok()) {
    const std::string api = (*group)["apiVersion"].get<std::string>();
    if (created.status().code() == StatusCode::kNotFound) {
      return FailedPrecondition(
          "runPolicy.podGroup: this cluster does not serve PodGroups of " + api + " (install " +
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
  auto created = client_->Create(kPersistentVolumeClaims, job.metadata.ns, *claim);
  if (!created.ok() && created.status().code() != StatusCode::kAlreadyExists) {
    return created.status().WithContext("create persistentvolumeclaims " +
                                        CheckpointClaimName(job.metadata.name));
  }
  return Status::Ok();
}

Status Reconciler::FailedCreate(const std::string& key, const Json& latest,
                                const api::JobStatus& status, JobMemory& memory,
                                const std::vector<Json>& release, const Status& error,
                                const std::string& what) {
  const std::string& api_message = error.message();
  spdlog::warn("job {}: create {}: {}", key, what, api_message);
  if (events_ != nullptr) {
    events_->Record(latest, "Warning", reconcile::kFailedCreateReason,
                    "Error creating: " + api_message);
  }
  // Nothing of a gang that cannot be whole may hold quota, GPUs or nodes meanwhile.
  for (const auto& pod : release) {
    memory.seen.erase(MetaString(pod, "name"));
    if (!Deleting(pod)) RETURN_IF_ERROR(DeletePod(key, pod));
  }
  memory.failed_creates = std::min(memory.failed_creates + 1, 30);
  Duration delay = options_.create_retry_base;
  for (int i = 1; i < memory.failed_creates && delay < options_.create_retry_max; ++i) delay *= 2;
  delay = std::min(delay, options_.create_retry_max);
  memory.create_retry_at = clock_->SteadyNow() + delay;

  api::JobStatus next = status;
  reconcile::SetJobCondition(&next, reconcile::kReplicaFailureCondition, true,
                             reconcile::kFailedCreateReason, api_message,
                             FormatRfc3339(clock_->Now()));
  if (next != status) {
    Json obj = latest;
    obj["status"] = Json::parse(api::StatusToJson(next));
    auto written = client_->UpdateStatus(kube::kTrainingJobs, MetaString(latest, "namespace"), obj);
    if (written.ok()) {
      expectations_.ExpectJobVersion(key, MetaString(*written, "resourceVersion"));
    } else {
      spdlog::warn("job {}: condition {} not written: {}", key, reconcile::kReplicaFailureCondition,
                   written.status().ToString());
    }
  }
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
      why = "PersistentVolumeClaim " + claim + " is Pending: " +
            (sc.empty() ? std::string("it names no StorageClass and the cluster had no default "
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
  const std::string key = JobKey(ns, name);
  std::optional<Json> cached = cache_->GetJob(ns, name);
  std::vector<Json> pods = cache_->JobPods(ns, name);
  if (!cached) return HandleGone(ns, name, pods);
  const Json& raw = *cached;
  if (Deleting(raw)) return ReconcileResult{};  // the garbage collector takes it from here

  const std::string uid = MetaString(raw, "uid");
  // Pods of another job of the same name (deleted and re-created) are strays.
  std::vector<Json> owned;
  for (auto& pod : pods) {
    if (OwnedBy(pod, uid)) {
      owned.push_back(std::move(pod));
    } else if (!Deleting(pod) && !MetaString(pod, "uid").empty()) {
      RETURN_IF_ERROR(DeletePod(key, pod));
    }
  }

  auto parsed = api::ParseJobJson(raw.dump());
  if (!parsed.ok()) return HandleInvalid(raw, owned, parsed.status());
  const api::TrainingJob& job = *parsed;

  std::vector<ObservedReplica> replicas;
  std::map<std::string, bool> present;
  std::map<std::string, const Json*> pod_by_name;
  for (const auto& pod : owned) {
    replicas.push_back(ObserveReplica(pod));
    present[replicas.back().name] = replicas.back().terminating;
    pod_by_name[replicas.back().name] = &pod;
  }
  if (!expectations_.Satisfied(key, present, job.metadata.resource_version)) {
    return ReconcileResult{options_.expectations_recheck};
  }
  std::map<std::string, std::string> claim_problems;  // one GET per claim and pass
  for (std::size_t i = 0; i < owned.size(); ++i) {
    if (replicas[i].wait_reason == "Unschedulable") {
      ExplainPendingClaims(owned[i], &replicas[i], &claim_problems);
    }
  }

  JobMemory& memory = Memory(key);
  if (memory.uid != uid) memory = JobMemory{uid};
  const int attempt = job.status.attempt;
  if (memory.seen_attempt != attempt || api::IsTerminal(job.status.phase) ||
      job.spec.run_policy.suspend) {
    memory.seen.clear();
    memory.seen_attempt = attempt;
  }
  // A pod of the running gang that vanished without our delete was deleted by someone (a
  // person, a drain, a node controller). The planner alone would re-create just that rank into
  // a gang that has moved on; showing it as failed with reason "Deleted" (retryable) makes the
  // planner restart the whole gang instead. This memory is the controller's own: a pod deleted
  // while no controller was running is simply re-created as a missing rank.
  // A terminating one refreshes what we saw (a pod the taint manager deletes carries
  // DisruptionTarget only while it terminates, and that says its node was lost), but is never
  // added: one we delete ourselves leaves this memory first.
  for (const auto& r : replicas) {
    if (r.attempt != attempt || r.rank < 0) continue;
    if (!r.terminating || memory.seen.contains(r.name)) memory.seen[r.name] = r;
  }
  for (const auto& [seen_name, last] : memory.seen) {
    if (present.count(seen_name)) continue;
    ObservedReplica gone = last;
    gone.phase = ReplicaPhase::kFailed;
    gone.reason = "Deleted";
    gone.exit_code = last.phase == ReplicaPhase::kFailed ? last.exit_code : 0;
    gone.message = "pod " + seen_name + " was deleted while the gang ran";
    gone.terminating = true;  // nothing left to delete
    replicas.push_back(gone);
  }

  // Progress: rank 0's /status, at most every progress_interval.
  std::optional<reconcile::ObservedProgress> progress;
  bool any_running = false;
  for (const auto& r : replicas) {
    any_running = any_running || (r.attempt == attempt && r.phase == ReplicaPhase::kRunning);
  }
  const auto steady_now = clock_->SteadyNow();
  if (auto it = pod_by_name.find(reconcile::ReplicaName(name, attempt, 0));
      it != pod_by_name.end() && steady_now - memory.last_poll >= options_.progress_interval) {
    const Json& pod = *it->second;
    const Json status = pod.value("status", Json::object());
    const std::string ip = status.value("podIP", "");
    if (status.value("phase", "") == "Running" && !ip.empty() && !Deleting(pod)) {
      memory.last_poll = steady_now;
      progress = fetch_(ip, MetricsPort(pod), options_.progress_timeout);
      if (progress && !progress->reachable) {
        spdlog::debug("job {}: rank 0's /status: {}", key, progress->error);
      }
    }
  }

  reconcile::PlanInput in;
  in.job = &job;
  in.replicas = std::move(replicas);
  in.progress = progress;
  in.now = clock_->Now();
  reconcile::Plan plan = reconcile::PlanReconcile(in);
  NoteCheckpointStorage(job, in.now, &plan);

  // A refused gang is created again only after its backoff, whatever woke this pass.
  bool creates = false;
  for (const auto& a : plan.actions) creates = creates || a.kind == Action::Kind::kCreateReplica;
  std::optional<Duration> create_wait;
  if (creates && memory.failed_creates > 0 && steady_now < memory.create_retry_at) {
    create_wait = std::chrono::duration_cast<Duration>(memory.create_retry_at - steady_now);
    std::erase_if(plan.actions,
                  [](const Action& a) { return a.kind == Action::Kind::kCreateReplica; });
  }

  // Status first: a gang restart is on record (attempt+1, restarts) before any pod is deleted,
  // so a crash between the two never loses the failure that caused it.
  Json latest = raw;
  if (plan.status != job.status) {
    Json obj = raw;
    obj["status"] = Json::parse(api::StatusToJson(plan.status));
    auto written = client_->UpdateStatus(kube::kTrainingJobs, ns, obj);
    if (!written.ok()) {
      if (written.status().code() == StatusCode::kNotFound) return ReconcileResult{};
      return written.status().WithContext("update status of " + key);
    }
    expectations_.ExpectJobVersion(key, MetaString(*written, "resourceVersion"));
    latest = *written;
    if (plan.status.phase != job.status.phase) {
      spdlog::info("job {}: {} -> {} (attempt {}, restarts {})", key, job.status.phase,
                   plan.status.phase, plan.status.attempt, plan.status.restarts);
    }
  }
  if (metrics_ != nullptr) {
    metrics_->SetJobPhase(key, plan.status.phase);
    if (plan.status.attempt > job.status.attempt && plan.status.phase == "Restarting") {
      metrics_->IncGangRestarts();
    }
  }
  for (const auto& e : plan.events) {
    if (events_ != nullptr) events_->Record(raw, e.type, e.reason, e.message);
  }

  int created = 0;
  // The pods of this attempt that exist: a gang the API refuses to complete releases them.
  std::vector<Json> gang;
  for (const auto& pod : owned) {
    if (ObserveReplica(pod).attempt == plan.status.attempt) gang.push_back(pod);
  }
  for (const auto& a : plan.actions) {
    switch (a.kind) {
      case Action::Kind::kCreateReplica: {
        if (Status st = EnsureChildren(job, memory); !st.ok()) {
          if (Transient(st)) return st;
          return FailedCreate(key, latest, plan.status, memory, gang, st, "children");
        }
        if (Status st = EnsurePodGroup(job, a.attempt, memory); !st.ok()) {
          if (Transient(st)) return st;
          return FailedCreate(key, latest, plan.status, memory, gang, st, "PodGroup");
        }
        Json pod = BuildPod(job, a.attempt, a.rank, options_.pods);
        expectations_.ExpectCreate(key, a.name);
        auto r = client_->Create(kube::kPods, ns, pod);
        if (!r.ok() && r.status().code() != StatusCode::kAlreadyExists) {
          expectations_.Lower(key, a.name);
          if (Transient(r.status())) return r.status().WithContext("create pod " + a.name);
          return FailedCreate(key, latest, plan.status, memory, gang, r.status(), "pod " + a.name);
        }
        if (r.ok()) {
          gang.push_back(*r);
          ++created;
          if (metrics_ != nullptr) metrics_->IncPodsCreated();
          spdlog::debug("job {}: created pod {} ({})", key, a.name, a.reason);
        }
        break;
      }
      case Action::Kind::kDeleteReplica: {
        memory.seen.erase(a.name);
        auto it = pod_by_name.find(a.name);
        if (it == pod_by_name.end()) break;
        spdlog::debug("job {}: deleting pod {} ({})", key, a.name, a.reason);
        RETURN_IF_ERROR(DeletePod(key, *it->second));
        break;
      }
      case Action::Kind::kOpenGate: {
        auto it = pod_by_name.find(a.name);
        if (it == pod_by_name.end()) break;
        auto patched =
            client_->Patch(kube::kPods, ns, a.name, GangGatePatch(), kube::PatchType::kMerge);
        if (!patched.ok() && patched.status().code() != StatusCode::kNotFound) {
          return patched.status().WithContext("open the gang gate of pod " + a.name);
        }
        spdlog::debug("job {}: opened the gang gate of pod {}", key, a.name);
        break;
      }
      case Action::Kind::kDeleteJob: {
        spdlog::info("job {}: deleting ({})", key, a.reason);
        if (options_.delete_children) RETURN_IF_ERROR(DeleteChildren(ns, name, owned));
        kube::DeleteOptions opts;
        opts.precondition_uid = uid;
        Status st = client_->Delete(kube::kTrainingJobs, ns, name, opts);
        if (!st.ok() && st.code() != StatusCode::kNotFound) return st.WithContext("delete " + key);
        ForgetMemory(key);
        expectations_.Clear(key);
        return ReconcileResult{};
      }
    }
  }

  if (!memory.pods_ready_observed && created > 0 && metrics_ != nullptr) {
    int current = created;
    for (const auto& r : in.replicas) {
      current += r.attempt == plan.status.attempt && !r.terminating ? 1 : 0;
    }
    if (current >= job.spec.replicas) {
      memory.pods_ready_observed = true;
      if (auto t = ParseRfc3339(job.metadata.creation_timestamp)) {
        metrics_->ObservePodsReady(std::chrono::duration<double>(clock_->Now() - *t).count());
      }
    }
  }

  if (creates && !create_wait) memory.failed_creates = 0;

  ReconcileResult result;
  result.requeue_after = Earliest(plan.requeue_after, create_wait);
  if (any_running && !api::IsTerminal(plan.status.phase)) {
    result.requeue_after = Earliest(result.requeue_after, options_.progress_interval);
  }
  return result;
}

}  // namespace ringtrain::op
