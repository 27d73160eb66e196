#include "controller/executors/kubernetes/pod_builder.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <random>
#include <sstream>

#include "common/fnv.h"
#include "common/time_format.h"

namespace ringtrain::op {
namespace {

// The longest gate wait the runner accepts (contract::ParseRankEnv's bound).
constexpr Duration kMaxGangGateWait{std::chrono::hours(24 * 30)};

Json EnvValue(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}

// Lenient readers of the user's template: a field of the wrong type reads as absent (the API
// server refuses such a pod with its own message), never as a JSON exception in the operator.
std::string StringAt(const Json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}
long long IntAt(const Json& obj, const char* key) {
  if (!obj.is_object()) return 0;
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_integer() ? it->get<long long>() : 0;
}
// The array at obj[key], or an empty one when it is absent or of another type.
Json ListAt(const Json& obj, const char* key) {
  if (!obj.is_object()) return Json::array();
  auto it = obj.find(key);
  return it != obj.end() && it->is_array() ? *it : Json::array();
}
// The array at obj[key], made one (replacing a value of another type) so we can append to it.
Json& ArrayAt(Json& obj, const char* key) {
  Json& v = obj[key];
  if (!v.is_array()) v = Json::array();
  return v;
}
// The object at obj[key], made one (replacing a value of another type) so we can write into it.
Json& ObjectAt(Json& obj, const char* key) {
  Json& v = obj[key];
  if (!v.is_object()) v = Json::object();
  return v;
}

// Our env entries replace the user's of the same name; the user's others are kept after ours.
Json MergeEnv(const Json& ours, const Json& theirs) {
  Json out = ours;
  if (!theirs.is_array()) return out;
  for (const auto& e : theirs) {
    bool shadowed = false;
    const std::string name = StringAt(e, "name");
    for (const auto& o : ours) shadowed = shadowed || StringAt(o, "name") == name;
    if (!shadowed) out.push_back(e);
  }
  return out;
}

Json RunnerContainer(const api::TrainingJob& job, int attempt, int rank, const PodOptions& options,
                     const Json& user) {
  const api::JobSpec& spec = job.spec;
  const int gpus = spec.gpus_per_replica > 1 ? spec.gpus_per_replica : 1;
  Json c = user.is_object() ? user : Json::object();
  c["name"] = kContainerName;
  const std::string image = RunnerImage(spec, options);
  c["image"] = image;
  if (!spec.command.empty()) {
    c["command"] = spec.command;
    c.erase("args");
  } else {
    c["command"] = Json::array({options.runner_binary});
    const std::string ckpt =
        spec.checkpoint.path.empty() ? options.default_checkpoint_dir : spec.checkpoint.path;
    c["args"] = api::RunnerArgs(spec, ckpt);
  }
  const std::string master = MasterAddr(job, attempt);
  // With several GPUs per pod the runner starts one rank per GPU (its local launcher): this
  // pod is node `rank` and its ranks are rank×gpus ... rank×gpus+gpus-1.
  const int first_rank = rank * gpus;
  contract::RankEnv rank_env;
  rank_env.job = job.metadata.name;
  rank_env.ns = job.metadata.ns;
  rank_env.rank = first_rank;
  rank_env.node_rank = rank;
  rank_env.local_world_size = gpus;
  rank_env.world_size = spec.world_size();
  rank_env.master_addr = master;
  rank_env.master_port = kMasterPort;
  rank_env.attempt = attempt;
  rank_env.metrics_port = kMetricsPort;
  rank_env.termination_log = "/dev/termination-log";
  rank_env.gang_gate = std::string(kGangGateDir) + "/" + kGangGateFile;
  rank_env.recovery_timeout = api::RecoveryTimeoutFor(spec);
  // Said always, 0 included, as `ringtrain run` says it: left out where no rank recovers in place
  // (GangRestart, a spec.command program, GPU replicas), an image's own ENV of it reached a
  // runner whose lost peer is never replaced alone, and the template's own value (replaced by
  // the operator's) stayed at its own place in the list. The spec hash counts the entry only
  // where earlier operators wrote it (RecoveryEntryHashed), so their pods keep their hash.
  rank_env.say_recovery_timeout = true;
  if (spec.run_policy.scheduling_timeout_seconds > 0) {
    rank_env.gang_gate_timeout =
        std::chrono::seconds(spec.run_policy.scheduling_timeout_seconds) + kGangGateSlack;
  } else if (spec.run_policy.active_deadline_seconds) {
    rank_env.gang_gate_timeout = std::chrono::seconds(*spec.run_policy.active_deadline_seconds);
  }
  rank_env.gang_gate_timeout = std::min<Duration>(rank_env.gang_gate_timeout, kMaxGangGateWait);
  // The runner publishes it with its gang fingerprint: a replacement of another image is
  // refused naming both.
  rank_env.image = image;
  rank_env.launcher = options.launcher_env && !spec.command.empty();
  Json env = Json::array();
  for (const auto& [name, value] : contract::RankEnvVars(rank_env)) {
    env.push_back(EnvValue(name, value));
  }
  // The token from the job's Secret, never in the pod spec; the pod's IP from the kubelet.
  env.push_back(
      {{"name", contract::kEnvToken},
       {"valueFrom",
        {{"secretKeyRef", {{"name", TokenSecretName(job.metadata.name)}, {"key", kTokenKey}}}}}});
  env.push_back(
      {{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}});
  c["env"] = MergeEnv(env, c.contains("env") ? c["env"] : Json::array());
  Json ports = Json::array({{{"name", "rendezvous"}, {"containerPort", kMasterPort}},
                            {{"name", "metrics"}, {"containerPort", kMetricsPort}}});
  // Local rank i serves its metrics on kMetricsPort + i.
  for (int i = 1; i < gpus; ++i) {
    ports.push_back(
        {{"name", "metrics-" + std::to_string(i)}, {"containerPort", kMetricsPort + i}});
  }
  if (c.contains("ports") && c["ports"].is_array()) {
    for (const auto& p : c["ports"]) {
      const long long cp = IntAt(p, "containerPort");
      if (cp != kMasterPort && (cp < kMetricsPort || cp >= kMetricsPort + gpus)) {
        ports.push_back(p);
      }
    }
  }
  c["ports"] = ports;
  if (spec.gpus_per_replica > 0) {
    ObjectAt(ObjectAt(c, "resources"), "limits")["nvidia.com/gpu"] = spec.gpus_per_replica;
  }
  c["terminationMessagePath"] = "/dev/termination-log";
  c["terminationMessagePolicy"] = "FallbackToLogsOnError";
  return c;
}

bool HasKey(const Json& obj, const char* key) { return obj.is_object() && obj.contains(key); }

// Resources of the runner container: the template's runner container wins when it sets any,
// else spec.resources, else the defaults. Keys already set (the GPU limit) are kept.
void ApplyResources(const api::JobSpec& spec, const Json& user_runner, Json* runner) {
  if (HasKey(user_runner, "resources") && user_runner["resources"].is_object()) {
    const Json& r = user_runner["resources"];
    auto non_empty = [&r](const char* k) {
      auto it = r.find(k);
      return it != r.end() && it->is_object() && !it->empty();
    };
    if (non_empty("requests") || non_empty("limits")) {
      return;
    }
  }
  const api::ResourceSpec resources =
      spec.resources.value_or(api::DefaultResources(spec.gpus_per_replica));
  Json& out = ObjectAt(*runner, "resources");
  for (auto [kind, list] :
       {std::pair{"requests", &resources.requests}, {"limits", &resources.limits}}) {
    if (list->empty()) continue;
    Json& target = ObjectAt(out, kind);
    for (const auto& [name, quantity] : *list) {
      if (!target.contains(name)) target[name] = quantity;
    }
  }
}

// The Pod Security Standard "restricted" (runAsNonRoot, seccomp RuntimeDefault, no privilege
// escalation, no capabilities) as defaults for the pod and every container: a field the
// template sets wins, so a user who needs root can say so. fsGroup makes mounted volumes (the
// checkpoint PVC) writable by the runner.
void ApplySecurityDefaults(Json* pod_spec) {
  Json& psc = (*pod_spec)["securityContext"];
  if (!psc.is_object()) psc = Json::object();
  const bool root_requested =
      psc.contains("runAsUser") && psc["runAsUser"].is_number() && psc["runAsUser"] == 0;
  if (!root_requested && !psc.contains("runAsNonRoot")) psc["runAsNonRoot"] = true;
  if (!psc.contains("runAsUser")) psc["runAsUser"] = kRunnerUid;
  if (!psc.contains("runAsGroup")) psc["runAsGroup"] = kRunnerUid;
  if (!psc.contains("fsGroup")) psc["fsGroup"] = kRunnerUid;
  // Only chown a volume whose root is not ours yet: a large checkpoint volume mounts fast.
  if (!psc.contains("fsGroupChangePolicy")) psc["fsGroupChangePolicy"] = "OnRootMismatch";
  if (!psc.contains("seccompProfile")) psc["seccompProfile"] = {{"type", "RuntimeDefault"}};
  if (!pod_spec->contains("automountServiceAccountToken")) {
    (*pod_spec)["automountServiceAccountToken"] = false;  // the runner never calls the API
  }
  // The template's init containers too (native sidecars among them): "restricted" checks them
  // as it checks the others, so one left without these refused the whole pod. A container that
  // asks for what the defaults contradict keeps it: a privileged one, or one adding SYS_ADMIN,
  // gets no allowPrivilegeEscalation: false (the API server refuses the two together), and an
  // init container that runs as root (a chown, a sysctl) keeps root's capabilities.
  const bool pod_root = root_requested;
  for (const char* list : {"containers", "initContainers"}) {
    const auto it = pod_spec->find(list);
    if (it == pod_spec->end() || !it->is_array()) continue;
    const bool init = std::string_view(list) == "initContainers";
    for (auto& c : *it) {
      if (!c.is_object()) continue;  // the API server refuses such a pod with the reason
      Json& csc = c["securityContext"];
      if (!csc.is_object()) csc = Json::object();
      const bool privileged = csc.contains("privileged") && csc["privileged"] == true;
      bool sys_admin = false;
      if (const auto caps = csc.find("capabilities"); caps != csc.end() && caps->is_object()) {
        if (const auto add = caps->find("add"); add != caps->end() && add->is_array()) {
          for (const Json& cap : *add) {
            sys_admin = sys_admin || cap == "SYS_ADMIN" || cap == "CAP_SYS_ADMIN";
          }
        }
      }
      const bool root = csc.contains("runAsUser") ? csc["runAsUser"] == 0 : pod_root;
      if (!csc.contains("allowPrivilegeEscalation") && !privileged && !sys_admin) {
        csc["allowPrivilegeEscalation"] = false;
      }
      if (!csc.contains("capabilities") && !privileged && !(init && root)) {
        csc["capabilities"] = {{"drop", Json::array({"ALL"})}};
      }
    }
  }
}

// The metadata of an object the job owns (Service, Secret, PVC, PodGroup): deleted with it.
Json ChildMetadata(const api::TrainingJob& job, const std::string& name) {
  return {{"name", name},
          {"namespace", job.metadata.ns},
          {"labels", {{kJobLabel, job.metadata.name}}},
          {"ownerReferences", Json::array({OwnerReference(job)})}};
}

// Whether we can add to the pod's volumes and the runner's volumeMounts: absent, or lists (a
// template may hold anything; the API server then refuses the pod with its own reason).
bool VolumeListsUsable(const Json& pod_spec, const Json& runner) {
  for (const auto& [obj, list] : {std::pair{&pod_spec, "volumes"}, {&runner, "volumeMounts"}}) {
    if (obj->contains(list) && !(*obj)[list].is_array()) return false;
  }
  return true;
}

// Rank 0 alone writes checkpoints and reads the newest back on a restart (then broadcasts the
// weights), so the storage is mounted on the pod of rank 0; a ReadWriteMany claim on every pod.
void AddCheckpointVolume(const api::TrainingJob& job, int pod_index, const PodOptions& options,
                         Json* pod_spec, Json* runner) {
  const api::CheckpointSpec& ckpt = job.spec.checkpoint;
  const std::string path = ckpt.path.empty() ? options.default_checkpoint_dir : ckpt.path;
  Json volume = {{"name", kCheckpointVolume}};
  bool mount = pod_index == 0;
  if (ckpt.volume_claim) {
    volume["persistentVolumeClaim"] = {{"claimName", CheckpointClaimName(job.metadata.name)}};
    for (const auto& m : ckpt.volume_claim->access_modes) mount = mount || m == "ReadWriteMany";
  } else if (!ckpt.volume_json.empty()) {
    const Json source = Json::parse(ckpt.volume_json, nullptr, false);
    if (source.is_object()) volume.update(source);
  } else {
    volume["emptyDir"] = Json::object();
  }
  if (!mount) return;
  // Lists of the wrong type come from the template: the API server refuses the pod with the
  // reason, which says more than anything we could add.
  if (!VolumeListsUsable(*pod_spec, *runner)) return;
  // A mount the template already puts at the path is the user's choice.
  for (const auto& m : runner->value("volumeMounts", Json::array())) {
    if (m.is_object() && m.contains("mountPath") && m["mountPath"] == path) return;
  }
  ArrayAt(*pod_spec, "volumes").push_back(volume);
  ArrayAt(*runner, "volumeMounts").push_back({{"name", kCheckpointVolume}, {"mountPath", path}});
}

// The gang gate: the pod annotation kGangPlacedAnnotation as a file the runner reads (empty
// until the operator sets it). The kubelet rewrites downward-API files when annotations change.
bool AddGangGateVolume(Json* pod_spec, Json* runner) {
  if (!VolumeListsUsable(*pod_spec, *runner)) {
    // The API server refuses this pod anyway; never leave a rank waiting on a file that
    // nothing would ever write.
    Json kept = Json::array();
    for (const auto& e : (*runner)["env"]) {
      const std::string name = StringAt(e, "name");
      if (name != contract::kEnvGangGate && name != contract::kEnvGangGateTimeout) {
        kept.push_back(e);
      }
    }
    (*runner)["env"] = kept;
    return false;
  }
  const std::string field = std::string("metadata.annotations['") + kGangPlacedAnnotation + "']";
  ArrayAt(*pod_spec, "volumes")
      .push_back({{"name", kGangGateVolume},
                  {"downwardAPI",
                   {{"items", Json::array({{{"path", kGangGateFile},
                                            {"fieldRef", {{"fieldPath", field}}}}})}}}});
  ArrayAt(*runner, "volumeMounts")
      .push_back({{"name", kGangGateVolume}, {"mountPath", kGangGateDir}, {"readOnly", true}});
  return true;
}

// Why a pending pod is not running, in the cluster's words: a container's waiting reason
// (the kubelet: image pull, config errors) once it is placed, else the scheduler's condition.
void ObserveWait(const Json& status, reconcile::ObservedReplica* r) {
  if (auto cs = status.find("containerStatuses"); cs != status.end() && cs->is_array()) {
    for (const auto& c : *cs) {
      const Json* state = c.is_object() && c.contains("state") ? &c["state"] : nullptr;
      if (state == nullptr || !state->is_object() || !state->contains("waiting")) continue;
      const Json& waiting = (*state)["waiting"];
      const std::string reason = StringAt(waiting, "reason");
      if (reason.empty()) continue;
      r->wait_reason = reason;
      r->wait_message = StringAt(waiting, "message");
      if (r->wait_message.empty())
        r->wait_message = "container " + StringAt(c, "name") + ": " + reason;
      if (StringAt(c, "name") == kContainerName) return;  // the runner's own reason wins
    }
    if (!r->wait_reason.empty()) return;
  }
  if (auto conds = status.find("conditions"); conds != status.end() && conds->is_array()) {
    for (const auto& c : *conds) {
      if (StringAt(c, "type") != "PodScheduled" || StringAt(c, "status") != "False") continue;
      r->wait_reason = StringAt(c, "reason");
      r->wait_message = StringAt(c, "message");
    }
  }
}

// The runner container's status: by name, or the only container of the pod; nullptr while the
// kubelet has not reported it.
const Json* RunnerStatus(const Json& status) {
  auto cs = status.find("containerStatuses");
  if (cs == status.end() || !cs->is_array()) return nullptr;
  for (const auto& c : *cs) {
    if (c.is_object() && (StringAt(c, "name") == kContainerName || cs->size() == 1)) return &c;
  }
  return nullptr;
}

// The runner container's state.terminated; nullptr while it has not ended.
const Json* RunnerTerminated(const Json& status) {
  const Json* runner = RunnerStatus(status);
  if (runner == nullptr) return nullptr;
  auto state = runner->find("state");
  if (state == runner->end() || !state->is_object()) return nullptr;
  auto t = state->find("terminated");
  return t != state->end() && t->is_object() ? &*t : nullptr;
}

// RINGTRAIN_RECOVERY_TIMEOUT_SECONDS as a container's env gives it to its process: the last
// entry of that name (the one that wins), when it holds a plain value the runner takes ("" is
// unset: the runner's default, none); nullopt without an entry, or with a reference (valueFrom)
// or a value the runner refuses to start with.
std::optional<Duration> EnvRecoveryTimeout(const Json& container) {
  const Json env = ListAt(container, "env");
  const Json* last = nullptr;
  for (const auto& e : env) {
    if (e.is_object() && StringAt(e, "name") == contract::kEnvRecoveryTimeout) last = &e;
  }
  if (last == nullptr || last->contains("valueFrom")) return std::nullopt;
  const std::string value = StringAt(*last, "value");
  if (value.empty()) return Duration::zero();
  return api::ParseRecoveryTimeout(value);
}

// Whether a container other than the runner still runs (or waits to run again): a sidecar of
// containerStatuses, or a native sidecar (an init container with restartPolicy Always). A pod
// whose only container has ended reads Running for about a second more, until the kubelet
// writes its terminal phase: that pod does not run anything.
bool OtherContainerRuns(const Json& status) {
  const Json* runner = RunnerStatus(status);
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    auto cs = status.find(list);
    if (cs == status.end() || !cs->is_array()) continue;
    for (const auto& c : *cs) {
      if (!c.is_object() || &c == runner) continue;
      auto state = c.find("state");
      if (state != c.end() && state->is_object() &&
          (state->contains("running") || state->contains("waiting"))) {
        return true;
      }
    }
  }
  return false;
}

// Whether any container of the pod (an init container, the runner, a sidecar) has started: a
// status with a running or terminated state, now or last time.
bool AnyContainerStarted(const Json& status) {
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    auto cs = status.find(list);
    if (cs == status.end() || !cs->is_array()) continue;
    for (const auto& c : *cs) {
      if (!c.is_object()) continue;
      for (const char* when : {"state", "lastState"}) {
        auto state = c.find(when);
        if (state != c.end() && state->is_object() &&
            (state->contains("running") || state->contains("terminated"))) {
          return true;
        }
      }
    }
  }
  return false;
}

// A gang scheduler's PodGroup (label or annotation, and its scheduler unless the spec names
// one) and Kueue's pod group (the job's queue-name label on every pod, the group's name and
// size).
void JoinGroups(const api::TrainingJob& job, Json* meta, Json* spec) {
  const auto& group = job.spec.run_policy.pod_group;
  if (group) {
    const bool volcano = group->type == api::PodGroupType::kVolcano;
    if (volcano) {
      ObjectAt(*meta, "annotations")[kVolcanoGroupAnnotation] = PodGroupName(job.metadata.name);
    } else {
      ObjectAt(*meta, "labels")[kCoschedulingPodGroupLabel] = PodGroupName(job.metadata.name);
    }
    if (job.spec.run_policy.scheduler_name.empty()) {
      (*spec)["schedulerName"] = volcano ? kVolcanoSchedulerName : kCoschedulingSchedulerName;
    }
  }
  const auto queue = job.metadata.labels.find(kKueueQueueLabel);
  if (queue == job.metadata.labels.end() || queue->second.empty()) return;
  Json& labels = ObjectAt(*meta, "labels");
  labels[kKueueQueueLabel] = queue->second;
  labels[kKueueGroupLabel] = job.metadata.name;
  if (auto prio = job.metadata.labels.find(kKueuePriorityClassLabel);
      prio != job.metadata.labels.end()) {
    labels[kKueuePriorityClassLabel] = prio->second;
  }
  ObjectAt(*meta, "annotations")[kKueueGroupCountAnnotation] = std::to_string(job.spec.replicas);
}

// status.avoidedNodes as node affinity on the node's name: NotIn ANDed into every required
// term (the template's terms are ORed, so each must exclude them), and a preferred term for
// the ones no longer required. Lists of the wrong type are left alone: the API server says why.
void AvoidNodes(const api::TrainingJob& job, int attempt, Json* pod_spec) {
  Json required = Json::array();
  Json preferred = Json::array();
  for (const auto& a : job.status.avoided_nodes) {
    (reconcile::IsAvoidanceRequired(a, attempt) ? required : preferred).push_back(a.node);
  }
  if (required.empty() && preferred.empty()) return;
  Json& affinity = ObjectAt(ObjectAt(*pod_spec, "affinity"), "nodeAffinity");
  auto not_in = [](const Json& nodes) {
    return Json{{"key", "metadata.name"}, {"operator", "NotIn"}, {"values", nodes}};
  };
  if (!required.empty()) {
    Json& selector = ObjectAt(affinity, "requiredDuringSchedulingIgnoredDuringExecution");
    Json& terms = ArrayAt(selector, "nodeSelectorTerms");
    if (terms.empty()) terms.push_back(Json::object());
    for (auto& term : terms) {
      if (term.is_object()) ArrayAt(term, "matchFields").push_back(not_in(required));
    }
  }
  if (!preferred.empty()) {
    ArrayAt(affinity, "preferredDuringSchedulingIgnoredDuringExecution")
        .push_back({{"weight", 100}, {"preference", {{"matchFields", {not_in(preferred)}}}}});
  }
}

// The hash of the pod as built (the JSON dump orders object keys). The gang gate's timeout follows
// runPolicy's deadlines and only bounds the wait before the gang runs: an edit of those is no
// change of what a replica runs; nor is the recovery timeout (how long survivors wait for a
// replacement), hashed as the default earlier operators always passed on, so their pods keep
// their hash whatever the template says.
// RINGTRAIN_IMAGE repeats the container's image (hashed there), and pods built before it existed
// must keep their hash. `recovery_entry_hashed` (RecoveryEntryHashed): whether the recovery
// timeout's entry counts at all.
// Operators before session 45 said the recovery timeout only where it was above 0 or the template
// named it; their pods, which have no entry elsewhere, must keep their hash (an upgrade followed
// by any edit restarted such a gang as SpecChanged).
bool RecoveryEntryHashed(const api::JobSpec& spec) {
  return api::RecoveryTimeoutFor(spec) > Duration::zero() ||
         api::TemplateRunnerSetsEnv(spec, contract::kEnvRecoveryTimeout);
}

std::string BuildHash(const Json& meta, const Json& spec, bool recovery_entry_hashed) {
  Json hashed = {{"metadata", meta}, {"spec", spec}};
  for (auto& c : hashed["spec"]["containers"]) {
    if (StringAt(c, "name") != kContainerName || !c.contains("env") || !c["env"].is_array()) {
      continue;
    }
    Json kept = Json::array();
    for (const auto& e : c["env"]) {
      const std::string name = StringAt(e, "name");
      if (name == contract::kEnvGangGateTimeout || name == contract::kEnvImage) continue;
      if (name == contract::kEnvRecoveryTimeout) {
        if (!recovery_entry_hashed) continue;
        // Hashed as the default every earlier operator passed on, whatever the template says.
        Json same = e;
        same["value"] = std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(contract::kRecoveryTimeout).count());
        kept.push_back(std::move(same));
        continue;
      }
      kept.push_back(e);
    }
    c["env"] = kept;
  }
  return Fnv1aHex(hashed.dump());
}

}  // namespace

std::string PodGroupName(const std::string& job) { return job; }

std::optional<Json> BuildPodGroup(const api::TrainingJob& job) {
  const auto& group = job.spec.run_policy.pod_group;
  if (!group) return std::nullopt;
  const bool volcano = group->type == api::PodGroupType::kVolcano;
  Json spec = {{"minMember", job.spec.replicas}};
  const std::int64_t timeout = job.spec.run_policy.scheduling_timeout_seconds;
  if (!volcano && timeout > 0) {
    spec["scheduleTimeoutSeconds"] = std::min<std::int64_t>(timeout, INT32_MAX);
  }
  if (volcano && !group->queue.empty()) spec["queue"] = group->queue;
  return Json{
      {"apiVersion", volcano ? "scheduling.volcano.sh/v1beta1" : "scheduling.x-k8s.io/v1alpha1"},
      {"kind", "PodGroup"},
      {"metadata", ChildMetadata(job, PodGroupName(job.metadata.name))},
      {"spec", spec}};
}

Json GangGatePatch() {
  return {{"metadata", {{"annotations", {{kGangPlacedAnnotation, "true"}}}}}};
}

std::string TokenSecretName(const std::string& job) { return job + "-token"; }
std::string CheckpointClaimName(const std::string& job) { return job + "-checkpoints"; }

bool CheckpointsAreEphemeral(const api::JobSpec& spec) {
  if (spec.checkpoint.volume_claim || !spec.checkpoint.volume_json.empty()) return false;
  // A program of the user's (spec.command) keeps its state where it chooses: none is known lost.
  if (!spec.command.empty()) return false;
  // A volume the template mounts at the checkpoint path (the pod builder then adds none) keeps
  // the checkpoints, unless it is an emptyDir itself.
  const Json tmpl =
      Json::parse(spec.pod_template_json.empty() ? "{}" : spec.pod_template_json, nullptr, false);
  const Json pod_spec = tmpl.is_object() ? tmpl.value("spec", Json::object()) : Json::object();
  if (!pod_spec.is_object()) return true;
  const std::string path =
      spec.checkpoint.path.empty() ? PodOptions{}.default_checkpoint_dir : spec.checkpoint.path;
  std::string volume_name;
  for (const auto& c : ListAt(pod_spec, "containers")) {
    if (StringAt(c, "name") != kContainerName) continue;
    for (const auto& m : ListAt(c, "volumeMounts")) {
      if (StringAt(m, "mountPath") == path) volume_name = StringAt(m, "name");
    }
  }
  if (volume_name.empty()) return true;
  for (const auto& v : ListAt(pod_spec, "volumes")) {
    if (StringAt(v, "name") == volume_name) return v.is_object() && v.contains("emptyDir");
  }
  return true;  // a mount of no volume: the API server refuses the pod
}

std::optional<Json> BuildCheckpointClaim(const api::TrainingJob& job) {
  const auto& claim = job.spec.checkpoint.volume_claim;
  if (!claim) return std::nullopt;
  Json spec = {{"accessModes", claim->access_modes},
               {"resources", {{"requests", {{"storage", claim->size}}}}}};
  // "" given is kept: no class, as Kubernetes reads it, not the default one.
  if (claim->storage_class_name) spec["storageClassName"] = *claim->storage_class_name;
  return Json{{"apiVersion", "v1"},
              {"kind", "PersistentVolumeClaim"},
              {"metadata", ChildMetadata(job, CheckpointClaimName(job.metadata.name))},
              {"spec", spec}};
}
std::string ServiceName(const std::string& job) { return job; }

std::string MasterAddr(const api::TrainingJob& job, int attempt) {
  return reconcile::ReplicaName(job.metadata.name, attempt, 0) + "." +
         ServiceName(job.metadata.name) + "." + job.metadata.ns + ".svc";
}

Json OwnerReference(const api::TrainingJob& job) {
  return {{"apiVersion", api::kApiVersion}, {"kind", api::kKind}, {"name", job.metadata.name},
          {"uid", job.metadata.uid},        {"controller", true}, {"blockOwnerDeletion", true}};
}

namespace {

// The pod of that attempt and rank, without its spec-hash stamp and node avoidance.
void BuildPodUnstamped(const api::TrainingJob& job, int attempt, int rank,
                       const PodOptions& options, Json* pod_meta_out, Json* spec_out);

}  // namespace

Json BuildPod(const api::TrainingJob& job, int attempt, int rank, const PodOptions& options) {
  Json pod_meta, spec;
  BuildPodUnstamped(job, attempt, rank, options, &pod_meta, &spec);
  PodHashes hashes = PodSpecHashes(job, attempt, rank);
  pod_meta["annotations"][kSpecHashAnnotation] = std::move(hashes.spec);
  pod_meta["annotations"][kRunHashAnnotation] = std::move(hashes.run);
  pod_meta["annotations"][kSpecGenerationAnnotation] = std::to_string(job.metadata.generation);
  pod_meta["annotations"][kOptionsHashAnnotation] = PodOptionsHash(job, options);
  AvoidNodes(job, attempt, &spec);
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", pod_meta}, {"spec", spec}};
}

// What the spec alone makes of the pod: built with neutral operator options, so an operator
// upgrade (a new default runner image, another binary path) changes no job's hash, then or at
// its next edit.
PodHashes PodSpecHashes(const api::TrainingJob& job, int attempt, int rank) {
  // Built without the launcher's settings (PodOptions::launcher_env), as earlier operators built
  // it: what decides them (the world, the node rank, the master) is hashed anyway.
  static const PodOptions kNeutral{"ringtrain.dev/default-runner", "ringtrain-runner", "/ckpt",
                                   /*launcher_env=*/false};
  Json pod_meta, spec;
  BuildPodUnstamped(job, attempt, rank, kNeutral, &pod_meta, &spec);
  const bool recovery_entry = RecoveryEntryHashed(job.spec);
  PodHashes hashes;
  hashes.spec = BuildHash(pod_meta, spec, recovery_entry);
  pod_meta.erase("labels");
  hashes.run = BuildHash(pod_meta, spec, recovery_entry);
  return hashes;
}

std::string PodSpecHash(const api::TrainingJob& job, int attempt, int rank) {
  return PodSpecHashes(job, attempt, rank).spec;
}

std::string RunnerImage(const api::JobSpec& spec, const PodOptions& options) {
  if (!options.runner_image.empty() && spec.image == api::JobSpec{}.image) {
    return options.runner_image;
  }
  return spec.image;
}

// What the pod gets where the options may decide it: the runner image, command and checkpoint
// directory in effect. A spec that names one of them gets it from the spec whatever the options
// say, so an upgrade that changes that option stamps its pods as before, and an edit that names
// the value the options gave (`checkpoint.path: /ckpt`) changes no stamp either.
std::string PodOptionsHash(const api::TrainingJob& job, const PodOptions& options) {
  const api::JobSpec& spec = job.spec;
  const Json used = {
      {"image", RunnerImage(spec, options)},
      {"command",
       spec.command.empty() ? std::vector<std::string>{options.runner_binary} : spec.command},
      {"checkpointDir",
       spec.checkpoint.path.empty() ? options.default_checkpoint_dir : spec.checkpoint.path}};
  return Fnv1aHex(used.dump());
}

namespace {

void BuildPodUnstamped(const api::TrainingJob& job, int attempt, int rank,
                       const PodOptions& options, Json* pod_meta_out, Json* spec_out) {
  Json tmpl = Json::object();
  if (!job.spec.pod_template_json.empty()) {
    tmpl = Json::parse(job.spec.pod_template_json, nullptr, false);
    if (tmpl.is_discarded() || !tmpl.is_object()) tmpl = Json::object();
  }
  Json meta = tmpl.value("metadata", Json::object());
  if (!meta.is_object()) meta = Json::object();
  Json spec = tmpl.value("spec", Json::object());
  if (!spec.is_object()) spec = Json::object();

  const std::string name = reconcile::ReplicaName(job.metadata.name, attempt, rank);
  Json pod_meta = {{"name", name}, {"namespace", job.metadata.ns}};
  Json labels = meta.value("labels", Json::object());
  if (!labels.is_object()) labels = Json::object();
  labels[kJobLabel] = job.metadata.name;
  labels[kRankLabel] = std::to_string(rank);
  labels[kAttemptLabel] = std::to_string(attempt);
  labels[kWorldSizeLabel] = std::to_string(job.spec.world_size());
  labels[kNprocLabel] = std::to_string(std::max(1, job.spec.gpus_per_replica));
  pod_meta["labels"] = labels;
  Json annotations = meta.value("annotations", Json::object());
  if (!annotations.is_object()) annotations = Json::object();
  annotations[kMetricsPortAnnotation] = std::to_string(kMetricsPort);
  annotations.erase(kGangPlacedAnnotation);  // only the operator opens the gate
  pod_meta["annotations"] = annotations;
  pod_meta["ownerReferences"] = Json::array({OwnerReference(job)});

  Json user_runner;
  Json others = Json::array();
  if (spec.contains("containers") && spec["containers"].is_array()) {
    for (const auto& c : spec["containers"]) {
      if (StringAt(c, "name") == kContainerName) {
        user_runner = c;
      } else {
        others.push_back(c);
      }
    }
  }
  Json runner = RunnerContainer(job, attempt, rank, options, user_runner);
  ApplyResources(job.spec, user_runner, &runner);
  AddCheckpointVolume(job, rank, options, &spec, &runner);
  if (AddGangGateVolume(&spec, &runner)) {
    pod_meta["annotations"][kGangGateAnnotation] = std::string(kGangGateDir) + "/" + kGangGateFile;
  }
  Json containers = Json::array({std::move(runner)});
  for (auto& c : others) containers.push_back(std::move(c));
  spec["containers"] = containers;
  ApplySecurityDefaults(&spec);
  spec["restartPolicy"] = "Never";
  // A SIGTERM is a handshake: the gang stops after an agreed step and rank 0 checkpoints.
  if (!spec.contains("terminationGracePeriodSeconds")) {
    spec["terminationGracePeriodSeconds"] =
        std::chrono::duration_cast<std::chrono::seconds>(contract::kTerminationGracePeriod).count();
  }
  spec["hostname"] = name;
  spec["subdomain"] = ServiceName(job.metadata.name);
  if (!job.spec.run_policy.scheduler_name.empty()) {
    spec["schedulerName"] = job.spec.run_policy.scheduler_name;
  }
  JoinGroups(job, &pod_meta, &spec);
  *pod_meta_out = std::move(pod_meta);
  *spec_out = std::move(spec);
}

}  // namespace

Json BuildService(const api::TrainingJob& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", ChildMetadata(job, ServiceName(job.metadata.name))},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", {{kJobLabel, job.metadata.name}}},
            {"ports", Json::array({{{"name", "rendezvous"},
                                    {"port", kMasterPort},
                                    {"targetPort", kMasterPort},
                                    {"protocol", "TCP"}}})}}}};
}

Json BuildTokenSecret(const api::TrainingJob& job, const std::string& token) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", ChildMetadata(job, TokenSecretName(job.metadata.name))},
          {"type", "Opaque"},
          {"stringData", {{kTokenKey, token}}}};
}

const Json* ControllerRef(const Json& object) {
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return nullptr;
  auto refs = m->find("ownerReferences");
  if (refs == m->end() || !refs->is_array()) return nullptr;
  for (const auto& ref : *refs) {
    if (!ref.is_object()) continue;
    auto c = ref.find("controller");
    if (c != ref.end() && c->is_boolean() && c->get<bool>()) return &ref;
  }
  return nullptr;
}

bool OwnedBy(const Json& object, const std::string& uid) {
  const Json* ref = ControllerRef(object);
  return ref != nullptr && StringAt(*ref, "uid") == uid;
}

reconcile::ObservedReplica ObserveReplica(const Json& pod) {
  using reconcile::ReplicaPhase;
  reconcile::ObservedReplica r;
  const Json meta = pod.value("metadata", Json::object());
  r.name = meta.value("name", "");
  r.terminating = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  if (r.terminating && meta["deletionTimestamp"].is_string()) {
    r.deletion_deadline = ParseRfc3339(meta["deletionTimestamp"].get<std::string>());
    const auto grace = meta.find("deletionGracePeriodSeconds");
    r.deletion_forced = grace != meta.end() && grace->is_number_integer() && *grace == 0;
  }
  const Json labels = meta.value("labels", Json::object());
  auto label_int = [&](const char* key) {
    auto it = labels.find(key);
    if (it == labels.end() || !it->is_string()) return -1;
    const std::string s = it->get<std::string>();
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) {
      return -1;
    }
    return std::stoi(s);
  };
  r.rank = label_int(kRankLabel);
  r.attempt = label_int(kAttemptLabel);
  if (r.attempt < 0) r.rank = -1;

  const Json status = pod.value("status", Json::object());
  const std::string phase = status.value("phase", "Pending");
  if (phase == "Running" || phase == "Unknown") {
    r.phase = ReplicaPhase::kRunning;
  } else if (phase == "Succeeded") {
    r.phase = ReplicaPhase::kSucceeded;
  } else if (phase == "Failed") {
    r.phase = ReplicaPhase::kFailed;
  }
  if (auto conds = status.find("conditions"); conds != status.end() && conds->is_array()) {
    for (const auto& c : *conds) {
      if (StringAt(c, "type") == "DisruptionTarget" && StringAt(c, "status") == "True") {
        r.disruption = true;
        r.disruption_reason = StringAt(c, "reason");
      }
    }
  }
  const Json* terminated = RunnerTerminated(status);
  // restartPolicy Never: a terminated runner has ended the replica, whatever the phase of a pod
  // that another container (a sidecar: istio-proxy, one of spec.template's) keeps running. A
  // success waits for the pod's own phase while the pod is being stopped (deleted, disrupted, or
  // given a pod-level reason such as the kubelet's Evicted, which is written before the
  // containers are killed where DisruptionTarget is not): a program that exits 0 on SIGTERM has
  // not finished its work.
  const bool stopped_from_outside =
      r.terminating || r.disruption || !StringAt(status, "reason").empty();
  if (terminated != nullptr && r.phase == ReplicaPhase::kRunning) {
    if (IntAt(*terminated, "exitCode") != 0) {
      r.phase = ReplicaPhase::kFailed;
      r.pod_running = OtherContainerRuns(status);
    } else if (!stopped_from_outside) {
      r.phase = ReplicaPhase::kSucceeded;
      r.pod_running = OtherContainerRuns(status);
    }
  }
  // The pod failed for another container's exit (a sidecar that crashed after the runner had
  // finished): the runner's own success stands, as it did while the sidecar still ran. Not when
  // the pod was stopped from outside (a pod-level reason such as Evicted, a deletion, a
  // disruption), where an exit 0 may be a program's answer to SIGTERM.
  if (terminated != nullptr && r.phase == ReplicaPhase::kFailed && !r.pod_running &&
      terminated->contains("exitCode") && IntAt(*terminated, "exitCode") == 0 &&
      !stopped_from_outside) {
    r.phase = ReplicaPhase::kSucceeded;
  }
  const Json pod_spec = pod.value("spec", Json::object());
  r.node = StringAt(pod_spec, "nodeName");
  const Json containers = ListAt(pod_spec, "containers");
  for (const auto& c : containers) {
    if (StringAt(c, "name") == kContainerName || containers.size() == 1) {
      r.image = StringAt(c, "image");
      r.recovery_timeout = EnvRecoveryTimeout(c);
    }
  }
  if (const auto ann = meta.find("annotations"); ann != meta.end() && ann->is_object()) {
    r.gated = ann->contains(kGangGateAnnotation) && !ann->contains(kGangPlacedAnnotation);
    r.spec_hash = StringAt(*ann, kSpecHashAnnotation);
    r.run_hash = StringAt(*ann, kRunHashAnnotation);
    r.options_hash = StringAt(*ann, kOptionsHashAnnotation);
    r.deleted_by_executor = ann->contains(kDeletedByOperatorAnnotation);
    const std::string generation = StringAt(*ann, kSpecGenerationAnnotation);
    if (!generation.empty() && generation.size() <= 18 &&
        generation.find_first_not_of("0123456789") == std::string::npos) {
      r.spec_generation = std::stoll(generation);
    }
  }
  if (r.phase == ReplicaPhase::kPending) ObserveWait(status, &r);
  if (r.phase == ReplicaPhase::kPending && r.wait_reason.empty() && r.node.empty()) {
    // No scheduler has looked at it yet: a gang scheduler that is not installed looks like this.
    const std::string scheduler = StringAt(pod_spec, "schedulerName");
    r.wait_message = "not placed by " +
                     (scheduler.empty() ? std::string("the scheduler") : "scheduler " + scheduler) +
                     " yet";
  }
  if (r.wait_reason == "SchedulingGated") {
    const Json labels_or_none = meta.value("labels", Json::object());
    if (const std::string queue = StringAt(labels_or_none, kKueueQueueLabel); !queue.empty()) {
      r.wait_message = "queued in Kueue (LocalQueue " + queue + "): the pods stay gated (" +
                       kKueueAdmissionGate + ") until Kueue admits the whole group";
    }
  }
  // The world the pod was started into: a resize is told from these (the cache drops specs).
  r.world_size = std::max(0, label_int(kWorldSizeLabel));
  r.nproc_per_node = std::max(0, label_int(kNprocLabel));
  const bool ended = r.phase == ReplicaPhase::kFailed || r.phase == ReplicaPhase::kSucceeded;
  if (ended) {
    if (r.phase == ReplicaPhase::kFailed) {
      r.reason = StringAt(status, "reason");
      r.message = StringAt(status, "message");
      // The kubelet's admission refused it ("Pod was rejected: ..."), or the node stopped it
      // before it started: no exit code of the job's to read.
      r.never_ran = !AnyContainerStarted(status);
    }
    if (terminated != nullptr) {
      const Json& term = *terminated;
      r.exit_code = static_cast<int>(IntAt(term, "exitCode"));
      // The pod-level reason (Evicted, NodeLost) says more than the container's "Error".
      if (r.reason.empty() && r.phase == ReplicaPhase::kFailed) r.reason = StringAt(term, "reason");
      std::string msg = StringAt(term, "message");
      while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
      if (!msg.empty()) r.message = msg;
      if (const std::string f = StringAt(term, "finishedAt"); !f.empty()) {
        r.finished_at = ParseRfc3339(f);
      }
    }
  }
  return r;
}

Json TrimPodForCache(const Json& pod) {
  Json out = Json::object();
  if (auto m = pod.find("metadata"); m != pod.end() && m->is_object()) {
    Json& meta = out["metadata"] = Json::object();
    for (const char* k : {"name", "namespace", "uid", "resourceVersion", "labels", "annotations",
                          "ownerReferences", "deletionTimestamp"}) {
      if (auto it = m->find(k); it != m->end()) meta[k] = *it;
    }
  }
  if (auto sp = pod.find("spec"); sp != pod.end() && sp->is_object()) {
    // Where it runs and who places it, and the claims it waits on (ExplainPendingClaims).
    Json& spec = out["spec"] = Json::object();
    for (const char* k : {"nodeName", "schedulerName"}) {
      if (auto it = sp->find(k); it != sp->end()) spec[k] = *it;
    }
    if (auto vols = sp->find("volumes"); vols != sp->end() && vols->is_array()) {
      Json claims = Json::array();
      for (const auto& v : *vols) {
        if (v.is_object() && v.contains("persistentVolumeClaim")) {
          claims.push_back({{"persistentVolumeClaim", v["persistentVolumeClaim"]}});
        }
      }
      if (!claims.empty()) spec["volumes"] = claims;
    }
    // Each container's image: a pod without the options stamp (an older operator's) is told
    // built differently by its runner image; and its recovery timeout, which an edit of the
    // spec does not change in a running pod.
    if (auto cs = sp->find("containers"); cs != sp->end() && cs->is_array()) {
      Json& list = spec["containers"] = Json::array();
      for (const auto& c : *cs) {
        Json kept = Json::object();
        for (const char* k : {"name", "image"}) {
          if (c.is_object() && c.contains(k) && c[k].is_string()) kept[k] = c[k];
        }
        if (c.is_object() && c.contains("env") && c["env"].is_array()) {
          Json env = Json::array();
          for (const auto& e : c["env"]) {
            if (e.is_object() && StringAt(e, "name") == contract::kEnvRecoveryTimeout) {
              env.push_back(e);
            }
          }
          if (!env.empty()) kept["env"] = std::move(env);
        }
        list.push_back(std::move(kept));
      }
    }
  }
  if (auto st = pod.find("status"); st != pod.end() && st->is_object()) {
    Json& status = out["status"] = Json::object();
    for (const char* k : {"phase", "podIP", "reason", "message", "conditions"}) {
      if (auto it = st->find(k); it != st->end()) status[k] = *it;
    }
    if (auto cs = st->find("containerStatuses"); cs != st->end() && cs->is_array()) {
      Json& list = status["containerStatuses"] = Json::array();
      for (const auto& c : *cs) {
        list.push_back({{"name", c.value("name", "")}, {"state", c.value("state", Json())}});
      }
    }
  }
  return out;
}

}  // namespace ringtrain::op
