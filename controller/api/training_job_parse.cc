// The TrainingJob schema: reading and validating a manifest or an API object into the types of
// training_job.h, every error naming the field path.
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/fnv.h"
#include "common/json_fields.h"
#include "common/runner_flags.h"
#include "common/yaml_to_json.h"
#include "controller/api/training_job.h"

namespace ringtrain::api {
namespace {

using nlohmann::json;

// A closed set read at the edge: the manifest's name becomes the enum (contract::EnumNames).
template <typename E>
Status ReadEnum(Fields& f, const std::string& key, E* out) {
  std::string name(contract::NameOf(*out));
  RETURN_IF_ERROR(f.Enum(key, contract::NamesOf<E>(), &name));
  *out = *contract::EnumFromName<E>(name);
  return Status::Ok();
}

// spec.train.model: a preset's name, or a layer list (an object) kept as JSON until its input
// is known (ParseTrain, ResolveModel).
Status ParseModel(Fields& f, TrainSpec* t) {
  const json* model = f.Find("model");
  if (model != nullptr && model->is_object()) {
    t->model.clear();
    t->model_json = model->dump();
    return Status::Ok();
  }
  if (model != nullptr && !model->is_string()) {
    std::string presets;
    for (const auto& n : contract::ModelNames()) presets += (presets.empty() ? "" : ", ") + n;
    return InvalidArgument(f.Path("model") + ": must be a preset name (" + presets +
                           ") or a layer list (an object with input, layers, loss), got " +
                           JsonTypeName(*model) + " " + QuoteJson(*model));
  }
  const auto& names = contract::ModelNames();
  if (model != nullptr &&
      std::find(names.begin(), names.end(), model->get<std::string>()) == names.end()) {
    // A layer list as a JSON string, or a path to one (review): written as YAML it is taken.
    std::string presets;
    for (const auto& n : names) presets += (presets.empty() ? "" : ", ") + n;
    return InvalidArgument(f.Path("model") + ": must be a preset name (" + presets +
                           ") or a layer list written in the manifest (an object: {input: [...], "
                           "layers: [...], loss: ...}; not a string of JSON, nor a file), got " +
                           QuoteJson(*model));
  }
  return f.Enum("model", names, &t->model);
}

// `strict`: an object of the API server, which the operator must check without reading the
// dataset, so a layer list needs its input from the manifest. Else (a local manifest) a list
// without one stays unresolved: `ringtrain run`/`validate` read it from the dataset's files.
Status ParseTrain(const json& j, TrainSpec* t, bool strict) {
  Fields f(j, "spec.train");
  RETURN_IF_ERROR(ParseModel(f, t));
  if (const json* dataset = f.Find("dataset"); dataset != nullptr && dataset->is_object()) {
    ASSIGN_OR_RETURN(t->dataset_spec, data::ParseDatasetSpec(dataset->dump(), f.Path("dataset")));
    t->dataset.clear();
  } else if (dataset != nullptr && !dataset->is_string()) {
    return InvalidArgument(f.Path("dataset") +
                           ": must be an IDX directory or a dataset object (format, train, ...), "
                           "got " +
                           JsonTypeName(*dataset) + " " + QuoteJson(*dataset));
  } else {
    RETURN_IF_ERROR(f.String("dataset", &t->dataset));
    if (t->dataset.empty()) return InvalidArgument("spec.train.dataset: must not be empty");
    // A string is a directory of IDX files: one that names a table's file was read as such, and
    // the first word of it was a model "of 10 classes" or "not a directory" (review).
    const std::string& d = t->dataset;
    const bool npy = d.ends_with(".npy");
    if (npy || d.ends_with(".csv") || d.ends_with(".csv.gz") || d.ends_with(".tsv") ||
        d.ends_with(".tsv.gz")) {
      return InvalidArgument(
          "spec.train.dataset: " + QuoteJson(json(d)) +
          ": a string names a directory of IDX files (Fashion-MNIST's); for a " +
          (npy ? "NPY file write the dataset as an object: {format: npy, trainX: " + d +
                     ", trainY: ...}"
               : "CSV file write the dataset as an object: {format: csv, train: " + d +
                     ", label: <column>}"));
    }
  }
  RETURN_IF_ERROR(f.Int("epochs", 1, 100000, &t->epochs));
  RETURN_IF_ERROR(f.Int("batchSizePerReplica", 1, 65536, &t->batch_size_per_replica));
  RETURN_IF_ERROR(f.Enum("optimizer", contract::OptimizerNames(), &t->optimizer));
  RETURN_IF_ERROR(f.Number("learningRate", 0, true, &t->learning_rate));
  RETURN_IF_ERROR(f.Number("momentum", 0, false, &t->momentum));
  // SGD's momentum is in [0, 1), as the runner's optimizer checks it (1 never forgets a
  // gradient; beyond, the steps grow without bound); adam ignores it.
  if (t->optimizer == "sgd" && t->momentum >= 1) {
    return InvalidArgument(f.Path("momentum") + ": must be less than 1 (optimizer sgd), got " +
                           QuoteJson(json(t->momentum)));
  }
  RETURN_IF_ERROR(f.Number("weightDecay", 0, false, &t->weight_decay));
  RETURN_IF_ERROR(ReadEnum(f, "lrScaling", &t->lr_scaling));
  RETURN_IF_ERROR(f.Number("warmupEpochs", 0, false, &t->warmup_epochs));
  RETURN_IF_ERROR(ReadEnum(f, "lrSchedule", &t->lr_schedule));
  RETURN_IF_ERROR(f.Int("seed", 0, INT64_MAX, &t->seed));
  RETURN_IF_ERROR(f.NoUnknown());
  const DataShape declared = DeclaredDataShape(*t);
  bool has_input = false;
  if (!t->model_json.empty()) {
    const json doc = json::parse(t->model_json);
    has_input = doc.contains("input") && !doc["input"].is_null();
  }
  // A preset is checked against the declared task (a regression needs a layer list); a layer
  // list once its input is known.
  if (t->model_json.empty() || strict || has_input || declared.input) {
    RETURN_IF_ERROR(ResolveModel(t, declared).status());
  }
  return Status::Ok();
}

// Each duration at most kMaxPolicySeconds, as the CRD says for new writes: a time point past it
// overflows. The two the CRD did not bound before (activeDeadlineSeconds,
// ttlSecondsAfterFinished) are capped, not refused: a job stored with
// "activeDeadlineSeconds: 999999999" (no deadline) must not fail when the operator is upgraded
// (the planner's arithmetic saturates as well).
Status CappedSeconds(Fields& f, const std::string& key, std::int64_t min,
                     std::optional<std::int64_t>* out) {
  RETURN_IF_ERROR(f.OptInt(key, min, std::numeric_limits<std::int64_t>::max(), out));
  if (out->has_value()) **out = std::min(**out, kMaxPolicySeconds);
  return Status::Ok();
}

Status ParseRunPolicy(const json& j, RunPolicy* p) {
  Fields f(j, "spec.runPolicy");
  RETURN_IF_ERROR(f.Int("backoffLimit", 0, 1000, &p->backoff_limit));
  RETURN_IF_ERROR(CappedSeconds(f, "activeDeadlineSeconds", 1, &p->active_deadline_seconds));
  RETURN_IF_ERROR(CappedSeconds(f, "ttlSecondsAfterFinished", 0, &p->ttl_seconds_after_finished));
  RETURN_IF_ERROR(ReadEnum(f, "cleanPodPolicy", &p->clean_pod_policy));
  RETURN_IF_ERROR(f.Bool("suspend", &p->suspend));
  RETURN_IF_ERROR(f.String("schedulerName", &p->scheduler_name));
  RETURN_IF_ERROR(
      f.Int("progressDeadlineSeconds", 0, kMaxPolicySeconds, &p->progress_deadline_seconds));
  RETURN_IF_ERROR(
      f.Int("schedulingTimeoutSeconds", 0, kMaxPolicySeconds, &p->scheduling_timeout_seconds));
  RETURN_IF_ERROR(f.Enum("recovery", {"InPlace", "GangRestart"}, &p->recovery));
  RETURN_IF_ERROR(f.Enum("restartPolicy", {"ExitCode", "OnFailure"}, &p->restart_policy));
  ASSIGN_OR_RETURN(const json* group, f.Object("podGroup"));
  if (group != nullptr) {
    Fields g(*group, "spec.runPolicy.podGroup");
    PodGroupSpec out;
    if (g.Find("type") == nullptr) return InvalidArgument(g.Path("type") + ": required");
    RETURN_IF_ERROR(ReadEnum(g, "type", &out.type));
    RETURN_IF_ERROR(g.String("queue", &out.queue));
    if (!out.queue.empty() && out.type != PodGroupType::kVolcano) {
      return InvalidArgument(g.Path("queue") + ": only a volcano PodGroup has a queue");
    }
    RETURN_IF_ERROR(g.NoUnknown());
    p->pod_group = std::move(out);
  }
  return f.NoUnknown();
}

// A Kubernetes quantity: a decimal number with an optional suffix (m, k, Ki, M, Mi, ..., e3).
bool IsQuantity(const std::string& q) {
  static const std::set<std::string> kSuffixes = {"",  "m",  "k",  "M",  "G",  "T",  "P",
                                                  "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  std::size_t i = 0;
  if (i < q.size() && (q[i] == '+' || q[i] == '-')) ++i;
  const std::size_t digits_start = i;
  while (i < q.size() && ((q[i] >= '0' && q[i] <= '9') || q[i] == '.')) ++i;
  if (i == digits_start) return false;
  const std::string suffix = q.substr(i);
  if (kSuffixes.count(suffix) > 0) return true;
  if ((suffix[0] == 'e' || suffix[0] == 'E') && suffix.size() > 1) {
    return suffix.find_first_not_of("0123456789", 1) == std::string::npos;
  }
  return false;
}

// A quantity IsQuantity accepts as digits × 10^decimal × 2^binary, exactly.
__extension__ using Wide = unsigned __int128;
struct ExactQuantity {
  Wide digits = 0;
  int decimal = 0;
  int binary = 0;
};
std::optional<ExactQuantity> Exact(const std::string& q) {
  ExactQuantity e;
  std::size_t i = q.empty() || q[0] != '+' ? 0 : 1;
  bool fraction = false;
  for (; i < q.size() && ((q[i] >= '0' && q[i] <= '9') || q[i] == '.'); ++i) {
    if (q[i] == '.') {
      fraction = true;
      continue;
    }
    if (e.digits > (~Wide{0}) / 20) return std::nullopt;  // more digits than anyone writes
    e.digits = e.digits * 10 + static_cast<unsigned>(q[i] - '0');
    if (fraction) --e.decimal;
  }
  static const std::map<std::string, std::pair<int, int>> kScale = {
      {"", {0, 0}},    {"m", {-3, 0}},  {"k", {3, 0}},   {"M", {6, 0}},   {"G", {9, 0}},
      {"T", {12, 0}},  {"P", {15, 0}},  {"E", {18, 0}},  {"Ki", {0, 10}}, {"Mi", {0, 20}},
      {"Gi", {0, 30}}, {"Ti", {0, 40}}, {"Pi", {0, 50}}, {"Ei", {0, 60}}};
  const std::string suffix = q.substr(i);
  if (const auto it = kScale.find(suffix); it != kScale.end()) {
    e.decimal += it->second.first;
    e.binary = it->second.second;
  } else if (suffix.size() > 1 && suffix.size() < 5) {  // e<N>: IsQuantity checked the digits
    e.decimal += std::stoi(suffix.substr(1));
  } else {
    return std::nullopt;
  }
  return e;
}

// Whether quantity `a` is more than `b`, compared exactly (1000m is 1, 0.5 is 500m); false
// where either is beyond exact reach (then the API server says).
bool QuantityAbove(const std::string& a, const std::string& b) {
  std::optional<ExactQuantity> x = Exact(a);
  std::optional<ExactQuantity> y = Exact(b);
  if (!x || !y) return false;
  // Both scaled to the smaller exponents, in the wide integer; out of range: not compared.
  auto scale = [](ExactQuantity* q, int decimal, int binary) {
    for (int k = q->decimal; k > decimal; --k) {
      if (q->digits > (~Wide{0}) / 10) return false;
      q->digits *= 10;
    }
    for (int k = q->binary; k > binary; --k) {
      if (q->digits > (~Wide{0}) / 2) return false;
      q->digits *= 2;
    }
    return true;
  };
  const int decimal = std::min(x->decimal, y->decimal);
  const int binary = std::min(x->binary, y->binary);
  if (!scale(&*x, decimal, binary) || !scale(&*y, decimal, binary)) return false;
  return x->digits > y->digits;
}

Status ParseQuantity(const json& v, const std::string& path, std::string* out) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    *out = std::to_string(v.get<std::int64_t>());
  } else if (v.is_string()) {
    *out = v.get<std::string>();
  } else {
    return InvalidArgument(path + ": must be a quantity (e.g. 1Gi, 500m), got " + JsonTypeName(v) +
                           " " + QuoteJson(v));
  }
  if (!IsQuantity(*out) || (*out)[0] == '-') {
    return InvalidArgument(path + ": must be a non-negative quantity (e.g. 1Gi, 500m), got " +
                           QuoteJson(v));
  }
  return Status::Ok();
}

Status ParseQuantities(const json& obj, const std::string& path,
                       std::map<std::string, std::string>* out) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    RETURN_IF_ERROR(ParseQuantity(*it, path + "." + it.key(), &(*out)[it.key()]));
  }
  return Status::Ok();
}

Status ParseCheckpoint(const json& j, CheckpointSpec* c) {
  Fields f(j, "spec.checkpoint");
  RETURN_IF_ERROR(f.String("path", &c->path));
  RETURN_IF_ERROR(f.Int("everySteps", 1, INT64_MAX, &c->every_steps));
  if (!c->path.empty() && c->path.front() != '/') {
    return InvalidArgument("spec.checkpoint.path: must be an absolute path, got \"" + c->path +
                           "\"");
  }
  ASSIGN_OR_RETURN(const json* claim, f.Object("volumeClaim"));
  if (claim != nullptr) {
    Fields v(*claim, "spec.checkpoint.volumeClaim");
    CheckpointVolumeClaim out;
    if (const json* size = v.Find("size"); size != nullptr) {
      RETURN_IF_ERROR(ParseQuantity(*size, v.Path("size"), &out.size));
    }
    if (v.Find("storageClassName") != nullptr) {
      std::string sc;
      RETURN_IF_ERROR(v.String("storageClassName", &sc));
      out.storage_class_name = std::move(sc);
    }
    if (const json* modes = v.Find("accessModes"); modes != nullptr) {
      if (!modes->is_array() || modes->empty()) {
        return InvalidArgument(v.Path("accessModes") + ": must be a non-empty list");
      }
      out.access_modes.clear();
      for (std::size_t i = 0; i < modes->size(); ++i) {
        const json& m = (*modes)[i];
        const std::string path = v.Path("accessModes") + "[" + std::to_string(i) + "]";
        if (!m.is_string() ||
            (m != "ReadWriteOnce" && m != "ReadWriteOncePod" && m != "ReadWriteMany")) {
          return InvalidArgument(path +
                                 ": must be one of ReadWriteOnce, ReadWriteOncePod, "
                                 "ReadWriteMany, got " +
                                 QuoteJson(m));
        }
        out.access_modes.push_back(m.get<std::string>());
      }
    }
    RETURN_IF_ERROR(v.NoUnknown());
    c->volume_claim = std::move(out);
  }
  ASSIGN_OR_RETURN(const json* volume, f.Object("volume"));
  if (volume != nullptr) {
    // A name first: a pod volume's habit (name plus source), said as such rather than counted.
    if (volume->contains("name")) {
      return InvalidArgument(
          "spec.checkpoint.volume: give the volume source only, not a name (the operator names "
          "the volume)");
    }
    if (volume->size() != 1) {
      return InvalidArgument(
          "spec.checkpoint.volume: must be one volume source (persistentVolumeClaim, nfs, "
          "hostPath, ...), got " +
          std::to_string(volume->size()) + " fields");
    }
    c->volume_json = volume->dump();
  }
  if (c->volume_claim && !c->volume_json.empty()) {
    return InvalidArgument("spec.checkpoint: takes volumeClaim or volume, not both");
  }
  return f.NoUnknown();
}

// What the API server would refuse of spec.template's containers when the operator creates the
// pods, said here with the field's path so `ringtrain validate` and `ringtrain run` (which has no
// API server) refuse it too: a pod spec, a container list, a container or an env entry of the
// wrong shape (a `containers:` mapping for a list, a missing `-`, was ignored by `ringtrain run`
// and its env with it), a container or env entry without a name, a workingDir, command or args
// of the wrong type, and an env value that is not a string (`value: 3` in YAML is a number; a
// local rank would have run with "" instead).
Status CheckTemplateEnv(const json& tmpl) {
  Fields t(tmpl, "spec.template");
  ASSIGN_OR_RETURN(const json* pod, t.Object("spec"));
  if (pod == nullptr) return Status::Ok();
  // A name: present, a string, not empty.
  const auto named = [](Fields& f, std::string* name) -> Status {
    RETURN_IF_ERROR(f.String("name", name));
    if (name->empty()) return InvalidArgument(f.Path("name") + ": required, a non-empty string");
    return Status::Ok();
  };
  for (const char* list : {"initContainers", "containers"}) {
    const auto containers = pod->find(list);
    if (containers == pod->end() || containers->is_null()) continue;
    const std::string path = "spec.template.spec." + std::string(list);
    if (!containers->is_array()) {
      return InvalidArgument(path + ": must be a list, got " + JsonTypeName(*containers) +
                             " (each container is a '- name: ...' item)");
    }
    for (std::size_t i = 0; i < containers->size(); ++i) {
      const json& c = (*containers)[i];
      const std::string at = path + "[" + std::to_string(i) + "]";
      if (!c.is_object()) {
        return InvalidArgument(at + ": must be an object, got " + JsonTypeName(c));
      }
      Fields by_index(c, at);
      std::string name;
      RETURN_IF_ERROR(named(by_index, &name));
      const std::string which = path + "[" + name + "]";
      Fields f(c, which);
      std::string working_dir;
      std::vector<std::string> command, args;
      RETURN_IF_ERROR(f.String("workingDir", &working_dir));
      RETURN_IF_ERROR(f.Strings("command", &command));
      RETURN_IF_ERROR(f.Strings("args", &args));
      const auto env = c.find("env");
      if (env == c.end() || env->is_null()) continue;
      if (!env->is_array()) {
        return InvalidArgument(which + ".env: must be a list, got " + JsonTypeName(*env));
      }
      for (std::size_t k = 0; k < env->size(); ++k) {
        const json& e = (*env)[k];
        const std::string entry = which + ".env[" + std::to_string(k) + "]";
        if (!e.is_object()) {
          return InvalidArgument(entry + ": must be an object, got " + JsonTypeName(e));
        }
        Fields fe(e, entry);
        std::string env_name;
        RETURN_IF_ERROR(named(fe, &env_name));
        const auto value = e.find("value");
        if (value == e.end() || value->is_string() || value->is_null()) continue;
        return InvalidArgument(entry + ".value: must be a string (quote it), got " +
                               JsonTypeName(*value) + " " + QuoteJson(*value));
      }
    }
  }
  return Status::Ok();
}

Status ParseSpec(const json& j, JobSpec* s, bool strict) {
  Fields f(j, "spec");
  RETURN_IF_ERROR(f.Int("replicas", 1, 4096, &s->replicas));
  RETURN_IF_ERROR(f.Int("gpusPerReplica", 0, 16, &s->gpus_per_replica));
  RETURN_IF_ERROR(ReadEnum(f, "backend", &s->backend));
  RETURN_IF_ERROR(f.String("image", &s->image));
  // Empty is unset (a Helm value left empty renders `image: ""`): the default runner image, not
  // a pod the API server refuses ("spec.containers[0].image: Required value").
  if (s->image.empty()) s->image = JobSpec{}.image;
  ASSIGN_OR_RETURN(const json* train, f.Object("train"));
  if (train != nullptr) RETURN_IF_ERROR(ParseTrain(*train, &s->train, strict));
  ASSIGN_OR_RETURN(const json* ckpt, f.Object("checkpoint"));
  if (ckpt != nullptr) RETURN_IF_ERROR(ParseCheckpoint(*ckpt, &s->checkpoint));
  ASSIGN_OR_RETURN(const json* resources, f.Object("resources"));
  if (resources != nullptr) {
    Fields r(*resources, "spec.resources");
    ResourceSpec spec;
    for (auto [key, out] : {std::pair{"requests", &spec.requests}, {"limits", &spec.limits}}) {
      ASSIGN_OR_RETURN(const json* list, r.Object(key));
      if (list != nullptr) RETURN_IF_ERROR(ParseQuantities(*list, r.Path(key), out));
    }
    RETURN_IF_ERROR(r.NoUnknown());
    s->resources = std::move(spec);
  }
  RETURN_IF_ERROR(f.Strings("command", &s->command));
  ASSIGN_OR_RETURN(const json* tmpl, f.Object("template"));
  if (tmpl != nullptr) RETURN_IF_ERROR(CheckTemplateEnv(*tmpl));
  if (tmpl != nullptr && !tmpl->empty()) s->pod_template_json = tmpl->dump();
  ASSIGN_OR_RETURN(const json* rp, f.Object("runPolicy"));
  if (rp != nullptr) RETURN_IF_ERROR(ParseRunPolicy(*rp, &s->run_policy));
  RETURN_IF_ERROR(f.NoUnknown());
  if (s->backend == contract::Backend::kNccl && s->gpus_per_replica == 0) {
    return InvalidArgument("spec.backend: nccl needs spec.gpusPerReplica of at least 1");
  }
  // The API server refuses a pod that requests more than its limit, and the job would wait on
  // the refused create: said by validate and run. Not by the operator (not `strict`), which
  // must not fail a job that ran under an earlier operator; it fails the job on the API's
  // refusal (PodInvalid) if ever it creates a pod of it again. A
  // runner container of the template with resources of its own uses those instead.
  if (!strict && s->resources && !TemplateRunnerSetsResources(*s)) {
    for (const auto& [name, request] : s->resources->requests) {
      const auto limit = s->resources->limits.find(name);
      if (limit != s->resources->limits.end() && QuantityAbove(request, limit->second)) {
        return InvalidArgument("spec.resources.requests." + name + ": " + request +
                               " is more than its limit, spec.resources.limits." + name + ": " +
                               limit->second + " (a request must be at most the limit)");
      }
    }
  }
  return Status::Ok();
}

Status ParseMetadata(const json& j, ObjectMeta* m) {
  if (!j.is_object()) return InvalidArgument("metadata: must be an object");
  // What a manifest may get wrong is named, as the API server would (it never sends these).
  Fields f(j, "metadata");
  RETURN_IF_ERROR(f.String("name", &m->name));
  RETURN_IF_ERROR(f.String("namespace", &m->ns));
  ASSIGN_OR_RETURN(const json* labels, f.Object("labels"));
  if (labels != nullptr) {
    Fields l(*labels, "metadata.labels");
    for (auto it = labels->begin(); it != labels->end(); ++it) {
      if (it->is_null()) continue;
      std::string value;
      RETURN_IF_ERROR(l.String(it.key(), &value));
      m->labels[it.key()] = std::move(value);
    }
  }
  m->uid = StringField(j, "uid", m->uid);
  m->resource_version = StringField(j, "resourceVersion", m->resource_version);
  m->generation = IntField(j, "generation", m->generation);
  m->creation_timestamp = StringField(j, "creationTimestamp", m->creation_timestamp);
  if (m->name.empty()) return InvalidArgument("metadata.name: required");
  if (std::string problem = JobNameProblem(m->name); !problem.empty()) {
    return InvalidArgument("metadata.name: " + problem);
  }
  // A namespace is a DNS-1123 label (the API server refuses any other).
  if (!m->ns.empty()) {
    const std::string& ns = m->ns;
    const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (ns.size() > 63 || !alnum(ns.front()) || !alnum(ns.back()) ||
        !std::all_of(ns.begin(), ns.end(), [&](char c) { return alnum(c) || c == '-'; })) {
      return InvalidArgument("metadata.namespace: \"" + ns.substr(0, 80) +
                             "\" is not a DNS-1123 label (at most 63 lower case letters, digits "
                             "and '-', starting and ending with a letter or digit)");
    }
  }
  return Status::Ok();
}

// The status the operator wrote: read leniently, a field of the wrong type as its default.
void ParseStatus(const json& j, JobStatus* s) {
  auto str = [](const json& o, const char* k) { return StringField(o, k); };
  auto num = [](const json& o, const char* k) { return NumberField(o, k); };
  s->phase = str(j, "phase");
  s->restarts = static_cast<int>(num(j, "restarts"));
  s->attempt = static_cast<int>(num(j, "attempt"));
  s->start_time = str(j, "startTime");
  s->completion_time = str(j, "completionTime");
  s->observed_generation = static_cast<std::int64_t>(num(j, "observedGeneration"));
  if (auto it = j.find("conditions"); it != j.end() && it->is_array()) {
    for (const auto& c : *it) {
      s->conditions.push_back({str(c, "type"), str(c, "status"), str(c, "reason"),
                               str(c, "message"), str(c, "lastTransitionTime")});
    }
  }
  if (auto it = j.find("replicas"); it != j.end() && it->is_object()) {
    s->replicas = {static_cast<int>(num(*it, "pending")), static_cast<int>(num(*it, "running")),
                   static_cast<int>(num(*it, "succeeded")), static_cast<int>(num(*it, "failed"))};
  }
  if (auto it = j.find("progress"); it != j.end() && it->is_object()) {
    s->progress =
        Progress{static_cast<std::int64_t>(num(*it, "step")), static_cast<int>(num(*it, "epoch")),
                 num(*it, "samplesPerSecond"), num(*it, "loss"), str(*it, "updatedAt")};
    s->progress->test_accuracy = NumberField(*it, "testAccuracy", -1);
    s->progress->test_mse = NumberField(*it, "testMSE", -1);
  }
  if (auto it = j.find("avoidedNodes"); it != j.end() && it->is_array()) {
    for (const auto& a : *it) {
      if (!a.is_object() || s->avoided_nodes.size() >= kMaxAvoidedNodes) continue;
      auto req = a.find("required");
      s->avoided_nodes.push_back({str(a, "node"), str(a, "reason"),
                                  static_cast<int>(std::clamp(num(a, "attempt"), 0.0, 1e9)),
                                  req == a.end() || !req->is_boolean() || req->get<bool>()});
    }
  }
  s->in_place_recoveries = static_cast<int>(std::clamp(num(j, "inPlaceRecoveries"), 0.0, 1e9));
  if (auto it = j.find("replacedPods"); it != j.end() && it->is_array()) {
    for (const auto& p : *it) {
      if (!p.is_string() || s->replaced_pods.size() >= kMaxReplacedPods) continue;
      s->replaced_pods.push_back(p.get<std::string>());
    }
  }
  if (auto it = j.find("recovery"); it != j.end() && it->is_object()) {
    RecoveryAccount& r = s->recovery;
    auto count = [&](const json& o, const char* k) {
      return static_cast<int>(std::clamp(num(o, k), 0.0, 1e9));
    };
    auto steps = [&](const json& o, const char* k) {
      return static_cast<std::int64_t>(std::clamp(num(o, k), 0.0, 1e15));
    };
    r.in_place = count(*it, "inPlace");
    r.gang_restarts = count(*it, "gangRestarts");
    r.from_checkpoint = count(*it, "fromCheckpoint");
    r.steps_lost = steps(*it, "stepsLost");
    r.seconds_without_training = std::clamp(num(*it, "secondsWithoutTraining"), 0.0, 1e12);
    if (auto a = it->find("attempt"); a != it->end() && a->is_object()) {
      r.attempt_in_place = count(*a, "inPlace");
      r.attempt_steps_lost = steps(*a, "stepsLost");
      r.attempt_seconds = std::clamp(num(*a, "seconds"), 0.0, 1e12);
    }
    if (auto p = it->find("pendingRestart"); p != it->end() && p->is_object()) {
      r.restart_from_step = steps(*p, "fromStep");
      r.restarted_at = str(*p, "at");
    }
  }
  if (auto it = j.find("lastFailure"); it != j.end() && it->is_object()) {
    s->last_failure =
        Failure{static_cast<int>(num(*it, "rank")), static_cast<int>(num(*it, "exitCode")),
                str(*it, "reason"), str(*it, "message")};
  }
}

// apiVersion and kind: required strings with one allowed value each.
Status CheckTypeField(const json& doc, const char* key, const char* want) {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return InvalidArgument(std::string(key) + ": required");
  if (!it->is_string()) {
    return InvalidArgument(std::string(key) + ": must be a string, got " + JsonTypeName(*it) + " " +
                           QuoteJson(*it));
  }
  if (it->get_ref<const std::string&>() != want) {
    return InvalidArgument(std::string(key) + ": must be " + want + ", got " + QuoteJson(*it));
  }
  return Status::Ok();
}

StatusOr<TrainingJob> FromJson(const json& doc, bool with_status) {
  if (doc.is_null()) return InvalidArgument("the manifest is empty");
  if (!doc.is_object()) {
    return InvalidArgument("the document must be a map (apiVersion, kind, metadata, spec), got " +
                           JsonTypeName(doc));
  }
  RETURN_IF_ERROR(CheckTypeField(doc, "apiVersion", kApiVersion));
  RETURN_IF_ERROR(CheckTypeField(doc, "kind", kKind));
  // A manifest may carry the status of an exported object (ignored, as kubectl apply does);
  // anything else at the top is a typo that would otherwise be silently dropped.
  for (auto it = doc.begin(); it != doc.end() && !with_status; ++it) {
    const std::string& k = it.key();
    if (k != "apiVersion" && k != "kind" && k != "metadata" && k != "spec" && k != "status") {
      return InvalidArgument(BoundedText(k) + ": unknown field");
    }
  }
  TrainingJob job;
  auto meta = doc.find("metadata");
  if (meta == doc.end()) return InvalidArgument("metadata: required");
  RETURN_IF_ERROR(ParseMetadata(*meta, &job.metadata));
  auto spec = doc.find("spec");
  if (spec == doc.end() || !spec->is_object()) {
    return InvalidArgument("spec: required, must be an object");
  }
  RETURN_IF_ERROR(ParseSpec(*spec, &job.spec, /*strict=*/with_status));
  if (with_status) {
    if (auto st = doc.find("status"); st != doc.end() && st->is_object()) {
      ParseStatus(*st, &job.status);
    }
  }
  return job;
}

}  // namespace

namespace {

// `kubectl create -f` of a manifest with metadata.generateName and no name (Argo's, a CI's):
// the API server names the job the prefix (up to 58 characters) and 5 characters of its
// alphabet. `ringtrain run` and `validate` name it so too, from the manifest's path rather than
// at random: every parse of one manifest (validate, run, the rerun that resumes from the work
// directory's checkpoints, named after the job) gives the same name.
Status NameFromGenerateName(json* doc, const std::string& source) {
  const auto meta = doc->find("metadata");
  if (meta == doc->end() || !meta->is_object()) return Status::Ok();
  const auto name = meta->find("name");
  const auto generate = meta->find("generateName");
  if ((name != meta->end() && !(name->is_null() || (name->is_string() && name->empty()))) ||
      generate == meta->end() || generate->is_null()) {
    return Status::Ok();
  }
  if (!generate->is_string()) {
    return InvalidArgument("metadata.generateName: must be a string, got " +
                           JsonTypeName(*generate) + " " + QuoteJson(*generate));
  }
  const std::string prefix = generate->get<std::string>();
  if (prefix.empty()) return Status::Ok();  // as none: "metadata.name: required"
  if (prefix.size() + 5 > kMaxJobNameLength) {
    return InvalidArgument("metadata.generateName: \"" + prefix.substr(0, 80) + "\" is " +
                           std::to_string(prefix.size()) + " characters; at most " +
                           std::to_string(kMaxJobNameLength - 5) +
                           " (the job's name is it and 5 more, at most " +
                           std::to_string(kMaxJobNameLength) + ")");
  }
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  // The path as the file system resolves it (../d/job.yaml and job.yaml, a symlink: one name).
  std::error_code ec;
  const auto resolved = std::filesystem::weakly_canonical(source, ec);
  std::uint64_t h = Fnv1a(ec ? source : resolved.string());
  std::string named = prefix;
  for (int i = 0; i < 5; ++i) {
    named += kAlphabet[h % (sizeof(kAlphabet) - 1)];
    h /= sizeof(kAlphabet) - 1;
  }
  if (std::string problem = JobNameProblem(named); !problem.empty()) {
    return InvalidArgument("metadata.generateName: " + problem);
  }
  (*meta)["name"] = named;
  return Status::Ok();
}

}  // namespace

StatusOr<TrainingJob> ParseManifestYaml(const std::string& yaml, const std::string& source) {
  ASSIGN_OR_RETURN(json doc, YamlToJson(yaml, source, kKind));
  if (Status named = NameFromGenerateName(&doc, source); !named.ok()) {
    return named.WithContext(source);
  }
  auto job = FromJson(doc, /*with_status=*/false);
  if (!job.ok()) return job.status().WithContext(source);
  return job;
}

StatusOr<TrainingJob> LoadManifestFile(const std::string& path) {
  // Why a manifest cannot be read is said: "No such file or directory", a directory, ...
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return ErrnoStatus(path + ": cannot open the manifest", errno);
  if (S_ISDIR(st.st_mode)) return InvalidArgument(path + ": a directory, not a manifest file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(path + ": cannot open the manifest", errno);
  // Read one byte past the limit, never more: a huge file or an endless device (/dev/zero,
  // a FIFO) is refused without reading it all.
  std::string text(kMaxManifestBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return InvalidArgument(path + ": cannot read the manifest");
  text.resize(static_cast<std::size_t>(in.gcount()));
  return ParseManifestYaml(text, path);
}

StatusOr<TrainingJob> ParseJobJson(const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("TrainingJob: not valid JSON");
  return FromJson(doc, /*with_status=*/true);
}

std::optional<std::int64_t> ReadTtlSecondsAfterFinished(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  const auto spec = doc.find("spec");
  if (spec == doc.end() || !spec->is_object()) return std::nullopt;
  const auto policy = spec->find("runPolicy");
  if (policy == spec->end() || !policy->is_object()) return std::nullopt;
  Fields f(*policy, "spec.runPolicy");
  std::optional<std::int64_t> ttl;
  if (!CappedSeconds(f, "ttlSecondsAfterFinished", 0, &ttl).ok()) return std::nullopt;
  return ttl;
}

}  // namespace ringtrain::api
