#include "controller/api/training_job.h"

#include <yaml-cpp/yaml.h>

#include "common/runner_env.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/env.h"
#include "common/runner_flags.h"
#include "common/yaml_guard.h"

namespace ringtrain::api {
namespace {

using nlohmann::json;

// Bounds on what one manifest may cost to read. A real TrainingJob is a few KiB; the API
// server itself refuses objects over 1.5 MiB. Aliases make a small file expand without bound
// (yaml-cpp shares aliased nodes, so "billion laughs" parses in microseconds and only the
// conversion expands it), hence the caps on converted nodes and bytes, not just on the text.
constexpr std::size_t kMaxManifestBytes = 1024 * 1024;
constexpr int kMaxDepth = 64;
constexpr std::size_t kMaxNodes = 100000;
constexpr std::size_t kMaxConvertedBytes = 4 * kMaxManifestBytes;

bool IsUtf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (std::size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += n + 1;
  }
  return true;
}

// Text from the file in an error: bounded so that an error never echoes a huge key or value,
// and cut on a character boundary so that it stays UTF-8.
std::string Bounded(const std::string& text, std::size_t max = 160) {
  if (text.size() <= max) return text;
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

// YAML → JSON with YAML 1.2 core-schema typing of plain scalars; quoted scalars stay strings.
// Every node converted counts against the caps above, aliases once per use.
class YamlConverter {
 public:
  StatusOr<json> Convert(const YAML::Node& node, const std::string& path) {
    if (++nodes_ > kMaxNodes) {
      return InvalidArgument(Where(path) + "the document expands to more than " +
                             std::to_string(kMaxNodes) + " nodes (aliases?)");
    }
    if (node.IsSequence() || node.IsMap()) {
      for (const YAML::Node& open : ancestors_) {
        if (open.is(node)) {
          return InvalidArgument(Where(path) + "an alias refers to a node that contains it");
        }
      }
      if (ancestors_.size() >= kMaxDepth) {
        return InvalidArgument(Where(path) + "nested deeper than " + std::to_string(kMaxDepth) +
                               " levels");
      }
      ancestors_.push_back(node);
      auto out = node.IsMap() ? ConvertMap(node, path) : ConvertSequence(node, path);
      ancestors_.pop_back();
      return out;
    }
    if (!node.IsScalar()) return json(nullptr);
    const std::string& s = node.Scalar();
    RETURN_IF_ERROR(CountBytes(s.size(), path));
    if (!IsUtf8(s)) return InvalidArgument(Where(path) + "not valid UTF-8");
    return ScalarToJson(node, s, path);
  }

 private:
  static std::string Where(const std::string& path) {
    return path.empty() ? "" : Bounded(path) + ": ";
  }

  Status CountBytes(std::size_t n, const std::string& path) {
    bytes_ += n;
    if (bytes_ > kMaxConvertedBytes) {
      return InvalidArgument(Where(path) + "the document expands to more than " +
                             std::to_string(kMaxConvertedBytes) + " bytes of values (aliases?)");
    }
    return Status::Ok();
  }

  StatusOr<json> ConvertSequence(const YAML::Node& node, const std::string& path) {
    json arr = json::array();
    std::size_t i = 0;
    for (const YAML::Node& item : node) {
      ASSIGN_OR_RETURN(json v, Convert(item, path + "[" + std::to_string(i++) + "]"));
      arr.push_back(std::move(v));
    }
    return arr;
  }

  StatusOr<json> ConvertMap(const YAML::Node& node, const std::string& path) {
    json obj = json::object();
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) return InvalidArgument(Where(path) + "map keys must be strings");
      const std::string& key = kv.first.Scalar();
      RETURN_IF_ERROR(CountBytes(key.size(), path));
      if (!IsUtf8(key)) return InvalidArgument(Where(path) + "a key is not valid UTF-8");
      const std::string child = path.empty() ? key : path + "." + key;
      // yaml-cpp keeps one of two equal keys without a word; kubectl refuses them.
      if (obj.contains(key)) return InvalidArgument(Where(child) + "duplicate key");
      ASSIGN_OR_RETURN(json v, Convert(kv.second, child));
      obj[key] = std::move(v);
    }
    return obj;
  }

  static StatusOr<json> ScalarToJson(const YAML::Node& node, const std::string& s,
                                     const std::string& path) {
    if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return json(s);
    if (s == "null" || s == "~" || s.empty()) return json(nullptr);
    if (s == "true" || s == "True" || s == "TRUE") return json(true);
    if (s == "false" || s == "False" || s == "FALSE") return json(false);
    if (auto i = ParseInt(s, path); i.ok()) return json(*i);
    if (auto d = ParseDouble(s, path); d.ok() && s.find_first_of("0123456789") == 0) {
      return json(*d);
    }
    if (auto d = ParseDouble(s, path); d.ok() && (s[0] == '-' || s[0] == '+' || s[0] == '.')) {
      return json(*d);
    }
    return json(s);
  }

  std::vector<YAML::Node> ancestors_;
  std::size_t nodes_ = 0;
  std::size_t bytes_ = 0;
};

std::string TypeName(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "an object";
}

std::string Quote(const json& v) {
  // ASCII escapes keep a cut through a character from leaving broken UTF-8 in the message, and
  // the replace handler keeps a stray byte from throwing (nlohmann's dump throws by default).
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Reads fields of one JSON object, naming "<path>.<key>" in every error and flagging keys that
// were never read as unknown fields (kubectl's strict field validation does the same).
class Fields {
 public:
  Fields(const json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  std::string Path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const json* Find(const std::string& key) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Status Int(const std::string& key, std::int64_t min, std::int64_t max, std::int64_t* out) {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_number_integer() && !v->is_number_unsigned()) {
      return InvalidArgument(Path(key) + ": must be an integer, got " + TypeName(*v) + " " +
                             Quote(*v));
    }
    std::int64_t n = v->get<std::int64_t>();
    if (n < min) {
      return InvalidArgument(Path(key) + ": must be at least " + std::to_string(min) + ", got " +
                             std::to_string(n));
    }
    if (n > max) {
      return InvalidArgument(Path(key) + ": must be at most " + std::to_string(max) + ", got " +
                             std::to_string(n));
    }
    *out = n;
    return Status::Ok();
  }
  Status Int(const std::string& key, std::int64_t min, std::int64_t max, int* out) {
    std::int64_t v = *out;
    RETURN_IF_ERROR(Int(key, min, max, &v));
    *out = static_cast<int>(v);
    return Status::Ok();
  }
  Status OptInt(const std::string& key, std::int64_t min, std::optional<std::int64_t>* out) {
    if (Find(key) == nullptr) return Status::Ok();
    std::int64_t v = 0;
    RETURN_IF_ERROR(Int(key, min, INT64_MAX, &v));
    *out = v;
    return Status::Ok();
  }
  Status Number(const std::string& key, double min, bool exclusive_min, double* out) {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_number()) {
      return InvalidArgument(Path(key) + ": must be a number, got " + TypeName(*v) + " " +
                             Quote(*v));
    }
    double d = v->get<double>();
    if (!std::isfinite(d) || d < min || (exclusive_min && d == min)) {
      return InvalidArgument(Path(key) + ": must be " +
                             (exclusive_min ? "greater than " : "at least ") + Quote(json(min)) +
                             ", got " + Quote(*v));
    }
    *out = d;
    return Status::Ok();
  }
  Status Bool(const std::string& key, bool* out) {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_boolean()) {
      return InvalidArgument(Path(key) + ": must be true or false, got " + Quote(*v));
    }
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status String(const std::string& key, std::string* out) {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_string()) {
      return InvalidArgument(Path(key) + ": must be a string, got " + TypeName(*v) + " " +
                             Quote(*v));
    }
    *out = v->get<std::string>();
    return Status::Ok();
  }
  Status Enum(const std::string& key, const std::vector<std::string>& allowed, std::string* out) {
    std::string v = *out;
    RETURN_IF_ERROR(String(key, &v));
    for (const auto& a : allowed) {
      if (a == v) {
        *out = v;
        return Status::Ok();
      }
    }
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    return InvalidArgument(Path(key) + ": must be one of " + list + ", got " + Quote(json(v)));
  }
  StatusOr<const json*> Object(const std::string& key) {
    const json* v = Find(key);
    if (v != nullptr && !v->is_object()) {
      return InvalidArgument(Path(key) + ": must be an object, got " + TypeName(*v));
    }
    return v;
  }
  Status NoUnknown() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (seen_.count(it.key()) == 0) {
        return InvalidArgument(Path(it.key()) + ": unknown field");
      }
    }
    return Status::Ok();
  }

 private:
  const json& obj_;
  std::string path_;
  std::set<std::string> seen_;
};

Status ParseTrain(const json& j, TrainSpec* t) {
  Fields f(j, "spec.train");
  RETURN_IF_ERROR(f.Enum("model", contract::ModelNames(), &t->model));
  RETURN_IF_ERROR(f.String("dataset", &t->dataset));
  RETURN_IF_ERROR(f.Int("epochs", 1, 100000, &t->epochs));
  RETURN_IF_ERROR(f.Int("batchSizePerReplica", 1, 65536, &t->batch_size_per_replica));
  RETURN_IF_ERROR(f.Enum("optimizer", contract::OptimizerNames(), &t->optimizer));
  RETURN_IF_ERROR(f.Number("learningRate", 0, true, &t->learning_rate));
  RETURN_IF_ERROR(f.Number("momentum", 0, false, &t->momentum));
  RETURN_IF_ERROR(f.Number("weightDecay", 0, false, &t->weight_decay));
  RETURN_IF_ERROR(f.Enum("lrScaling", contract::NamesOf<contract::LrScaling>(), &t->lr_scaling));
  RETURN_IF_ERROR(f.Number("warmupEpochs", 0, false, &t->warmup_epochs));
  RETURN_IF_ERROR(f.Enum("lrSchedule", contract::NamesOf<contract::LrSchedule>(), &t->lr_schedule));
  RETURN_IF_ERROR(f.Int("seed", 0, INT64_MAX, &t->seed));
  if (t->dataset.empty()) return InvalidArgument("spec.train.dataset: must not be empty");
  return f.NoUnknown();
}

Status ParseRunPolicy(const json& j, RunPolicy* p) {
  Fields f(j, "spec.runPolicy");
  RETURN_IF_ERROR(f.Int("backoffLimit", 0, 1000, &p->backoff_limit));
  RETURN_IF_ERROR(f.OptInt("activeDeadlineSeconds", 1, &p->active_deadline_seconds));
  RETURN_IF_ERROR(f.OptInt("ttlSecondsAfterFinished", 0, &p->ttl_seconds_after_finished));
  RETURN_IF_ERROR(f.Enum("cleanPodPolicy", {"None", "Running", "All"}, &p->clean_pod_policy));
  RETURN_IF_ERROR(f.Bool("suspend", &p->suspend));
  RETURN_IF_ERROR(f.String("schedulerName", &p->scheduler_name));
  RETURN_IF_ERROR(f.Int("progressDeadlineSeconds", 0, INT64_MAX, &p->progress_deadline_seconds));
  RETURN_IF_ERROR(f.Int("schedulingTimeoutSeconds", 0, INT64_MAX, &p->scheduling_timeout_seconds));
  RETURN_IF_ERROR(f.Enum("recovery", {"InPlace", "GangRestart"}, &p->recovery));
  ASSIGN_OR_RETURN(const json* group, f.Object("podGroup"));
  if (group != nullptr) {
    Fields g(*group, "spec.runPolicy.podGroup");
    PodGroupSpec out;
    if (g.Find("type") == nullptr) return InvalidArgument(g.Path("type") + ": required");
    RETURN_IF_ERROR(g.Enum("type", {"coscheduling", "volcano"}, &out.type));
    RETURN_IF_ERROR(g.String("queue", &out.queue));
    if (!out.queue.empty() && out.type != "volcano") {
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

Status ParseQuantity(const json& v, const std::string& path, std::string* out) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    *out = std::to_string(v.get<std::int64_t>());
  } else if (v.is_string()) {
    *out = v.get<std::string>();
  } else {
    return InvalidArgument(path + ": must be a quantity (e.g. 1Gi, 500m), got " + TypeName(v) +
                           " " + Quote(v));
  }
  if (!IsQuantity(*out) || (*out)[0] == '-') {
    return InvalidArgument(path + ": must be a non-negative quantity (e.g. 1Gi, 500m), got " +
                           Quote(v));
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
    RETURN_IF_ERROR(v.String("storageClassName", &out.storage_class_name));
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
                                 Quote(m));
        }
        out.access_modes.push_back(m.get<std::string>());
      }
    }
    RETURN_IF_ERROR(v.NoUnknown());
    c->volume_claim = std::move(out);
  }
  ASSIGN_OR_RETURN(const json* volume, f.Object("volume"));
  if (volume != nullptr) {
    if (volume->size() != 1) {
      return InvalidArgument(
          "spec.checkpoint.volume: must be one volume source (persistentVolumeClaim, nfs, "
          "hostPath, ...), got " +
          std::to_string(volume->size()) + " fields");
    }
    if (volume->contains("name")) {
      return InvalidArgument("spec.checkpoint.volume: give the volume source only, not a name");
    }
    c->volume_json = volume->dump();
  }
  if (c->volume_claim && !c->volume_json.empty()) {
    return InvalidArgument("spec.checkpoint: takes volumeClaim or volume, not both");
  }
  return f.NoUnknown();
}

Status ParseSpec(const json& j, JobSpec* s) {
  Fields f(j, "spec");
  RETURN_IF_ERROR(f.Int("replicas", 1, 4096, &s->replicas));
  RETURN_IF_ERROR(f.Int("gpusPerReplica", 0, 16, &s->gpus_per_replica));
  RETURN_IF_ERROR(f.Enum("backend", contract::NamesOf<contract::Backend>(), &s->backend));
  RETURN_IF_ERROR(f.String("image", &s->image));
  ASSIGN_OR_RETURN(const json* train, f.Object("train"));
  if (train != nullptr) RETURN_IF_ERROR(ParseTrain(*train, &s->train));
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
  if (const json* cmd = f.Find("command"); cmd != nullptr) {
    if (!cmd->is_array()) return InvalidArgument("spec.command: must be a list of strings");
    for (std::size_t i = 0; i < cmd->size(); ++i) {
      if (!(*cmd)[i].is_string()) {
        return InvalidArgument("spec.command[" + std::to_string(i) + "]: must be a string");
      }
      s->command.push_back((*cmd)[i].get<std::string>());
    }
  }
  ASSIGN_OR_RETURN(const json* tmpl, f.Object("template"));
  if (tmpl != nullptr && !tmpl->empty()) s->pod_template_json = tmpl->dump();
  ASSIGN_OR_RETURN(const json* rp, f.Object("runPolicy"));
  if (rp != nullptr) RETURN_IF_ERROR(ParseRunPolicy(*rp, &s->run_policy));
  RETURN_IF_ERROR(f.NoUnknown());
  if (s->backend == "nccl" && s->gpus_per_replica == 0) {
    return InvalidArgument("spec.backend: nccl needs spec.gpusPerReplica of at least 1");
  }
  return Status::Ok();
}

Status ParseMetadata(const json& j, ObjectMeta* m) {
  if (!j.is_object()) return InvalidArgument("metadata: must be an object");
  if (auto it = j.find("name"); it != j.end() && it->is_string()) m->name = *it;
  if (auto it = j.find("namespace"); it != j.end() && it->is_string()) m->ns = *it;
  if (auto it = j.find("uid"); it != j.end() && it->is_string()) m->uid = *it;
  if (auto it = j.find("resourceVersion"); it != j.end() && it->is_string()) {
    m->resource_version = *it;
  }
  if (auto it = j.find("generation"); it != j.end() && it->is_number_integer()) {
    m->generation = *it;
  }
  if (auto it = j.find("creationTimestamp"); it != j.end() && it->is_string()) {
    m->creation_timestamp = *it;
  }
  if (auto it = j.find("labels"); it != j.end() && it->is_object()) {
    for (auto l = it->begin(); l != it->end(); ++l) {
      if (l->is_string()) m->labels[l.key()] = l->get<std::string>();
    }
  }
  if (m->name.empty()) return InvalidArgument("metadata.name: required");
  if (std::string problem = JobNameProblem(m->name); !problem.empty()) {
    return InvalidArgument("metadata.name: " + problem);
  }
  return Status::Ok();
}

void ParseStatus(const json& j, JobStatus* s) {
  auto str = [&](const json& o, const char* k) {
    auto it = o.find(k);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [&](const json& o, const char* k) -> double {
    auto it = o.find(k);
    return it != o.end() && it->is_number() ? it->get<double>() : 0.0;
  };
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
    return InvalidArgument(std::string(key) + ": must be a string, got " + TypeName(*it) + " " +
                           Quote(*it));
  }
  if (it->get_ref<const std::string&>() != want) {
    return InvalidArgument(std::string(key) + ": must be " + want + ", got " + Quote(*it));
  }
  return Status::Ok();
}

StatusOr<TrainingJob> FromJson(const json& doc, bool with_status) {
  if (doc.is_null()) return InvalidArgument("the manifest is empty");
  if (!doc.is_object()) {
    return InvalidArgument("the document must be a map (apiVersion, kind, metadata, spec), got " +
                           TypeName(doc));
  }
  RETURN_IF_ERROR(CheckTypeField(doc, "apiVersion", kApiVersion));
  RETURN_IF_ERROR(CheckTypeField(doc, "kind", kKind));
  // A manifest may carry the status of an exported object (ignored, as kubectl apply does);
  // anything else at the top is a typo that would otherwise be silently dropped.
  for (auto it = doc.begin(); it != doc.end() && !with_status; ++it) {
    const std::string& k = it.key();
    if (k != "apiVersion" && k != "kind" && k != "metadata" && k != "spec" && k != "status") {
      return InvalidArgument(Bounded(k) + ": unknown field");
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
  RETURN_IF_ERROR(ParseSpec(*spec, &job.spec));
  if (with_status) {
    if (auto st = doc.find("status"); st != doc.end() && st->is_object()) {
      ParseStatus(*st, &job.status);
    }
  }
  return job;
}

}  // namespace

StatusOr<TrainingJob> ParseManifestYaml(const std::string& yaml, const std::string& source) {
  if (yaml.size() > kMaxManifestBytes) {
    return InvalidArgument(source + ": larger than the limit of " +
                           std::to_string(kMaxManifestBytes) + " bytes for a manifest");
  }
  RETURN_IF_ERROR(CheckYamlDocumentShape(yaml, source));
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(yaml);
  } catch (const std::exception& e) {  // YAML::Exception, and whatever else yaml-cpp lets out
    return InvalidArgument(source + ": not valid YAML: " + Bounded(e.what(), 300));
  }
  // One job per file, as `ringtrain run` runs one job: a second would be silently ignored.
  for (std::size_t i = 1; i < docs.size(); ++i) {
    if (!docs[i].IsNull()) {
      return InvalidArgument(source + ": a second YAML document (after '---'): put one " + kKind +
                             " in each file");
    }
  }
  YAML::Node root = docs.empty() ? YAML::Node() : docs[0];
  auto doc = YamlConverter().Convert(root, "");
  if (!doc.ok()) return doc.status().WithContext(source);
  auto job = FromJson(*doc, /*with_status=*/false);
  if (!job.ok()) return job.status().WithContext(source);
  return job;
}

StatusOr<TrainingJob> LoadManifestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open the manifest");
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

std::string StatusToJson(const JobStatus& s) {
  json j = json::object();
  if (!s.phase.empty()) j["phase"] = s.phase;
  j["conditions"] = json::array();
  for (const auto& c : s.conditions) {
    j["conditions"].push_back({{"type", c.type},
                               {"status", c.status},
                               {"reason", c.reason},
                               {"message", c.message},
                               {"lastTransitionTime", c.last_transition_time}});
  }
  j["replicas"] = {{"pending", s.replicas.pending},
                   {"running", s.replicas.running},
                   {"succeeded", s.replicas.succeeded},
                   {"failed", s.replicas.failed}};
  j["restarts"] = s.restarts;
  j["attempt"] = s.attempt;
  if (!s.start_time.empty()) j["startTime"] = s.start_time;
  if (!s.completion_time.empty()) j["completionTime"] = s.completion_time;
  if (s.observed_generation > 0) j["observedGeneration"] = s.observed_generation;
  if (s.progress) {
    j["progress"] = {{"step", s.progress->step},
                     {"epoch", s.progress->epoch},
                     {"samplesPerSecond", s.progress->samples_per_second},
                     {"loss", s.progress->loss},
                     {"updatedAt", s.progress->updated_at}};
  }
  if (!s.avoided_nodes.empty()) {
    json list = json::array();
    for (const auto& a : s.avoided_nodes) {
      list.push_back({{"node", a.node},
                      {"reason", a.reason},
                      {"attempt", a.attempt},
                      {"required", a.required}});
    }
    j["avoidedNodes"] = list;
  }
  if (s.in_place_recoveries > 0) j["inPlaceRecoveries"] = s.in_place_recoveries;
  if (!s.replaced_pods.empty()) j["replacedPods"] = s.replaced_pods;
  if (s.last_failure) {
    j["lastFailure"] = {{"rank", s.last_failure->rank},
                        {"exitCode", s.last_failure->exit_code},
                        {"reason", s.last_failure->reason},
                        {"message", s.last_failure->message}};
  }
  return j.dump();
}

std::vector<std::string> RunnerArgs(const JobSpec& spec, const std::string& checkpoint_dir) {
  const TrainSpec& t = spec.train;
  auto num = [](double v) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest exact round-trip form
    return std::string(buf, r.ptr);
  };
  std::vector<std::string> args = {
      "--model", t.model, "--dataset", t.dataset, "--epochs", std::to_string(t.epochs),
      "--batch-size", std::to_string(t.batch_size_per_replica), "--optimizer", t.optimizer,
      "--learning-rate", num(t.learning_rate), "--momentum", num(t.momentum), "--weight-decay",
      num(t.weight_decay), "--lr-scaling", t.lr_scaling, "--warmup-epochs", num(t.warmup_epochs),
      "--lr-schedule", t.lr_schedule, "--seed", std::to_string(t.seed), "--checkpoint-every",
      std::to_string(spec.checkpoint.every_steps),
      // gpusPerReplica 0 = CPU; otherwise every rank owns a GPU.
      "--device",
      std::string(contract::NameOf(spec.gpus_per_replica > 0 ? contract::Device::kCuda
                                                             : contract::Device::kCpu)),
      "--backend", spec.backend};
  if (!checkpoint_dir.empty()) {
    args.push_back("--checkpoint-dir");
    args.push_back(checkpoint_dir);
  }
  return args;
}

Duration RecoveryTimeoutFor(const JobSpec& spec) {
  // spec.command images know no recovery protocol; the CUDA engine cannot recover in place yet.
  if (!spec.command.empty() || spec.run_policy.recovery != "InPlace" || spec.gpus_per_replica > 0) {
    return Duration(0);
  }
  return contract::kRecoveryTimeout;
}

bool IsTerminal(const std::string& phase) { return phase == "Succeeded" || phase == "Failed"; }

ResourceSpec DefaultResources(int gpus_per_replica) {
  if (gpus_per_replica > 0) return {{{"cpu", "1"}, {"memory", "1Gi"}}, {{"memory", "4Gi"}}};
  return {{{"cpu", "500m"}, {"memory", "512Mi"}}, {{"memory", "2Gi"}}};
}

std::string JobNameProblem(const std::string& name) {
  bool ok = !name.empty() && name.size() <= kMaxJobNameLength && name.front() >= 'a' &&
            name.front() <= 'z' && name.back() != '-';
  for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  if (ok) return "";
  return Quote(json(name)) + " must be a DNS-1035 label of at most " +
         std::to_string(kMaxJobNameLength) +
         " characters (lower case letters, digits and '-', starting with a letter and ending "
         "with a letter or digit): it names the job's Service and its pods "
         "<name>-a<attempt>-<rank>";
}

}  // namespace ringtrain::api
