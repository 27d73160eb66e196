#include "tests/fakes/apiserver/admission.h"

#include <vector>

#include "common/time_format.h"

namespace ringtrain::fake {
namespace {

using nlohmann::json;

const json* Path(const json& obj, std::initializer_list<const char*> keys) {
  const json* cur = &obj;
  for (const char* k : keys) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

// `container "a"` or `containers "a", "b"`, as the plugin names them.
std::string Containers(const std::vector<std::string>& names) {
  std::string out = names.size() == 1 ? "container " : "containers ";
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += (i > 0 ? ", \"" : "\"") + names[i] + "\"";
  }
  return out;
}

std::vector<const json*> AllContainers(const json& pod) {
  std::vector<const json*> out;
  for (const char* list : {"initContainers", "containers"}) {
    const json* l = Path(pod, {"spec", list});
    if (l == nullptr || !l->is_array()) continue;
    for (const auto& c : *l) out.push_back(&c);
  }
  return out;
}

}  // namespace

std::optional<std::string> RestrictedViolations(const json& pod) {
  std::vector<std::string> violations;
  const auto containers = AllContainers(pod);
  auto name = [](const json* c) { return c->value("name", std::string()); };

  std::vector<std::string> escalating;
  for (const json* c : containers) {
    const json* ape = Path(*c, {"securityContext", "allowPrivilegeEscalation"});
    if (ape == nullptr || !ape->is_boolean() || ape->get<bool>()) escalating.push_back(name(c));
  }
  if (!escalating.empty()) {
    violations.push_back("allowPrivilegeEscalation != false (" + Containers(escalating) +
                         " must set securityContext.allowPrivilegeEscalation=false)");
  }

  std::vector<std::string> capable;
  for (const json* c : containers) {
    const json* drop = Path(*c, {"securityContext", "capabilities", "drop"});
    bool all = false;
    if (drop != nullptr && drop->is_array()) {
      for (const auto& d : *drop) all = all || d == "ALL";
    }
    if (!all) capable.push_back(name(c));
  }
  if (!capable.empty()) {
    violations.push_back("unrestricted capabilities (" + Containers(capable) +
                         " must set securityContext.capabilities.drop=[\"ALL\"])");
  }

  const json* pod_non_root = Path(pod, {"spec", "securityContext", "runAsNonRoot"});
  const bool pod_level =
      pod_non_root != nullptr && pod_non_root->is_boolean() && pod_non_root->get<bool>();
  std::vector<std::string> rooted;
  for (const json* c : containers) {
    const json* v = Path(*c, {"securityContext", "runAsNonRoot"});
    const bool set = v != nullptr && v->is_boolean();
    if (set ? !v->get<bool>() : !pod_level) rooted.push_back(name(c));
  }
  if (!rooted.empty()) {
    violations.push_back("runAsNonRoot != true (pod or " + Containers(rooted) +
                         " must set securityContext.runAsNonRoot=true)");
  }

  auto seccomp_ok = [](const json* type) {
    return type != nullptr && (*type == "RuntimeDefault" || *type == "Localhost");
  };
  const bool pod_seccomp =
      seccomp_ok(Path(pod, {"spec", "securityContext", "seccompProfile", "type"}));
  std::vector<std::string> unconfined;
  for (const json* c : containers) {
    const json* type = Path(*c, {"securityContext", "seccompProfile", "type"});
    if (type != nullptr ? !seccomp_ok(type) : !pod_seccomp) unconfined.push_back(name(c));
  }
  if (!unconfined.empty()) {
    violations.push_back("seccompProfile (pod or " + Containers(unconfined) +
                         " must set securityContext.seccompProfile.type to \"RuntimeDefault\" "
                         "or \"Localhost\")");
  }

  if (violations.empty()) return std::nullopt;
  std::string joined;
  for (const auto& v : violations) joined += (joined.empty() ? "" : ", ") + v;
  return joined;
}

bool IsDns1035Label(const std::string& s) {
  if (s.empty() || s.size() > 63 || s.front() < 'a' || s.front() > 'z' || s.back() == '-') {
    return false;
  }
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

std::string Dns1035Message(const std::string& name) {
  return "Invalid value: \"" + name +
         "\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
         "with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  "
         "or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
}

std::optional<std::string> PodQuotaExceeded(const json& quota, std::int64_t used_pods) {
  const json* hard = Path(quota, {"spec", "hard", "pods"});
  if (hard == nullptr) return std::nullopt;
  std::int64_t limit = 0;
  try {
    limit = hard->is_string() ? std::stoll(hard->get<std::string>()) : hard->get<std::int64_t>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used_pods + 1 <= limit) return std::nullopt;
  const std::string name = Path(quota, {"metadata", "name"}) != nullptr
                               ? quota["metadata"].value("name", std::string())
                               : std::string();
  return "exceeded quota: " + name +
         ", requested: pods=1, used: pods=" + std::to_string(used_pods) +
         ", limited: pods=" + std::to_string(limit);
}

bool CountsAgainstPodQuota(const json& pod, WallTime now) {
  const json* phase = Path(pod, {"status", "phase"});
  if (phase != nullptr && (*phase == "Succeeded" || *phase == "Failed")) return false;
  const json* deleted = Path(pod, {"metadata", "deletionTimestamp"});
  const json* grace = Path(pod, {"metadata", "deletionGracePeriodSeconds"});
  if (deleted != nullptr && deleted->is_string() && grace != nullptr &&
      grace->is_number_integer()) {
    if (const auto at = ParseRfc3339(deleted->get<std::string>());
        at && now > *at + std::chrono::seconds(grace->get<std::int64_t>())) {
      return false;
    }
  }
  return true;
}

namespace {

// resource.Quantity as %#v shows it inside cmp.Diff.
std::optional<std::string> GoQuantity(const json& q) {
  if (!q.is_string()) return std::nullopt;
  const std::string s = q.get<std::string>();
  std::size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == 0 || i > 12) return std::nullopt;
  const std::int64_t n = std::stoll(s.substr(0, i));
  const std::string suffix = s.substr(i);
  static const std::vector<std::pair<std::string, std::int64_t>> kBinary = {
      {"Ki", 1LL << 10}, {"Mi", 1LL << 20}, {"Gi", 1LL << 30}, {"Ti", 1LL << 40}};
  static const std::vector<std::pair<std::string, std::int64_t>> kDecimal = {
      {"", 1}, {"k", 1000}, {"M", 1000000}, {"G", 1000000000}, {"T", 1000000000000}};
  for (const auto& [sfx, mul] : kBinary) {
    if (suffix == sfx) {
      return "{i: resource.int64Amount{value: " + std::to_string(n * mul) + "}, s: \"" + s +
             "\", Format: \"BinarySI\"}";
    }
  }
  for (const auto& [sfx, mul] : kDecimal) {
    if (suffix == sfx) {
      return "{i: resource.int64Amount{value: " + std::to_string(n * mul) + "}, s: \"" + s +
             "\", Format: \"DecimalSI\"}";
    }
  }
  return std::nullopt;
}

}  // namespace

std::string PvcSpecImmutableMessage(const json& old_spec, const json& new_spec) {
  const std::string head =
      "Forbidden: spec is immutable after creation except resources.requests for bound claims\n";
  // Only the recorded shape is rendered: every other field equal, storage changed.
  json a = old_spec, b = new_spec;
  for (json* s : {&a, &b}) s->erase("resources");
  const json* old_storage = Path(old_spec, {"resources", "requests", "storage"});
  const json* new_storage = Path(new_spec, {"resources", "requests", "storage"});
  const json old_res = old_spec.value("resources", json::object());
  const json new_res = new_spec.value("resources", json::object());
  const bool only_storage = old_res.size() == 1 && new_res.size() == 1 &&
                            old_res["requests"].size() == 1 && new_res["requests"].size() == 1 &&
                            old_storage != nullptr && new_storage != nullptr;
  for (const char* known : {"accessModes", "storageClassName", "volumeMode"}) {
    a.erase(known);
    b.erase(known);
  }
  if (!only_storage || !a.empty() || !b.empty() ||
      old_spec.value("accessModes", json()) != new_spec.value("accessModes", json()) ||
      old_spec.value("storageClassName", json()) != new_spec.value("storageClassName", json()) ||
      old_spec.value("volumeMode", json()) != new_spec.value("volumeMode", json())) {
    return head;
  }
  auto old_q = GoQuantity(*old_storage);
  auto new_q = GoQuantity(*new_storage);
  if (!old_q || !new_q) return head;
  std::string modes;
  for (const auto& m : old_spec.value("accessModes", json::array())) {
    modes += (modes.empty() ? "" : ", ") + m.dump();
  }
  const json* sc = Path(old_spec, {"storageClassName"});
  const std::string storage_class = sc != nullptr && sc->is_string() ? "&" + sc->dump() : "nil";
  // go-cmp marks its diffs as unstable by writing the line prefixes with non-breaking spaces
  // (U+00A0), as the recording shows.
  const std::string same = "\u00a0\u00a0", del = "-\u00a0", add = "+\u00a0";
  return head + same + "core.PersistentVolumeClaimSpec{\n" + same + "\tAccessModes: {" + modes +
         "},\n" + same + "\tSelector:    nil,\n" + same +
         "\tResources: core.ResourceRequirements{\n" + same + "\t\tLimits: nil,\n" + del +
         "\t\tRequests: core.ResourceList{\n" + del + "\t\t\ts\"storage\": " + *old_q + ",\n" +
         del + "\t\t},\n" + add + "\t\tRequests: core.ResourceList{\n" + add +
         "\t\t\ts\"storage\": " + *new_q + ",\n" + add + "\t\t},\n" + same + "\t\tClaims: nil,\n" +
         same + "\t},\n" + same + "\tVolumeName:       \"\",\n" + same +
         "\tStorageClassName: " + storage_class + ",\n" + same + "\t... // 3 identical fields\n" +
         same + "}\n";
}

bool PodUsesClaim(const json& pod, const std::string& claim) {
  const json* volumes = Path(pod, {"spec", "volumes"});
  if (volumes == nullptr || !volumes->is_array()) return false;
  for (const auto& v : *volumes) {
    const json* name = Path(v, {"persistentVolumeClaim", "claimName"});
    if (name != nullptr && *name == claim) return true;
  }
  return false;
}

}  // namespace ringtrain::fake
