#include "controller/executors/local/local_container.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/json_fields.h"

namespace ringtrain::executors {
namespace {

using Json = nlohmann::json;

// The container of spec.template that the pod builder merges the runner into.
constexpr char kRunnerContainer[] = "runner";
constexpr char kRunnerPath[] = "spec.template.spec.containers[runner]";

// The value-from kinds that name an object of the cluster: no local rank can read them.
constexpr const char* kClusterSources[] = {"secretKeyRef", "configMapKeyRef", "resourceFieldRef",
                                           "fieldRef"};

std::string StringAt(const Json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

bool OptionalRef(const Json& ref) {
  auto it = ref.find("optional");
  return it != ref.end() && it->is_boolean() && it->get<bool>();
}

// What a reference points at, for messages: `secret "s1", key "token"`.
std::string Describe(const std::string& kind, const Json& ref) {
  std::string out;
  auto add = [&out](const std::string& what, const std::string& v) {
    if (v.empty()) return;
    if (!out.empty()) out += ", ";
    out += what + " \"" + v + "\"";
  };
  if (kind == "secretKeyRef" || kind == "configMapKeyRef") {
    add(kind == "secretKeyRef" ? "secret" : "configMap", StringAt(ref, "name"));
    add("key", StringAt(ref, "key"));
  } else if (kind == "fieldRef") {
    add("fieldPath", StringAt(ref, "fieldPath"));
  } else if (kind == "resourceFieldRef") {
    add("resource", StringAt(ref, "resource"));
  }
  return out.empty() ? kind : kind + " (" + out + ")";
}

bool LocalFieldPath(const std::string& path) {
  return path == "metadata.name" || path == "metadata.namespace" || path == "status.podIP" ||
         path == "status.hostIP" || path == "spec.nodeName";
}

Status ReadEnv(const Json& list, const EnvMap& host_env, const std::set<std::string>& ours,
               LocalContainer* out) {
  if (!list.is_array()) return InvalidArgument(std::string(kRunnerPath) + ".env: must be a list");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Json& e = list[i];
    const std::string name = StringAt(e, "name");
    const std::string where = std::string(kRunnerPath) + ".env[" + std::to_string(i) + "]";
    if (name.empty()) return InvalidArgument(where + ".name: must be a non-empty string");
    const std::string field = where + " (" + name + ")";
    if (ours.count(name) > 0) {  // as in the pod builder, ours win: not resolved, never refused
      out->notes.push_back("env " + name + " is set by ringtrain; the template's is ignored");
      continue;
    }
    LocalEnvVar v;
    v.name = name;
    auto from = e.find("valueFrom");
    if (from == e.end()) {
      // Never "" for a value of another type: the API server refuses it (so does the parser).
      if (auto value = e.find("value");
          value != e.end() && !value->is_string() && !value->is_null()) {
        return InvalidArgument(where + ".value: must be a string (quote it), got " + value->dump());
      }
      v.value = StringAt(e, "value");
      out->env.push_back(std::move(v));
      continue;
    }
    if (!from->is_object()) return InvalidArgument(field + ".valueFrom: must be an object");
    std::string kind;
    for (const char* k : kClusterSources) {
      if (from->contains(k)) kind = k;
    }
    if (kind.empty()) {
      return InvalidArgument(field + ".valueFrom: none of " +
                             "secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef");
    }
    const Json& ref = (*from)[kind];
    if (kind == "fieldRef" && LocalFieldPath(StringAt(ref, "fieldPath"))) {
      v.field_path = StringAt(ref, "fieldPath");
      out->env.push_back(std::move(v));
      continue;
    }
    const std::string what = Describe(kind, ref);
    if (auto host = host_env.find(name); host != host_env.end()) {
      v.value = host->second;
      v.literal = true;
      out->notes.push_back("env " + name + ": valueFrom." + what +
                           " is not available locally; using " + name +
                           " from ringtrain's environment");
      out->env.push_back(std::move(v));
      continue;
    }
    if (OptionalRef(ref)) {
      out->notes.push_back("env " + name + ": valueFrom." + what +
                           " is not available locally and is optional: left unset");
      continue;
    }
    return FailedPrecondition(field + ": valueFrom." + what +
                              " is not available under `ringtrain run` (no cluster): export " +
                              name + " before `ringtrain run`, or give it a value");
  }
  return Status::Ok();
}

Status ReadEnvFrom(const Json& list, LocalContainer* out) {
  if (!list.is_array()) {
    return InvalidArgument(std::string(kRunnerPath) + ".envFrom: must be a list");
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Json& e = list[i];
    const std::string where = std::string(kRunnerPath) + ".envFrom[" + std::to_string(i) + "]";
    std::string kind = "configMapRef";
    if (e.is_object() && e.contains("secretRef")) kind = "secretRef";
    const Json ref = e.is_object() ? e.value(kind, Json::object()) : Json::object();
    const std::string what = kind + " \"" + StringAt(ref, "name") + "\"";
    if (OptionalRef(ref)) {
      out->notes.push_back("envFrom " + what +
                           " is not available locally and is optional: " + "skipped");
      continue;
    }
    return FailedPrecondition(where + ": " + what +
                              " is not available under `ringtrain run` (no cluster): list its "
                              "variables in env, or mark it optional");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<LocalContainer> LocalContainerFromSpec(const api::JobSpec& spec, const EnvMap& host_env,
                                                const std::string& cwd,
                                                const std::set<std::string>& injected_names) {
  LocalContainer out;
  if (spec.pod_template_json.empty()) return out;
  const Json tmpl = Json::parse(spec.pod_template_json, nullptr, false);
  if (!tmpl.is_object()) return out;  // the API parser only stores objects
  const Json pod = tmpl.value("spec", Json::object());
  const Json containers = pod.is_object() ? pod.value("containers", Json::array()) : Json::array();
  if (!containers.is_array()) return out;
  const Json* runner = nullptr;
  std::vector<std::string> others;
  for (const auto& c : containers) {
    if (StringAt(c, "name") == kRunnerContainer) {
      runner = &c;
    } else {
      others.push_back(StringAt(c, "name"));
    }
  }
  for (const auto& name : others) {
    out.notes.push_back("spec.template container \"" + name +
                        "\" does not run under `ringtrain run` (only the runner does)");
  }
  for (std::string& ignored : api::IgnoredTemplateFields(spec)) {
    // Each replaced env entry is said below, as ReadEnv meets it ("env X is set by ringtrain").
    if (ignored.starts_with("spec.template.spec.containers[runner].env: ")) continue;
    out.notes.push_back(std::move(ignored) + ", as in the operator's pods");
  }
  if (runner == nullptr || !runner->is_object()) return out;
  if (std::string ignored = api::IgnoredRunnerCommand(spec); !ignored.empty()) {
    out.notes.push_back(std::move(ignored) + ", as in the operator's pods");
  }
  if (std::string ignored = api::IgnoredRecoveryTimeout(spec); !ignored.empty()) {
    out.notes.push_back(std::move(ignored) + ", as in the operator's pods");
  }
  if (runner->contains("volumeMounts")) {
    out.notes.push_back(std::string(kRunnerPath) +
                        ": volumeMounts are not mounted locally (ranks see this host's files)");
  }
  if (auto wd = runner->find("workingDir"); wd != runner->end()) {
    if (!wd->is_string()) {
      return InvalidArgument(std::string(kRunnerPath) + ".workingDir: must be a string");
    }
    const std::filesystem::path dir = wd->get<std::string>();
    out.working_dir = dir.empty() || dir.is_absolute() ? dir.string() : (cwd / dir).string();
  }
  if (auto env = runner->find("env"); env != runner->end()) {
    RETURN_IF_ERROR(ReadEnv(*env, host_env, injected_names, &out));
  }
  if (auto env_from = runner->find("envFrom"); env_from != runner->end()) {
    RETURN_IF_ERROR(ReadEnvFrom(*env_from, &out));
  }
  return out;
}

std::string ExpandVarRefs(const std::string& text, const EnvMap& vars) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char next = text[i + 1];
    if (next == '$') {  // $$: an escaped $
      out += '$';
      ++i;
      continue;
    }
    const std::size_t close = next == '(' ? text.find(')', i + 2) : std::string::npos;
    if (close == std::string::npos) {  // not a reference: kept as written
      out += '$';
      continue;
    }
    const std::string name = text.substr(i + 2, close - i - 2);
    auto it = vars.find(name);
    out += it != vars.end() ? it->second : text.substr(i, close - i + 1);
    i = close;
  }
  return out;
}

LocalRankExec LocalRankExecFor(const LocalContainer& container,
                               const std::vector<std::string>& command, const EnvMap& host_env,
                               const std::vector<std::pair<std::string, std::string>>& injected,
                               const LocalPodFields& pod) {
  LocalRankExec out;
  out.env = host_env;
  EnvMap declared;
  std::set<std::string> ours;
  for (const auto& [name, value] : injected) {
    declared[name] = value;
    ours.insert(name);
  }
  for (const LocalEnvVar& v : container.env) {
    if (ours.count(v.name) > 0) continue;  // ours win, as in the pod builder
    std::string value;
    if (!v.field_path.empty()) {
      value = v.field_path == "metadata.name"        ? pod.name
              : v.field_path == "metadata.namespace" ? pod.ns
              : v.field_path == "spec.nodeName"      ? pod.node_name
                                                     : "127.0.0.1";
    } else {
      value = v.literal ? v.value : ExpandVarRefs(v.value, declared);
    }
    declared[v.name] = value;
  }
  for (const auto& [name, value] : declared) out.env[name] = value;
  for (const auto& arg : command) out.argv.push_back(ExpandVarRefs(arg, declared));
  return out;
}

std::string TerminationMessage(const std::string& termination_file, const std::string& log_tail,
                               int exit_code) {
  auto trimmed = [](std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  };
  std::string message = trimmed(termination_file.substr(0, kTerminationMessageMaxBytes));
  if (!message.empty() || exit_code == 0) return message;
  // The last kLogFallbackMaxLines lines, then at most kLogFallbackMaxBytes of them: both are
  // ends of the log, so the shorter one.
  std::string tail = log_tail.size() > kLogFallbackMaxBytes
                         ? log_tail.substr(log_tail.size() - kLogFallbackMaxBytes)
                         : log_tail;
  std::size_t lines = 0;
  // A final newline ends the last line; it does not start another.
  std::size_t pos = tail.size();
  if (pos > 0 && tail[pos - 1] == '\n') --pos;
  while (pos > 0) {
    const std::size_t nl = tail.rfind('\n', pos - 1);
    if (nl == std::string::npos) break;
    if (++lines == kLogFallbackMaxLines) {
      tail.erase(0, nl + 1);
      break;
    }
    pos = nl;
  }
  return trimmed(tail);
}

}  // namespace ringtrain::executors
