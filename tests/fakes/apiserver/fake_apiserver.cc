#include "tests/fakes/apiserver/fake_apiserver.h"

#include <poll.h>
#include <sys/socket.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <variant>

#include "common/base64.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/time_format.h"
#include "tests/fakes/apiserver/admission.h"
#include "tests/fakes/apiserver/cel.h"
#include "tests/fakes/apiserver/schema.h"
#include "tests/fakes/apiserver/selector.h"
#include "tests/fakes/apiserver/wire.h"

namespace ringtrain::fake {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr char kNameDescription[] =
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
constexpr char kAgeDescription[] =
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created.";
constexpr auto kIdleConnection = std::chrono::hours(1);
constexpr auto kWatchPoll = std::chrono::milliseconds(200);
// The real server sends its last BOOKMARK about 2 s before a watch's timeoutSeconds deadline.
constexpr auto kBookmarkBeforeDeadline = std::chrono::seconds(2);

struct ResourceType {
  std::string group;
  std::string version;
  std::string plural;
  std::string singular;
  std::string kind;
  bool namespaced = true;
  bool status_subresource = false;
  bool custom = false;          // served from a CRD
  bool has_generation = false;  // metadata.generation tracks spec changes
  bool require_rv_on_update = false;
  std::vector<std::string> short_names;
  std::vector<std::string> categories;
  json schema;           // openAPIV3Schema (custom only)
  json printer_columns;  // additionalPrinterColumns (custom only)

  std::string gv() const { return group.empty() ? version : group + "/" + version; }
  std::string key() const { return group + "/" + plural; }  // storage, shared by versions
  // "trainingjobs.ringtrain.dev", "pods": the name in NotFound/Conflict messages.
  std::string qualified() const { return group.empty() ? plural : plural + "." + group; }
  // "TrainingJob.ringtrain.dev", "Pod": the name in Invalid messages.
  std::string qualified_kind() const { return group.empty() ? kind : kind + "." + group; }
};

ResourceType Builtin(std::string group, std::string version, std::string plural,
                     std::string singular, std::string kind, bool namespaced, bool status,
                     std::vector<std::string> short_names = {}) {
  ResourceType t;
  t.group = std::move(group);
  t.version = std::move(version);
  t.plural = std::move(plural);
  t.singular = std::move(singular);
  t.kind = std::move(kind);
  t.namespaced = namespaced;
  t.status_subresource = status;
  t.short_names = std::move(short_names);
  return t;
}

std::vector<ResourceType> BuiltinTypes() {
  std::vector<ResourceType> v = {
      Builtin("", "v1", "namespaces", "namespace", "Namespace", false, true, {"ns"}),
      Builtin("", "v1", "pods", "pod", "Pod", true, true, {"po"}),
      Builtin("", "v1", "services", "service", "Service", true, true, {"svc"}),
      Builtin("", "v1", "endpoints", "endpoints", "Endpoints", true, false, {"ep"}),
      Builtin("", "v1", "secrets", "secret", "Secret", true, false),
      Builtin("", "v1", "configmaps", "configmap", "ConfigMap", true, false, {"cm"}),
      Builtin("", "v1", "events", "event", "Event", true, false, {"ev"}),
      Builtin("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, false, {"sa"}),
      Builtin("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim",
              true, true, {"pvc"}),
      Builtin("", "v1", "resourcequotas", "resourcequota", "ResourceQuota", true, true, {"quota"}),
      Builtin("", "v1", "nodes", "node", "Node", false, true, {"no"}),
      Builtin("apps", "v1", "deployments", "deployment", "Deployment", true, true, {"deploy"}),
      Builtin("rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole",
              false, false),
      Builtin("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding",
              "ClusterRoleBinding", false, false),
      Builtin("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", true, false),
      Builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", true,
              false),
      Builtin("coordination.k8s.io", "v1", "leases", "lease", "Lease", true, false),
      Builtin("events.k8s.io", "v1", "events", "event", "Event", true, false, {"ev"}),
      Builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
              "CustomResourceDefinition", false, true, {"crd", "crds"}),
  };
  for (auto& t : v) {
    t.has_generation = t.plural == "deployments" || t.plural == "customresourcedefinitions";
    t.require_rv_on_update = t.plural == "leases";
  }
  return v;
}

struct Event {
  std::int64_t rv;
  std::string key;   // ResourceType::key()
  std::string type;  // ADDED | MODIFIED | DELETED
  json object;
  json previous;  // for MODIFIED: the object before (selector transitions)
};

// An answer that is a Status (error or DELETE success) rather than an object.
struct ApiError {
  int code;
  std::string reason;
  std::string message;
  ojson details;  // null: none
};

// A watch request that passed validation; the connection thread streams it.
struct WatchStart {
  const ResourceType* type;
  std::string ns;
};

using Result = std::variant<HttpResponse, ApiError, WatchStart>;

std::string Rfc3339Now() { return FormatRfc3339(std::chrono::system_clock::now()); }

std::string ObjKey(const std::string& ns, const std::string& name) { return ns + "/" + name; }

const json& Meta(const json& obj) {
  static const json kEmpty = json::object();
  auto it = obj.find("metadata");
  return it != obj.end() && it->is_object() ? *it : kEmpty;
}

std::string MetaString(const json& obj, const char* field) {
  const json& m = Meta(obj);
  auto it = m.find(field);
  return it != m.end() && it->is_string() ? it->get<std::string>() : "";
}

bool IsDnsSubdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t dot = s.find('.', start);
    std::string label = s.substr(start, dot == std::string::npos ? dot : dot - start);
    if (label.empty()) return false;
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    if (label.front() == '-' || label.back() == '-') return false;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return true;
}

ojson Details(const std::string& name, const ResourceType& t, bool kind_is_plural) {
  ojson d = ojson::object();
  if (!name.empty()) d["name"] = name;
  if (!t.group.empty()) d["group"] = t.group;
  d["kind"] = kind_is_plural ? t.plural : t.kind;
  return d;
}

ApiError NotFoundError(const ResourceType& t, const std::string& name) {
  return {404, "NotFound", t.qualified() + " \"" + name + "\" not found", Details(name, t, true)};
}

ApiError ConflictError(const ResourceType& t, const std::string& name) {
  return {409, "Conflict",
          "Operation cannot be fulfilled on " + t.qualified() + " \"" + name +
              "\": the object has been modified; please apply your changes to the latest "
              "version and try again",
          Details(name, t, true)};
}

ApiError BadRequest(const std::string& message) { return {400, "BadRequest", message, nullptr}; }

ApiError InvalidError(const std::string& prefix, const std::string& name, ojson details,
                      const std::vector<Cause>& causes) {
  std::string joined;
  for (const auto& c : causes) {
    joined += (joined.empty() ? "" : ", ") + (c.field.empty() ? "" : c.field + ": ") + c.message;
  }
  if (causes.size() > 1) joined = "[" + joined + "]";
  ojson list = ojson::array();
  for (const auto& c : causes) {
    list.push_back({{"reason", c.reason}, {"message", c.message}, {"field", c.field}});
  }
  details["causes"] = list;
  return {422, "Invalid", prefix + " \"" + name + "\" is invalid: " + joined, details};
}

// Kubernetes' duration.HumanDuration, as `kubectl get` shows AGE.
std::string HumanDuration(std::int64_t seconds) {
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  auto s = [](std::int64_t v, const char* u) { return std::to_string(v) + u; };
  if (seconds < 60 * 2) return s(seconds, "s");
  std::int64_t minutes = seconds / 60;
  if (minutes < 10) {
    return seconds % 60 == 0 ? s(minutes, "m") : s(minutes, "m") + s(seconds % 60, "s");
  }
  if (minutes < 60 * 3) return s(minutes, "m");
  std::int64_t hours = minutes / 60;
  if (hours < 8) return minutes % 60 == 0 ? s(hours, "h") : s(hours, "h") + s(minutes % 60, "m");
  if (hours < 48) return s(hours, "h");
  if (hours < 24 * 8)
    return hours % 24 == 0 ? s(hours / 24, "d") : s(hours / 24, "d") + s(hours % 24, "h");
  if (hours < 24 * 365 * 2) return s(hours / 24, "d");
  std::int64_t years = hours / 24 / 365;
  if (years < 8) return s(years, "y") + s((hours / 24) % 365, "d");
  return s(years, "y");
}

std::string Age(const json& obj) {
  auto t = ParseRfc3339(MetaString(obj, "creationTimestamp"));
  if (!t) return "<unknown>";
  return HumanDuration(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now() - *t)
          .count());
}

// ".status.progress.step", "{.spec.replicas}", ".status.conditions[0].type",
// '.status.conditions[?(@.type=="PodsReady")].reason'.
const json* EvalJsonPath(const json& obj, std::string path) {
  if (!path.empty() && path.front() == '{') path = path.substr(1, path.size() - 2);
  const json* cur = &obj;
  std::size_t i = 0;
  while (i < path.size() && cur != nullptr) {
    if (path[i] == '.') {
      ++i;
      continue;
    }
    if (path.compare(i, 3, "[?(") == 0) {
      // A filter, as kubectl's JSONPath: [?(@.field=="value")], the first element that matches
      // (the apiserver's printer shows the first result).
      std::size_t close = path.find(")]", i);
      if (close == std::string::npos || !cur->is_array()) return nullptr;
      const std::string expr = path.substr(i + 3, close - i - 3);
      const std::size_t eq = expr.find("==");
      if (eq == std::string::npos || expr.rfind("@.", 0) != 0) return nullptr;
      const std::string field = expr.substr(2, eq - 2);
      std::string want = expr.substr(eq + 2);
      if (want.size() >= 2 && (want.front() == '"' || want.front() == '\'')) {
        want = want.substr(1, want.size() - 2);
      }
      const json* match = nullptr;
      for (const auto& e : *cur) {
        if (e.is_object() && e.contains(field) && e[field].is_string() && e[field] == want) {
          match = &e;
          break;
        }
      }
      cur = match;
      i = close + 2;
      continue;
    }
    if (path[i] == '[') {
      std::size_t close = path.find(']', i);
      if (close == std::string::npos || !cur->is_array()) return nullptr;
      std::size_t idx = std::strtoul(path.c_str() + i + 1, nullptr, 10);
      cur = idx < cur->size() ? &(*cur)[idx] : nullptr;
      i = close + 1;
      continue;
    }
    std::size_t end = path.find_first_of(".[", i);
    std::string field = path.substr(i, end == std::string::npos ? end : end - i);
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(field);
    cur = it == cur->end() ? nullptr : &*it;
    i = end == std::string::npos ? path.size() : end;
  }
  return cur;
}

// Strategic merge patch for the lists core types merge by key; everything else as a merge patch.
void StrategicMerge(json* target, const json& patch) {
  static const std::map<std::string, std::vector<std::string>> kMergeKeys = {
      {"conditions", {"type"}},
      {"containers", {"name"}},
      {"initContainers", {"name"}},
      {"env", {"name"}},
      {"volumes", {"name"}},
      {"volumeMounts", {"mountPath"}},
      {"ports", {"containerPort", "port"}},
      {"ownerReferences", {"uid"}},
      {"imagePullSecrets", {"name"}}};
  if (!patch.is_object()) {
    *target = patch;
    return;
  }
  if (!target->is_object()) *target = json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const std::string& key = it.key();
    if (key.rfind("$setElementOrder/", 0) == 0 || key == "$retainKeys" || key == "$patch") {
      continue;
    }
    const json& v = it.value();
    if (v.is_null()) {
      target->erase(key);
      continue;
    }
    auto mk = kMergeKeys.find(key);
    if (v.is_array() && mk != kMergeKeys.end() && target->contains(key) &&
        (*target)[key].is_array()) {
      json& list = (*target)[key];
      for (const auto& elem : v) {
        std::string merge_key;
        for (const auto& k : mk->second) {
          if (elem.is_object() && elem.contains(k)) merge_key = k;
        }
        if (merge_key.empty()) {
          list.push_back(elem);
          continue;
        }
        auto found = std::find_if(list.begin(), list.end(), [&](const json& e) {
          return e.is_object() && e.contains(merge_key) && e[merge_key] == elem[merge_key];
        });
        bool remove = elem.value("$patch", "") == "delete";
        if (found == list.end()) {
          if (!remove) list.push_back(elem);
        } else if (remove) {
          list.erase(found);
        } else {
          StrategicMerge(&*found, elem);
        }
      }
      continue;
    }
    if (v.is_object()) {
      json& child = (*target)[key];
      StrategicMerge(&child, v);
    } else {
      (*target)[key] = v;
    }
  }
}

std::string RandomSuffix() {
  static std::mutex mu;
  static std::mt19937 rng{std::random_device{}()};
  static const char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::lock_guard<std::mutex> lock(mu);
  std::string s;
  for (int i = 0; i < 5; ++i) s += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return s;
}

// Fields no client may set or change through a write.
void CarryServerMetadata(const json& old, json* obj) {
  json& m = (*obj)["metadata"];
  for (const char* f : {"uid", "creationTimestamp", "generation", "deletionTimestamp",
                        "deletionGracePeriodSeconds", "namespace", "name"}) {
    if (old["metadata"].contains(f)) {
      m[f] = old["metadata"][f];
    } else {
      m.erase(f);
    }
  }
  m.erase("managedFields");
}

std::string QuantityString(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == static_cast<double>(static_cast<std::int64_t>(d))) {
      return std::to_string(static_cast<std::int64_t>(d));
    }
    return std::to_string(static_cast<std::int64_t>(d * 1000 + 0.5)) + "m";
  }
  return v.dump();
}

}  // namespace

json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      json arr = json::array();
      for (const auto& n : node) arr.push_back(YamlToJson(n));
      return arr;
    }
    case YAML::NodeType::Map: {
      json obj = json::object();
      for (const auto& kv : node) obj[kv.first.Scalar()] = YamlToJson(kv.second);
      return obj;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() == "!") return s;
      if (s == "true") return true;
      if (s == "false") return false;
      if (s == "null" || s == "~") return nullptr;
      json parsed = json::parse(s, nullptr, false);
      if (!parsed.is_discarded() && parsed.is_number()) return parsed;
      return s;
    }
    default:
      return nullptr;
  }
}

// ------------------------------------------------------------------------------------------
class FakeApiServer::Impl {
 public:
  explicit Impl(FakeApiServerOptions options) : options_(std::move(options)) { ResetState(); }
  ~Impl() { Stop(); }

  Status Start();
  void Stop();
  int port() const { return port_; }

  void ForceCompaction() {
    std::lock_guard<std::mutex> lock(mu_);
    log_.clear();
    compacted_rv_ = rv_;
  }
  void CloseAllWatches() {
    std::lock_guard<std::mutex> lock(mu_);
    ++watch_epoch_;
    cv_.notify_all();
  }
  void ResetState();

  struct Injection {
    std::string method;
    std::string resource;
    int code;
    int remaining;
    int retry_after;
  };
  void RequireBearerTokens(std::vector<std::string> tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    bearer_tokens_ = std::set<std::string>(tokens.begin(), tokens.end());
  }
  std::int64_t UnauthorizedCount() const {
    std::lock_guard<std::mutex> lock(mu_);
    return unauthorized_count_;
  }
  // The refusal of an unauthenticated request, as the real server words it; nullopt = allowed.
  std::optional<ApiError> Authenticate(const HttpRequest& req, const std::string& resource);
  void AddInjection(Injection inj) {
    std::lock_guard<std::mutex> lock(mu_);
    injections_.push_back(std::move(inj));
  }
  std::int64_t RequestCount(std::string_view method, std::string_view resource) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::int64_t n = 0;
    for (const auto& [k, v] : request_counts_) {
      if ((method.empty() || k.first == method) && (resource.empty() || k.second == resource)) {
        n += v;
      }
    }
    return n;
  }
  std::int64_t rv() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rv_;
  }
  std::size_t open_watches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return open_watches_;
  }

  // Direct access (locks mu_).
  const ResourceType* TypeForDirect(const ResourceId& id) const;
  std::optional<json> DirectGet(const ResourceId& id, const std::string& ns,
                                const std::string& name) const;
  std::vector<json> DirectList(const ResourceId& id, const std::string& ns,
                               const std::string& selector) const;
  StatusOr<json> DirectCreate(const ResourceId& id, const std::string& ns, json obj);
  StatusOr<json> DirectPatch(const ResourceId& id, const std::string& ns, const std::string& name,
                             const json& patch, bool status_only);
  Status DirectDelete(const ResourceId& id, const std::string& ns, const std::string& name,
                      std::optional<std::int64_t> grace_seconds);

 private:
  struct Conn {
    net::Socket socket;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  struct Route {
    const ResourceType* type = nullptr;
    std::string ns;
    std::string name;
    std::string sub;
  };

  void AcceptLoop();
  void ServeConnection(Conn* conn);
  // Returns false when the connection must close.
  bool Handle(Conn* conn, const HttpRequest& req);
  bool ServeWatch(Conn* conn, const HttpRequest& req, const Route& route);
  HttpResponse Render(const Result& result, const HttpRequest& req) const;

  // All below run with mu_ held.
  Result Dispatch(const HttpRequest& req);
  std::optional<Result> Discovery(const HttpRequest& req, const std::vector<std::string>& seg);
  const ResourceType* FindType(const std::string& group, const std::string& version,
                               const std::string& plural) const;
  bool GroupVersionServed(const std::string& group, const std::string& version) const;
  std::vector<const ResourceType*> TypesIn(const std::string& group,
                                           const std::string& version) const;
  Result List(const HttpRequest& req, const Route& route);
  Result Get(const HttpRequest& req, const Route& route);
  Result Create(const HttpRequest& req, const Route& route, json body);
  Result Update(const HttpRequest& req, const Route& route, json body, bool unconditional);
  Result Patch(const HttpRequest& req, const Route& route);
  Result Delete(const HttpRequest& req, const Route& route);
  Result DeleteCollection(const HttpRequest& req, const Route& route);

  // Prunes, defaults and validates a custom resource (schema, then CEL rules; `old` is the
  // stored object on updates, null on create); error when invalid.
  std::optional<ApiError> Admit(const ResourceType& t, const HttpRequest* req, json* obj,
                                const json* old, std::vector<std::string>* warnings);
  void ApplyBuiltinDefaults(const ResourceType& t, json* obj, bool create);
  std::optional<ApiError> ValidateBuiltin(const ResourceType& t, const json& obj);
  // Validating admission after validation, on create: PodSecurity and ResourceQuota for pods.
  std::optional<ApiError> AdmitCreate(const ResourceType& t, const json& obj);
  // status.used.pods of the namespace's ResourceQuotas, as the quota admission and controller
  // keep it; called whenever a pod is stored or removed.
  void RefreshQuotas(const std::string& ns);
  // Stands in for kube-controller-manager's pvc-protection controller: a deleted claim that no
  // pod mounts loses its finalizer and goes.
  void ReleaseUnusedClaims(const std::string& ns);
  const ResourceType& Type(const std::string& plural) const;
  // Marks *obj deleted as DeleteOptions `opts` ask (the pod strategy's grace, finalizers): true
  // when it stays, *obj as now stored; false when the caller removes it.
  bool MarkDeleted(const ResourceType& t, json* obj, const json& opts);
  // POST pods/NAME/binding, as a scheduler binds a pod to a node.
  Result Bind(const HttpRequest& req, const Route& route);
  json Store(const ResourceType& t, json obj, const char* type, const json* previous);
  void Remove(const ResourceType& t, const json& obj);
  void Emit(const ResourceType& t, const char* type, const json& obj, const json* previous);
  void RegisterCrd(const json& crd);
  void UnregisterCrd(const json& crd);
  json FinishCrd(json crd);
  json ToTable(const ResourceType& t, const std::vector<const json*>& items,
               const std::string& include_object, const std::string& rv) const;
  json ListBody(const ResourceType& t, std::vector<json> items, const std::string& cont,
                std::optional<std::int64_t> remaining) const;
  json ForOutput(const ResourceType& t, json obj) const;
  ojson BookmarkObject(const ResourceType& t, std::int64_t rv) const;
  std::map<std::string, json>& Objects(const ResourceType& t) { return objects_[t.key()]; }

  FakeApiServerOptions options_;
  net::Socket listener_;
  int port_ = 0;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  bool running_ = false;
  std::mutex conns_mu_;
  std::list<std::unique_ptr<Conn>> conns_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ResourceType> builtin_;
  std::map<std::string, ResourceType> custom_;  // group/version/plural
  std::map<std::string, std::map<std::string, json>> objects_;
  std::int64_t rv_ = 100;
  std::int64_t compacted_rv_ = 0;
  std::deque<Event> log_;
  std::map<std::string, std::int64_t> last_rv_by_key_;
  std::uint64_t watch_epoch_ = 0;
  std::size_t open_watches_ = 0;
  std::vector<Injection> injections_;
  std::map<std::pair<std::string, std::string>, std::int64_t> request_counts_;
  std::optional<std::set<std::string>> bearer_tokens_;
  std::int64_t unauthorized_count_ = 0;
};

void FakeApiServer::Impl::ResetState() {
  std::lock_guard<std::mutex> lock(mu_);
  builtin_ = BuiltinTypes();
  custom_.clear();
  objects_.clear();
  log_.clear();
  compacted_rv_ = rv_;
  last_rv_by_key_.clear();
  const ResourceType& ns_type = builtin_[0];
  for (const char* ns :
       {"default", "kube-system", "kube-public", "kube-node-lease", "ringtrain-system"}) {
    json obj = {{"apiVersion", "v1"},
                {"kind", "Namespace"},
                {"metadata", {{"name", ns}, {"labels", {{"kubernetes.io/metadata.name", ns}}}}},
                {"spec", {{"finalizers", {"kubernetes"}}}},
                {"status", {{"phase", "Active"}}}};
    obj["metadata"]["uid"] = RandomUuid();
    obj["metadata"]["creationTimestamp"] = Rfc3339Now();
    Store(ns_type, obj, "ADDED", nullptr);
  }
}

// --- network -------------------------------------------------------------------------------

Status FakeApiServer::Impl::Start() {
  if (running_) return FailedPrecondition("fake API server already running");
  ASSIGN_OR_RETURN(listener_, net::Listen(options_.host, port_ != 0 ? port_ : options_.port));
  ASSIGN_OR_RETURN(port_, net::LocalPort(listener_));
  stopping_ = false;
  running_ = true;
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

void FakeApiServer::Impl::Stop() {
  if (!running_) return;
  stopping_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  listener_.Shutdown();
  if (accept_thread_.joinable()) accept_thread_.join();
  listener_.Close();
  std::list<std::unique_ptr<Conn>> conns;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    conns.swap(conns_);
  }
  for (auto& c : conns) c->socket.Shutdown();
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  for (auto& c : conns) {
    if (c->thread.joinable()) c->thread.join();
  }
  running_ = false;
}

void FakeApiServer::Impl::AcceptLoop() {
  while (!stopping_) {
    auto sock = net::Accept(listener_, DeadlineAfter(std::chrono::milliseconds(200)));
    {
      std::lock_guard<std::mutex> lock(conns_mu_);
      for (auto it = conns_.begin(); it != conns_.end();) {
        if ((*it)->done) {
          (*it)->thread.join();
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (!sock.ok()) continue;
    auto conn = std::make_unique<Conn>();
    conn->socket = std::move(*sock);
    Conn* raw = conn.get();
    std::lock_guard<std::mutex> lock(conns_mu_);
    if (stopping_) return;
    conn->thread = std::thread([this, raw] { ServeConnection(raw); });
    conns_.push_back(std::move(conn));
  }
}

void FakeApiServer::Impl::ServeConnection(Conn* conn) {
  std::string buffer;
  while (!stopping_) {
    auto req = ReadRequest(conn->socket, &buffer, DeadlineAfter(kIdleConnection));
    if (!req.ok()) break;
    if (!Handle(conn, *req)) break;
  }
  conn->socket.Shutdown();
  conn->done = true;
}

namespace {

// Go's encoding/json escapes <, > and & inside strings ("<nil>" is sent as "\u003cnil\u003e");
// outside strings compact JSON has none of them, so the whole text can be replaced.
std::string GoHtmlEscape(std::string text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

HttpResponse FakeApiServer::Impl::Render(const Result& result, const HttpRequest& req) const {
  std::string ua = req.Header("user-agent");
  std::string pretty_q = req.Query("pretty");
  bool pretty = pretty_q.empty() ? (ua.rfind("curl", 0) == 0 || ua.rfind("Wget", 0) == 0 ||
                                    ua.rfind("Mozilla/5.0", 0) == 0)
                                 : pretty_q == "true" || pretty_q == "1";
  if (const auto* r = std::get_if<HttpResponse>(&result)) {
    HttpResponse out = *r;
    if (out.content_type == "application/json" && pretty && !out.body.empty()) {
      json j = json::parse(out.body, nullptr, false);
      if (!j.is_discarded()) out.body = j.dump(2);
    } else if (out.content_type == "application/json") {
      out.body = GoHtmlEscape(std::move(out.body));
    }
    return out;
  }
  const auto& e = std::get<ApiError>(result);
  ojson st = ojson::object();
  st["kind"] = "Status";
  st["apiVersion"] = "v1";
  st["metadata"] = ojson::object();
  st["status"] = e.code < 300 ? "Success" : "Failure";
  if (!e.message.empty()) st["message"] = e.message;
  if (!e.reason.empty()) st["reason"] = e.reason;
  if (!e.details.is_null()) st["details"] = e.details;
  st["code"] = e.code;
  HttpResponse out;
  out.code = e.code;
  out.body = pretty ? st.dump(2) : GoHtmlEscape(st.dump()) + "\n";
  return out;
}

bool FakeApiServer::Impl::Handle(Conn* conn, const HttpRequest& req) {
  bool keep_alive = req.Header("connection") != "close";
  bool is_watch = req.Query("watch") == "true" || req.Query("watch") == "1";
  std::unique_lock<std::mutex> lock(mu_);
  // Which resource the request is about, for counters and injected failures.
  std::string resource;
  {
    std::vector<std::string> seg;
    std::size_t start = 1;
    while (start <= req.path.size()) {
      std::size_t slash = req.path.find('/', start);
      seg.push_back(req.path.substr(start, slash == std::string::npos ? slash : slash - start));
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    std::size_t base = !seg.empty() && seg[0] == "api" ? 2 : 3;
    if (seg.size() > base) {
      resource = seg[base];
      if (resource == "namespaces" && seg.size() > base + 2) resource = seg[base + 2];
    }
  }
  ++request_counts_[{req.method, resource}];
  if (auto refused = Authenticate(req, resource)) {
    lock.unlock();
    std::string wire = SerializeResponse(Render(*refused, req));
    return net::SendAll(conn->socket, wire.data(), wire.size(), DeadlineAfter(kWatchPoll * 50))
               .ok() &&
           keep_alive;
  }
  for (auto it = injections_.begin(); it != injections_.end(); ++it) {
    if ((it->method.empty() || it->method == req.method) &&
        (it->resource.empty() || it->resource == resource)) {
      int code = it->code;
      int retry_after = it->retry_after;
      if (--it->remaining <= 0) injections_.erase(it);
      lock.unlock();
      std::string reason = code == 429   ? "TooManyRequests"
                           : code == 500 ? "InternalError"
                           : code == 503 ? "ServiceUnavailable"
                           : code == 403 ? "Forbidden"
                           : code == 401 ? "Unauthorized"
                                         : "";
      HttpResponse r = Render(ApiError{code, reason, "injected failure", nullptr}, req);
      if (code == 429) {
        r.headers.clear();
        r.headers.push_back({"Retry-After", std::to_string(retry_after)});
      }
      std::string wire = SerializeResponse(r);
      return net::SendAll(conn->socket, wire.data(), wire.size(), DeadlineAfter(kWatchPoll * 50))
                 .ok() &&
             keep_alive;
    }
  }
  Result r = Dispatch(req);
  if (const auto* w = std::get_if<WatchStart>(&r); w != nullptr && is_watch) {
    ResourceType type = *w->type;  // the CRD may go away while the watch runs
    Route route;
    route.type = &type;
    route.ns = w->ns;
    lock.unlock();
    return ServeWatch(conn, req, route) && keep_alive;
  }
  lock.unlock();
  std::string wire = SerializeResponse(Render(r, req));
  return net::SendAll(conn->socket, wire.data(), wire.size(), DeadlineAfter(kWatchPoll * 50))
             .ok() &&
         keep_alive;
}

std::optional<ApiError> FakeApiServer::Impl::Authenticate(const HttpRequest& req,
                                                          const std::string& resource) {
  if (!bearer_tokens_) return std::nullopt;
  const std::string header = req.Header("authorization");
  if (!header.empty()) {
    if (header.rfind("Bearer ", 0) == 0 && bearer_tokens_->count(header.substr(7)) > 0) {
      return std::nullopt;
    }
    ++unauthorized_count_;
    return ApiError{401, "Unauthorized", "Unauthorized", nullptr};
  }
  // No token: system:anonymous, whom RBAC lets read /version only.
  if (req.path == "/version") return std::nullopt;
  if (resource.empty()) {
    return ApiError{403, "Forbidden",
                    "forbidden: User \"system:anonymous\" cannot get path \"" + req.path + "\"",
                    ojson::object()};
  }
  std::vector<std::string> seg;
  for (std::size_t start = 1; start <= req.path.size();) {
    std::size_t slash = req.path.find('/', start);
    seg.push_back(req.path.substr(start, slash == std::string::npos ? slash : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  const bool core = seg[0] == "api";
  const std::string group = core ? "" : seg.size() > 1 ? seg[1] : "";
  const std::size_t base = core ? 2 : 3;
  std::string ns;
  std::size_t name_at = base + 1;
  if (seg.size() > base + 2 && seg[base] == "namespaces") {
    ns = seg[base + 1];
    name_at = base + 3;
  }
  const bool named = seg.size() > name_at && !seg[name_at].empty();
  const bool watch = req.Query("watch") == "true" || req.Query("watch") == "1";
  std::string verb = req.method == "POST"     ? "create"
                     : req.method == "PUT"    ? "update"
                     : req.method == "PATCH"  ? "patch"
                     : req.method == "DELETE" ? (named ? "delete" : "deletecollection")
                     : watch                  ? "watch"
                     : named                  ? "get"
                                              : "list";
  std::string message = resource + " is forbidden: User \"system:anonymous\" cannot " + verb +
                        " resource \"" + resource + "\" in API group \"" + group + "\"" +
                        (ns.empty() ? " at the cluster scope" : " in the namespace \"" + ns + "\"");
  return ApiError{403, "Forbidden", message, ojson{{"kind", resource}}};
}

// --- routing -------------------------------------------------------------------------------

const ResourceType* FakeApiServer::Impl::FindType(const std::string& group,
                                                  const std::string& version,
                                                  const std::string& plural) const {
  for (const auto& t : builtin_) {
    if (t.group == group && t.version == version && t.plural == plural) return &t;
  }
  auto it = custom_.find(group + "/" + version + "/" + plural);
  return it == custom_.end() ? nullptr : &it->second;
}

bool FakeApiServer::Impl::GroupVersionServed(const std::string& group,
                                             const std::string& version) const {
  return !TypesIn(group, version).empty();
}

std::vector<const ResourceType*> FakeApiServer::Impl::TypesIn(const std::string& group,
                                                              const std::string& version) const {
  std::vector<const ResourceType*> out;
  for (const auto& t : builtin_) {
    if (t.group == group && t.version == version) out.push_back(&t);
  }
  for (const auto& [k, t] : custom_) {
    if (t.group == group && t.version == version) out.push_back(&t);
  }
  return out;
}

Result FakeApiServer::Impl::Dispatch(const HttpRequest& req) {
  HttpResponse not_found;
  not_found.code = 404;
  not_found.content_type = "text/plain; charset=utf-8";
  not_found.headers.push_back({"X-Content-Type-Options", "nosniff"});
  not_found.body = "404 page not found\n";

  std::vector<std::string> seg;
  {
    std::size_t start = 1;
    while (start < req.path.size()) {
      std::size_t slash = req.path.find('/', start);
      std::string s = req.path.substr(start, slash == std::string::npos ? slash : slash - start);
      if (!s.empty()) seg.push_back(s);
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
  }
  if (auto d = Discovery(req, seg); d.has_value()) return *d;

  std::string group, version;
  std::size_t base;
  if (seg.size() >= 2 && seg[0] == "api") {
    version = seg[1];
    base = 2;
  } else if (seg.size() >= 3 && seg[0] == "apis") {
    group = seg[1];
    version = seg[2];
    base = 3;
  } else {
    return not_found;
  }
  std::vector<std::string> rest(seg.begin() + static_cast<std::ptrdiff_t>(base), seg.end());
  if (rest.empty()) return not_found;
  Route route;
  if (rest[0] == "namespaces" && rest.size() >= 3 &&
      (route.type = FindType(group, version, rest[2])) != nullptr && route.type->namespaced) {
    route.ns = rest[1];
    if (rest.size() >= 4) route.name = rest[3];
    if (rest.size() >= 5) route.sub = rest[4];
    if (rest.size() > 5) return not_found;
  } else {
    route.type = FindType(group, version, rest[0]);
    if (route.type == nullptr) return not_found;
    if (rest.size() >= 2) route.name = rest[1];
    if (rest.size() >= 3) route.sub = rest[2];
    if (rest.size() > 3) return not_found;
    if (route.type->namespaced && !route.name.empty()) return not_found;
  }
  const bool binding = route.sub == "binding" && route.type->group.empty() &&
                       route.type->plural == "pods" && !route.name.empty();
  if (!route.sub.empty() && !binding &&
      (route.sub != "status" || !route.type->status_subresource)) {
    return not_found;
  }
  const std::string& m = req.method;
  if (binding) {
    if (m == "POST") return Bind(req, route);
    return ApiError{405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                    ojson::object()};
  }
  bool is_watch = req.Query("watch") == "true" || req.Query("watch") == "1";
  if (route.name.empty()) {
    if (m == "GET" && is_watch) {
      // Validate what can fail before the 200 is on the wire; the caller streams.
      if (auto s = LabelSelector::Parse(req.Query("labelSelector")); !s.ok()) {
        return BadRequest(s.status().message());
      }
      if (auto s = FieldSelector::Parse(req.Query("fieldSelector")); !s.ok()) {
        return BadRequest(s.status().message());
      }
      return WatchStart{route.type, route.ns};
    }
    if (m == "GET") return List(req, route);
    if (m == "POST") {
      json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object()) {
        return BadRequest(
            "the body of the request was in an unknown format - accepted media "
            "types include: application/json, application/yaml");
      }
      return Create(req, route, std::move(body));
    }
    if (m == "DELETE") return DeleteCollection(req, route);
    return ApiError{405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource", nullptr};
  }
  if (m == "GET") return Get(req, route);
  if (m == "PUT") {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      return BadRequest(
          "the body of the request was in an unknown format - accepted media types "
          "include: application/json, application/yaml");
    }
    return Update(req, route, std::move(body), false);
  }
  if (m == "PATCH") return Patch(req, route);
  if (m == "DELETE") return Delete(req, route);
  return ApiError{405, "MethodNotAllowed",
                  "the server does not allow this method on the requested resource", nullptr};
}

std::optional<Result> FakeApiServer::Impl::Discovery(const HttpRequest& req,
                                                     const std::vector<std::string>& seg) {
  auto ok = [](const ojson& body) {
    HttpResponse r;
    r.body = body.dump() + "\n";
    return Result(r);
  };
  auto text = [](const std::string& body) {
    HttpResponse r;
    r.content_type = "text/plain; charset=utf-8";
    r.headers.push_back({"X-Content-Type-Options", "nosniff"});
    r.body = body;
    return Result(r);
  };
  if (req.method != "GET") return std::nullopt;
  if (seg.size() == 1 && (seg[0] == "healthz" || seg[0] == "readyz" || seg[0] == "livez")) {
    return text("ok");
  }
  if (seg.size() == 2 && seg[0] == "openapi" && seg[1] == "v2") {
    // An empty OpenAPI v2 document (zero protobuf bytes): kubectl's client-side validation then
    // finds no schema for any kind and leaves validation to this server, as for a CRD without
    // a published schema. /openapi/v3 stays 404, which kubectl also tolerates.
    HttpResponse r;
    r.content_type = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
    return Result(r);
  }
  if (seg.size() == 1 && seg[0] == "version") {
    ojson v = ojson::object();
    v["major"] = "1";
    v["minor"] = "28";
    v["gitVersion"] = "v1.28.7";
    v["gitCommit"] = "fake";
    v["gitTreeState"] = "clean";
    v["buildDate"] = "2026-11-21T14:58:13Z";
    v["goVersion"] = "go1.23.5";
    v["compiler"] = "gc";
    v["platform"] = "linux/amd64";
    HttpResponse r;
    r.body = v.dump(2);  // /version is always indented, without a trailing newline
    return Result(r);
  }
  if (seg.size() == 1 && seg[0] == "api") {
    ojson v = ojson::object();
    v["kind"] = "APIVersions";
    v["versions"] = {"v1"};
    v["serverAddressByClientCIDRs"] = ojson::array(
        {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", "127.0.0.1:" + std::to_string(port_)}}});
    return ok(v);
  }
  auto group_json = [&](const std::string& g) {
    std::vector<std::string> versions;
    for (const auto& t : builtin_) {
      if (t.group == g && std::find(versions.begin(), versions.end(), t.version) == versions.end())
        versions.push_back(t.version);
    }
    for (const auto& [k, t] : custom_) {
      if (t.group == g && std::find(versions.begin(), versions.end(), t.version) == versions.end())
        versions.push_back(t.version);
    }
    ojson gj = ojson::object();
    gj["name"] = g;
    gj["versions"] = ojson::array();
    for (const auto& v : versions) {
      gj["versions"].push_back({{"groupVersion", g + "/" + v}, {"version", v}});
    }
    if (!versions.empty()) {
      gj["preferredVersion"] = {{"groupVersion", g + "/" + versions[0]}, {"version", versions[0]}};
    }
    return gj;
  };
  if (seg.size() == 1 && seg[0] == "apis") {
    std::vector<std::string> groups;
    for (const auto& t : builtin_) {
      if (!t.group.empty() && std::find(groups.begin(), groups.end(), t.group) == groups.end())
        groups.push_back(t.group);
    }
    for (const auto& [k, t] : custom_) {
      if (std::find(groups.begin(), groups.end(), t.group) == groups.end())
        groups.push_back(t.group);
    }
    ojson v = ojson::object();
    v["kind"] = "APIGroupList";
    v["apiVersion"] = "v1";
    v["groups"] = ojson::array();
    for (const auto& g : groups) v["groups"].push_back(group_json(g));
    return ok(v);
  }
  if (seg.size() == 2 && seg[0] == "apis") {
    ojson gj = group_json(seg[1]);
    if (gj["versions"].empty()) return std::nullopt;
    ojson v = ojson::object();
    v["kind"] = "APIGroup";
    v["apiVersion"] = "v1";
    for (auto it = gj.begin(); it != gj.end(); ++it) v[it.key()] = it.value();
    return ok(v);
  }
  bool core = seg.size() == 2 && seg[0] == "api";
  bool grouped = seg.size() == 3 && seg[0] == "apis";
  if (core || grouped) {
    std::string group = core ? "" : seg[1];
    std::string version = core ? seg[1] : seg[2];
    auto types = TypesIn(group, version);
    if (types.empty()) return std::nullopt;
    ojson v = ojson::object();
    v["kind"] = "APIResourceList";
    if (!core) v["apiVersion"] = "v1";
    v["groupVersion"] = core ? version : group + "/" + version;
    v["resources"] = ojson::array();
    for (const ResourceType* t : types) {
      ojson r = ojson::object();
      r["name"] = t->plural;
      r["singularName"] = t->singular;
      r["namespaced"] = t->namespaced;
      r["kind"] = t->kind;
      r["verbs"] = t->custom ? ojson::array({"delete", "deletecollection", "get", "list", "patch",
                                             "create", "update", "watch"})
                             : ojson::array({"create", "delete", "deletecollection", "get", "list",
                                             "patch", "update", "watch"});
      if (!t->short_names.empty()) r["shortNames"] = t->short_names;
      if (!t->categories.empty()) r["categories"] = t->categories;
      v["resources"].push_back(r);
      if (t->status_subresource) {
        ojson s = ojson::object();
        s["name"] = t->plural + "/status";
        s["singularName"] = "";
        s["namespaced"] = t->namespaced;
        s["kind"] = t->kind;
        s["verbs"] = {"get", "patch", "update"};
        v["resources"].push_back(s);
      }
    }
    return ok(v);
  }
  return std::nullopt;
}

// --- admission -----------------------------------------------------------------------------

std::optional<ApiError> FakeApiServer::Impl::Admit(const ResourceType& t, const HttpRequest* req,
                                                   json* obj, const json* old,
                                                   std::vector<std::string>* warnings) {
  std::string name = MetaString(*obj, "name");
  if (t.custom && t.schema.is_object()) {
    std::vector<std::string> pruned;
    PruneUnknownFields(t.schema, obj, &pruned);
    if (!pruned.empty() && req != nullptr && req->Query("fieldValidation") == "Strict") {
      std::string list;
      for (const auto& p : pruned)
        list += (list.empty() ? "" : ", ") + ("unknown field \"" + p + "\"");
      return BadRequest(t.kind + " in version \"" + t.version + "\" cannot be handled as a " +
                        t.kind + ": strict decoding error: " + list);
    }
    for (const auto& p : pruned) warnings->push_back("unknown field \"" + p + "\"");
    ApplyDefaults(t.schema, obj);
    std::vector<Cause> causes;
    ValidateSchema(t.schema, *obj, &causes);
    // The real server skips the CEL rules of an object whose types are already wrong.
    bool type_errors = false;
    for (const auto& c : causes) type_errors = type_errors || c.reason == "FieldValueTypeInvalid";
    if (!type_errors) ValidateCelRules(t.schema, *obj, old, &causes);
    if (!causes.empty()) {
      return InvalidError(t.qualified_kind(), name, Details(name, t, false), causes);
    }
  }
  return std::nullopt;
}

void FakeApiServer::Impl::ApplyBuiltinDefaults(const ResourceType& t, json* obj, bool create) {
  if (t.group.empty() && t.plural == "pods") {
    json& spec = (*obj)["spec"];
    if (!spec.is_object()) spec = json::object();
    if (!spec.contains("restartPolicy")) spec["restartPolicy"] = "Always";
    if (!spec.contains("terminationGracePeriodSeconds")) spec["terminationGracePeriodSeconds"] = 30;
    if (!spec.contains("dnsPolicy")) spec["dnsPolicy"] = "ClusterFirst";
    if (!spec.contains("securityContext")) spec["securityContext"] = json::object();
    if (!spec.contains("schedulerName")) spec["schedulerName"] = "default-scheduler";
    if (!spec.contains("enableServiceLinks")) spec["enableServiceLinks"] = true;
    if (!spec.contains("priority")) spec["priority"] = 0;
    if (!spec.contains("preemptionPolicy")) spec["preemptionPolicy"] = "PreemptLowerPriority";
    bool any_resources = false;
    for (const char* list : {"containers", "initContainers"}) {
      if (!spec.contains(list) || !spec[list].is_array()) continue;
      for (auto& c : spec[list]) {
        if (!c.contains("terminationMessagePath")) {
          c["terminationMessagePath"] = "/dev/termination-log";
        }
        if (!c.contains("terminationMessagePolicy")) c["terminationMessagePolicy"] = "File";
        if (!c.contains("imagePullPolicy")) {
          std::string image = c.value("image", "");
          bool latest = image.find(':') == std::string::npos ||
                        (image.size() >= 7 && image.substr(image.size() - 7) == ":latest");
          c["imagePullPolicy"] = latest ? "Always" : "IfNotPresent";
        }
        if (!c.contains("resources")) c["resources"] = json::object();
        json& res = c["resources"];
        for (const char* kind : {"limits", "requests"}) {
          if (res.contains(kind) && res[kind].is_object()) {
            for (auto& [k, v] : res[kind].items()) v = QuantityString(v);
            any_resources = any_resources || !res[kind].empty();
          }
        }
        if (res.contains("limits") && res["limits"].is_object()) {
          for (auto& [k, v] : res["limits"].items()) {
            if (!res["requests"].contains(k)) res["requests"][k] = v;
          }
        }
      }
    }
    if (create) {
      (*obj)["status"] = {{"phase", "Pending"},
                          {"qosClass", any_resources ? "Burstable" : "BestEffort"}};
    }
  } else if (t.group.empty() && t.plural == "services") {
    json& spec = (*obj)["spec"];
    if (!spec.is_object()) spec = json::object();
    if (!spec.contains("type")) spec["type"] = "ClusterIP";
    if (!spec.contains("sessionAffinity")) spec["sessionAffinity"] = "None";
    if (create && !spec.contains("clusterIP")) {
      static std::atomic<int> next_ip{10};
      int n = next_ip++;
      spec["clusterIP"] = "10.96." + std::to_string(n / 250) + "." + std::to_string(n % 250 + 1);
    }
    if (!spec.contains("clusterIPs")) spec["clusterIPs"] = {spec["clusterIP"]};
    if (!spec.contains("ipFamilies")) spec["ipFamilies"] = {"IPv4"};
    if (!spec.contains("ipFamilyPolicy")) spec["ipFamilyPolicy"] = "SingleStack";
    if (!spec.contains("internalTrafficPolicy")) spec["internalTrafficPolicy"] = "Cluster";
    if (spec.contains("ports") && spec["ports"].is_array()) {
      for (auto& p : spec["ports"]) {
        if (!p.contains("protocol")) p["protocol"] = "TCP";
        if (!p.contains("targetPort") && p.contains("port")) p["targetPort"] = p["port"];
      }
    }
    if (create) (*obj)["status"] = {{"loadBalancer", json::object()}};
  } else if (t.group.empty() && t.plural == "secrets") {
    if (!obj->contains("type")) (*obj)["type"] = "Opaque";
    if (obj->contains("stringData") && (*obj)["stringData"].is_object()) {
      for (auto& [k, v] : (*obj)["stringData"].items()) {
        (*obj)["data"][k] = Base64Encode(v.is_string() ? v.get<std::string>() : v.dump(), false);
      }
      obj->erase("stringData");
    }
  } else if (t.group.empty() && t.plural == "persistentvolumeclaims") {
    json& spec = (*obj)["spec"];
    if (!spec.is_object()) spec = json::object();
    if (!spec.contains("volumeMode")) spec["volumeMode"] = "Filesystem";
    if (create) {
      // The StorageObjectInUseProtection admission plugin; no provisioner here, so Pending.
      json& finalizers = (*obj)["metadata"]["finalizers"];
      if (!finalizers.is_array()) finalizers = json::array();
      if (std::find(finalizers.begin(), finalizers.end(), kPvcProtectionFinalizer) ==
          finalizers.end()) {
        finalizers.push_back(kPvcProtectionFinalizer);
      }
      (*obj)["status"] = {{"phase", "Pending"}};
    }
  } else if (t.group.empty() && t.plural == "resourcequotas") {
    if (create) {
      json hard = obj->value(json::json_pointer("/spec/hard"), json::object());
      (*obj)["status"] = {{"hard", hard}, {"used", json::object()}};
    }
  } else if (t.group == "apps" && t.plural == "deployments") {
    json& spec = (*obj)["spec"];
    if (!spec.contains("replicas")) spec["replicas"] = 1;
    if (!spec.contains("revisionHistoryLimit")) spec["revisionHistoryLimit"] = 10;
    if (!spec.contains("progressDeadlineSeconds")) spec["progressDeadlineSeconds"] = 600;
    if (create) (*obj)["status"] = json::object();
  } else if (t.group == "apiextensions.k8s.io") {
    *obj = FinishCrd(std::move(*obj));
  }
}

std::optional<ApiError> FakeApiServer::Impl::ValidateBuiltin(const ResourceType& t,
                                                             const json& obj) {
  std::string name = MetaString(obj, "name");
  std::vector<Cause> causes;
  if (t.group.empty() && t.plural == "pods") {
    const json& spec = obj.contains("spec") ? obj["spec"] : json::object();
    if (!spec.contains("containers") || !spec["containers"].is_array() ||
        spec["containers"].empty()) {
      causes.push_back({"FieldValueRequired", "Required value", "spec.containers"});
    }
  } else if (t.group.empty() && t.plural == "persistentvolumeclaims") {
    if (!obj.contains(json::json_pointer("/spec/resources/requests/storage"))) {
      causes.push_back({"FieldValueRequired", "Required value", "spec.resources[storage]"});
    }
  } else if (t.group == "coordination.k8s.io" && t.plural == "leases") {
    const json& spec = obj.contains("spec") ? obj["spec"] : json::object();
    if (spec.contains("leaseDurationSeconds") && spec["leaseDurationSeconds"].is_number() &&
        spec["leaseDurationSeconds"].get<double>() <= 0) {
      causes.push_back(
          {"FieldValueInvalid",
           "Invalid value: " + GoValue(spec["leaseDurationSeconds"]) + ": must be greater than 0",
           "spec.leaseDurationSeconds"});
    }
  } else if (t.group == "apiextensions.k8s.io") {
    const json& spec = obj.contains("spec") ? obj["spec"] : json::object();
    std::string expected = spec.value(json::json_pointer("/names/plural"), std::string()) + "." +
                           spec.value("group", std::string());
    if (name != expected) {
      causes.push_back(
          {"FieldValueInvalid",
           "Invalid value: \"" + name + "\": must be spec.names.plural+\".\"+spec.group",
           "metadata.name"});
    }
    if (!spec.contains("versions") || !spec["versions"].is_array() || spec["versions"].empty()) {
      causes.push_back({"FieldValueRequired", "Required value", "spec.versions"});
    } else {
      // Loud, not silently lenient: a rule this fake cannot evaluate would let through what
      // the real server refuses.
      for (std::size_t i = 0; i < spec["versions"].size(); ++i) {
        const json& v = spec["versions"][i];
        if (!v.contains("schema")) continue;
        if (v["schema"].contains("openAPIV3Schema")) {
          UntypedCelRules(v["schema"]["openAPIV3Schema"],
                          "spec.versions[" + std::to_string(i) + "].schema.openAPIV3Schema",
                          &causes);
        }
        for (const auto& rule : UnknownCelRules(v["schema"])) {
          return ApiError{500, "InternalError",
                          "fake-apiserver: cannot evaluate the x-kubernetes-validations rule " +
                              json(rule).dump() + " of " + name +
                              ": teach tests/fakes/apiserver/cel.cc",
                          nullptr};
        }
      }
    }
  }
  if (causes.empty()) return std::nullopt;
  return InvalidError(t.qualified_kind(), name, Details(name, t, false), causes);
}

std::optional<ApiError> FakeApiServer::Impl::AdmitCreate(const ResourceType& t, const json& obj) {
  if (!t.group.empty() || t.plural != "pods") return std::nullopt;
  const std::string name = MetaString(obj, "name");
  const std::string ns = MetaString(obj, "namespace");
  auto forbidden = [&](const std::string& why) {
    return ApiError{403, "Forbidden", "pods \"" + name + "\" is forbidden: " + why,
                    Details(name, t, true)};
  };
  const auto& namespaces = Objects(builtin_[0]);
  if (auto it = namespaces.find(ObjKey("", ns)); it != namespaces.end()) {
    const json labels = Meta(it->second).value("labels", json::object());
    if (labels.value(kEnforceLabel, "") == "restricted") {
      if (auto violations = RestrictedViolations(obj)) {
        return forbidden("violates PodSecurity \"restricted:latest\": " + *violations);
      }
    }
  }
  std::int64_t used = 0;
  for (const auto& [key, pod] : Objects(t)) {
    if (MetaString(pod, "namespace") == ns &&
        CountsAgainstPodQuota(pod, std::chrono::system_clock::now()))
      ++used;
  }
  for (const auto& [key, quota] : Objects(Type("resourcequotas"))) {
    if (MetaString(quota, "namespace") != ns) continue;
    if (auto exceeded = PodQuotaExceeded(quota, used)) return forbidden(*exceeded);
  }
  return std::nullopt;
}

const ResourceType& FakeApiServer::Impl::Type(const std::string& plural) const {
  for (const auto& t : builtin_) {
    if (t.group.empty() && t.plural == plural) return t;
  }
  std::abort();  // only called with the core types of BuiltinTypes()
}

void FakeApiServer::Impl::RefreshQuotas(const std::string& ns) {
  const ResourceType& quotas = Type("resourcequotas");
  std::vector<json> changed;
  for (const auto& [key, quota] : Objects(quotas)) {
    if (MetaString(quota, "namespace") != ns ||
        !quota.contains(json::json_pointer("/spec/hard/pods"))) {
      continue;
    }
    std::int64_t used = 0;
    for (const auto& [pkey, pod] : Objects(Type("pods"))) {
      if (MetaString(pod, "namespace") == ns &&
          CountsAgainstPodQuota(pod, std::chrono::system_clock::now()))
        ++used;
    }
    json next = quota;
    next["status"]["hard"] = next["spec"]["hard"];
    next["status"]["used"]["pods"] = std::to_string(used);
    if (next != quota) changed.push_back(std::move(next));
  }
  for (auto& q : changed) {
    json prev = Objects(quotas)[ObjKey(ns, MetaString(q, "name"))];
    Store(quotas, std::move(q), "MODIFIED", &prev);
  }
}

void FakeApiServer::Impl::ReleaseUnusedClaims(const std::string& ns) {
  const ResourceType& claims = Type("persistentvolumeclaims");
  std::vector<json> released;
  for (const auto& [key, claim] : Objects(claims)) {
    if (MetaString(claim, "namespace") != ns || MetaString(claim, "deletionTimestamp").empty()) {
      continue;
    }
    bool used = false;
    for (const auto& [pkey, pod] : Objects(Type("pods"))) {
      used = used ||
             (MetaString(pod, "namespace") == ns && PodUsesClaim(pod, MetaString(claim, "name")));
    }
    if (!used) released.push_back(claim);
  }
  for (auto& claim : released) {
    json& finalizers = claim["metadata"]["finalizers"];
    finalizers.erase(std::remove(finalizers.begin(), finalizers.end(), kPvcProtectionFinalizer),
                     finalizers.end());
    if (finalizers.empty()) {
      Remove(claims, claim);
    } else {
      json prev = Objects(claims)[ObjKey(ns, MetaString(claim, "name"))];
      Store(claims, claim, "MODIFIED", &prev);
    }
  }
}

// --- storage -------------------------------------------------------------------------------

json FakeApiServer::Impl::Store(const ResourceType& t, json obj, const char* type,
                                const json* previous) {
  obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
  obj["apiVersion"] = t.gv();
  obj["kind"] = t.kind;
  Objects(t)[ObjKey(MetaString(obj, "namespace"), MetaString(obj, "name"))] = obj;
  Emit(t, type, obj, previous);
  if (t.group.empty() && t.plural == "pods") RefreshQuotas(MetaString(obj, "namespace"));
  return obj;
}

void FakeApiServer::Impl::Remove(const ResourceType& t, const json& obj) {
  Objects(t).erase(ObjKey(MetaString(obj, "namespace"), MetaString(obj, "name")));
  json gone = obj;
  gone["metadata"]["resourceVersion"] = std::to_string(++rv_);
  Emit(t, "DELETED", gone, nullptr);
  if (t.group.empty() && t.plural == "pods") {
    RefreshQuotas(MetaString(obj, "namespace"));
    ReleaseUnusedClaims(MetaString(obj, "namespace"));
  }
  if (t.group == "apiextensions.k8s.io") {
    UnregisterCrd(obj);
    objects_.erase(obj["spec"].value("group", "") + "/" + obj["spec"]["names"].value("plural", ""));
  }
}

void FakeApiServer::Impl::Emit(const ResourceType& t, const char* type, const json& obj,
                               const json* previous) {
  log_.push_back({rv_, t.key(), type, obj, previous != nullptr ? *previous : json()});
  last_rv_by_key_[t.key()] = rv_;
  while (log_.size() > options_.event_history) {
    compacted_rv_ = log_.front().rv;
    log_.pop_front();
  }
  cv_.notify_all();
}

json FakeApiServer::Impl::FinishCrd(json crd) {
  json& spec = crd["spec"];
  json& names = spec["names"];
  std::string kind = names.value("kind", "");
  if (!names.contains("listKind")) names["listKind"] = kind + "List";
  if (!names.contains("singular")) {
    std::string lower = kind;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    names["singular"] = lower;
  }
  if (!spec.contains("conversion")) spec["conversion"] = {{"strategy", "None"}};
  std::string now = Rfc3339Now();
  std::string storage;
  if (spec.contains("versions") && spec["versions"].is_array()) {
    for (const auto& v : spec["versions"]) {
      if (v.value("storage", false)) storage = v.value("name", "");
    }
  }
  crd["status"] = {{"conditions",
                    {{{"type", "NamesAccepted"},
                      {"status", "True"},
                      {"lastTransitionTime", now},
                      {"reason", "NoConflicts"},
                      {"message", "no conflicts found"}},
                     {{"type", "Established"},
                      {"status", "True"},
                      {"lastTransitionTime", now},
                      {"reason", "InitialNamesAccepted"},
                      {"message", "the initial names have been accepted"}}}},
                   {"acceptedNames", names},
                   {"storedVersions", json::array({storage})}};
  return crd;
}

void FakeApiServer::Impl::RegisterCrd(const json& crd) {
  UnregisterCrd(crd);
  const json& spec = crd["spec"];
  for (const auto& v : spec["versions"]) {
    if (!v.value("served", false)) continue;
    ResourceType t;
    t.group = spec.value("group", "");
    t.version = v.value("name", "");
    t.plural = spec["names"].value("plural", "");
    t.singular = spec["names"].value("singular", "");
    t.kind = spec["names"].value("kind", "");
    t.namespaced = spec.value("scope", "Namespaced") == "Namespaced";
    t.custom = true;
    t.has_generation = true;
    t.require_rv_on_update = true;
    t.status_subresource = v.contains("subresources") && v["subresources"].contains("status");
    if (spec["names"].contains("shortNames")) {
      t.short_names = spec["names"]["shortNames"].get<std::vector<std::string>>();
    }
    if (spec["names"].contains("categories")) {
      t.categories = spec["names"]["categories"].get<std::vector<std::string>>();
    }
    if (v.contains("schema") && v["schema"].contains("openAPIV3Schema")) {
      t.schema = v["schema"]["openAPIV3Schema"];
    }
    t.printer_columns = v.value("additionalPrinterColumns", json::array());
    custom_[t.group + "/" + t.version + "/" + t.plural] = t;
  }
}

void FakeApiServer::Impl::UnregisterCrd(const json& crd) {
  const json& spec = crd["spec"];
  std::string group = spec.value("group", "");
  std::string plural = spec["names"].value("plural", "");
  for (auto it = custom_.begin(); it != custom_.end();) {
    if (it->second.group == group && it->second.plural == plural) {
      it = custom_.erase(it);
    } else {
      ++it;
    }
  }
}

json FakeApiServer::Impl::ForOutput(const ResourceType& t, json obj) const {
  if (!t.custom) obj.erase("managedFields");
  return obj;
}

// --- verbs ---------------------------------------------------------------------------------

Result FakeApiServer::Impl::Get(const HttpRequest& req, const Route& route) {
  const ResourceType& t = *route.type;
  auto& objs = Objects(t);
  auto it = objs.find(ObjKey(route.ns, route.name));
  if (it == objs.end()) return NotFoundError(t, route.name);
  HttpResponse r;
  if (req.Header("accept").find("as=Table") != std::string::npos) {
    r.body = ToTable(t, {&it->second}, req.Query("includeObject"),
                     MetaString(it->second, "resourceVersion"))
                 .dump() +
             "\n";
  } else {
    r.body = it->second.dump() + "\n";
  }
  return r;
}

json FakeApiServer::Impl::ListBody(const ResourceType& t, std::vector<json> items,
                                   const std::string& cont,
                                   std::optional<std::int64_t> remaining) const {
  json meta = {{"resourceVersion", std::to_string(rv_)}};
  if (t.custom) meta["continue"] = cont;
  if (!t.custom && !cont.empty()) meta["continue"] = cont;
  if (remaining) meta["remainingItemCount"] = *remaining;
  if (!t.custom) {
    for (auto& i : items) {
      i.erase("apiVersion");
      i.erase("kind");
    }
  }
  return {{"apiVersion", t.gv()},
          {"kind", t.kind + "List"},
          {"metadata", meta},
          {"items", items.empty() ? json::array() : json(items)}};
}

Result FakeApiServer::Impl::List(const HttpRequest& req, const Route& route) {
  const ResourceType& t = *route.type;
  auto labels = LabelSelector::Parse(req.Query("labelSelector"));
  if (!labels.ok()) return BadRequest(labels.status().message());
  auto fields = FieldSelector::Parse(req.Query("fieldSelector"));
  if (!fields.ok()) return BadRequest(fields.status().message());
  std::string start;
  if (std::string cont = req.Query("continue"); !cont.empty()) {
    json token;
    if (auto d = Base64Decode(cont)) token = json::parse(*d, nullptr, false);
    if (!token.is_object() || !token.contains("start") || !token.contains("rv")) {
      return BadRequest("invalid continue token: continue key is not valid");
    }
    // A continuation reads the list as of the token's resourceVersion, which compaction removed.
    if (token["rv"].get<std::int64_t>() <= compacted_rv_) {
      return ApiError{410, "Expired",
                      "The provided continue parameter is too old to display a consistent list "
                      "result. You can start a new list without the continue parameter.",
                      nullptr};
    }
    start = token["start"].get<std::string>();
  }
  std::string rv_param = req.Query("resourceVersion");
  if (req.Query("resourceVersionMatch") == "Exact" && !rv_param.empty() &&
      std::strtoll(rv_param.c_str(), nullptr, 10) < compacted_rv_) {
    return ApiError{410, "Expired", "The resourceVersion for the provided list is too old.",
                    nullptr};
  }
  std::int64_t limit = std::strtoll(req.Query("limit").c_str(), nullptr, 10);
  std::vector<const json*> matched;
  std::vector<std::string> keys;
  for (const auto& [key, obj] : Objects(t)) {
    if (t.namespaced && !route.ns.empty() && MetaString(obj, "namespace") != route.ns) continue;
    std::string rel = route.ns.empty() ? key : MetaString(obj, "name");
    if (!start.empty() && rel < start) continue;
    if (!labels->Matches(obj) || !fields->Matches(obj)) continue;
    matched.push_back(&obj);
    keys.push_back(rel);
  }
  std::string cont;
  std::optional<std::int64_t> remaining;
  if (limit > 0 && static_cast<std::int64_t>(matched.size()) > limit) {
    remaining = static_cast<std::int64_t>(matched.size()) - limit;
    json token = {{"v", "meta.k8s.io/v1"}, {"rv", rv_}, {"start", keys[limit - 1] + '\0'}};
    cont = Base64Encode(token.dump(), true);
    matched.resize(static_cast<std::size_t>(limit));
  }
  HttpResponse r;
  if (req.Header("accept").find("as=Table") != std::string::npos) {
    json table = ToTable(t, matched, req.Query("includeObject"), std::to_string(rv_));
    if (!cont.empty()) table["metadata"]["continue"] = cont;
    if (remaining) table["metadata"]["remainingItemCount"] = *remaining;
    r.body = table.dump() + "\n";
    return r;
  }
  std::vector<json> items;
  for (const json* o : matched) items.push_back(ForOutput(t, *o));
  r.body = ListBody(t, std::move(items), cont, remaining).dump() + "\n";
  return r;
}

json FakeApiServer::Impl::ToTable(const ResourceType& t, const std::vector<const json*>& items,
                                  const std::string& include_object, const std::string& rv) const {
  ojson cols = ojson::array();
  auto col = [&](const std::string& name, const std::string& type, const std::string& format,
                 const std::string& description, int priority) {
    ojson c = ojson::object();
    c["name"] = name;
    c["type"] = type;
    c["format"] = format;
    c["description"] = description;
    c["priority"] = priority;
    cols.push_back(c);
  };
  col("Name", "string", "name", kNameDescription, 0);
  if (t.custom) {
    for (const auto& pc : t.printer_columns) {
      col(pc.value("name", ""), pc.value("type", "string"), pc.value("format", ""),
          pc.value("description", "Custom resource definition column (in JSONPath format): " +
                                      pc.value("jsonPath", "")),
          pc.value("priority", 0));
    }
  } else if (t.plural == "pods") {
    col("Ready", "string", "", "The aggregate readiness state of this pod for accepting traffic.",
        0);
    col("Status", "string", "", "The aggregate status of the containers in this pod.", 0);
    col("Restarts", "string", "",
        "The number of times the containers in this pod have been restarted.", 0);
    col("Age", "string", "", kAgeDescription, 0);
  } else if (t.plural == "namespaces") {
    col("Status", "string", "", "The status of the namespace", 0);
    col("Age", "string", "", kAgeDescription, 0);
  } else {
    col("Created At", "date", "", kAgeDescription, 0);
  }
  ojson rows = ojson::array();
  for (const json* obj : items) {
    ojson cells = ojson::array();
    cells.push_back(MetaString(*obj, "name"));
    if (t.custom) {
      for (const auto& pc : t.printer_columns) {
        const json* v = EvalJsonPath(*obj, pc.value("jsonPath", ""));
        std::string type = pc.value("type", "string");
        if (v == nullptr || v->is_null()) {
          cells.push_back(nullptr);
        } else if (type == "date") {
          auto when = v->is_string() ? ParseRfc3339(v->get<std::string>()) : std::nullopt;
          cells.push_back(when ? HumanDuration(std::chrono::duration_cast<std::chrono::seconds>(
                                                   std::chrono::system_clock::now() - *when)
                                                   .count())
                               : "<invalid>");
        } else if (type == "string" && !v->is_string()) {
          cells.push_back(v->dump());
        } else {
          cells.push_back(ojson::parse(v->dump()));
        }
      }
    } else if (t.plural == "pods") {
      int total = 0, ready = 0, restarts = 0;
      if (obj->contains("spec") && (*obj)["spec"].contains("containers")) {
        total = static_cast<int>((*obj)["spec"]["containers"].size());
      }
      std::string status = obj->value(json::json_pointer("/status/phase"), std::string("Pending"));
      if (obj->contains("status") && (*obj)["status"].contains("containerStatuses")) {
        for (const auto& cs : (*obj)["status"]["containerStatuses"]) {
          if (cs.value("ready", false)) ++ready;
          restarts += cs.value("restartCount", 0);
          if (cs.contains("state") && cs["state"].contains("terminated")) {
            status = cs["state"]["terminated"].value("reason", status);
          }
        }
      }
      if (!MetaString(*obj, "deletionTimestamp").empty()) status = "Terminating";
      cells.push_back(std::to_string(ready) + "/" + std::to_string(total));
      cells.push_back(status);
      cells.push_back(std::to_string(restarts));
      cells.push_back(Age(*obj));
    } else if (t.plural == "namespaces") {
      cells.push_back(obj->value(json::json_pointer("/status/phase"), std::string("Active")));
      cells.push_back(Age(*obj));
    } else {
      cells.push_back(MetaString(*obj, "creationTimestamp"));
    }
    ojson row = ojson::object();
    row["cells"] = cells;
    if (include_object == "Object") {
      row["object"] = ojson::parse(obj->dump());
    } else if (include_object != "None") {
      ojson partial = ojson::object();
      partial["kind"] = "PartialObjectMetadata";
      partial["apiVersion"] = "meta.k8s.io/v1";
      partial["metadata"] = ojson::parse(Meta(*obj).dump());
      row["object"] = partial;
    }
    rows.push_back(row);
  }
  ojson table = ojson::object();
  table["kind"] = "Table";
  table["apiVersion"] = "meta.k8s.io/v1";
  table["metadata"] = {{"resourceVersion", rv}};
  table["columnDefinitions"] = cols;
  table["rows"] = rows;
  // Parsed back into json so callers can add fields; key order is re-sorted only in nested
  // objects, which clients do not care about.
  return json::parse(table.dump());
}

Result FakeApiServer::Impl::Create(const HttpRequest& req, const Route& route, json body) {
  const ResourceType& t = *route.type;
  json& meta = body["metadata"];
  if (!meta.is_object()) meta = json::object();
  if (t.namespaced) {
    std::string ns = meta.value("namespace", "");
    if (!ns.empty() && ns != route.ns) {
      return BadRequest(
          "the namespace of the provided object does not match the namespace sent on the "
          "request");
    }
    meta["namespace"] = route.ns;
    const ResourceType& ns_type = builtin_[0];
    if (Objects(ns_type).count(ObjKey("", route.ns)) == 0) {
      return NotFoundError(ns_type, route.ns);
    }
  } else {
    meta.erase("namespace");
  }
  std::string name = meta.value("name", "");
  if (name.empty() && meta.contains("generateName")) {
    name = meta["generateName"].get<std::string>() + RandomSuffix();
    meta["name"] = name;
  }
  if (name.empty()) {
    return InvalidError(t.qualified_kind(), "", Details("", t, false),
                        {{"FieldValueRequired", "Required value: name or generateName is required",
                          "metadata.name"}});
  }
  if (t.group.empty() && t.plural == "services" && !IsDns1035Label(name)) {
    return InvalidError(t.qualified_kind(), name, Details(name, t, false),
                        {{"FieldValueInvalid", Dns1035Message(name), "metadata.name"}});
  }
  if (!IsDnsSubdomain(name) && t.plural != "customresourcedefinitions" &&
      t.group != "rbac.authorization.k8s.io") {
    return InvalidError(
        t.qualified_kind(), name, Details(name, t, false),
        {{"FieldValueInvalid",
          "Invalid value: \"" + name +
              "\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
              "characters, '-' or '.', and must start and end with an alphanumeric character "
              "(e.g. 'example.com', regex used for validation is "
              "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
          "metadata.name"}});
  }
  if (Objects(t).count(ObjKey(t.namespaced ? route.ns : "", name)) > 0) {
    return ApiError{409, "AlreadyExists", t.qualified() + " \"" + name + "\" already exists",
                    Details(name, t, true)};
  }
  std::string api_version = body.value("apiVersion", "");
  std::string kind = body.value("kind", "");
  if ((!kind.empty() && kind != t.kind) || (!api_version.empty() && api_version != t.gv())) {
    return BadRequest("the API version in the data (" + api_version +
                      ") does not match the expected API version (" + t.gv() + ")");
  }
  body["apiVersion"] = t.gv();
  body["kind"] = t.kind;
  if (t.status_subresource && t.custom) body.erase("status");
  std::vector<std::string> warnings;
  if (auto err = Admit(t, &req, &body, nullptr, &warnings)) return *err;
  ApplyBuiltinDefaults(t, &body, true);
  if (auto err = ValidateBuiltin(t, body)) return *err;
  if (auto err = AdmitCreate(t, body)) return *err;
  meta = body["metadata"];
  for (const char* f : {"resourceVersion", "uid", "creationTimestamp", "deletionTimestamp",
                        "managedFields", "generation", "selfLink"}) {
    meta.erase(f);
  }
  meta["uid"] = RandomUuid();
  meta["creationTimestamp"] = Rfc3339Now();
  if (t.has_generation) meta["generation"] = 1;
  body["metadata"] = meta;
  json stored = Store(t, std::move(body), "ADDED", nullptr);
  if (t.group == "apiextensions.k8s.io") RegisterCrd(stored);
  HttpResponse r;
  r.code = 201;
  // Warning values quote the message the way Go's %q does.
  for (const auto& w : warnings) r.headers.push_back({"Warning", "299 - " + json(w).dump()});
  r.body = ForOutput(t, stored).dump() + "\n";
  return r;
}

Result FakeApiServer::Impl::Update(const HttpRequest& req, const Route& route, json body,
                                   bool unconditional) {
  const ResourceType& t = *route.type;
  auto& objs = Objects(t);
  auto it = objs.find(ObjKey(route.ns, route.name));
  if (!body.contains("metadata") || !body["metadata"].is_object())
    body["metadata"] = json::object();
  std::string body_name = MetaString(body, "name");
  if (!body_name.empty() && body_name != route.name) {
    return BadRequest("the name of the object (" + body_name +
                      ") does not match the name on the URL (" + route.name + ")");
  }
  if (t.namespaced) {
    std::string ns = MetaString(body, "namespace");
    if (!ns.empty() && ns != route.ns) {
      return BadRequest(
          "the namespace of the provided object does not match the namespace sent on the "
          "request");
    }
  }
  if (it == objs.end()) return NotFoundError(t, route.name);
  const json old = it->second;
  if (!unconditional) {
    std::string rv = MetaString(body, "resourceVersion");
    if (rv.empty() || rv == "0") {
      if (t.require_rv_on_update) {
        ojson d = Details(route.name, t, true);
        return InvalidError(
            t.qualified(), route.name, d,
            {{"FieldValueInvalid", "Invalid value: 0x0: must be specified for an update",
              "metadata.resourceVersion"}});
      }
    } else {
      char* end = nullptr;
      std::strtoull(rv.c_str(), &end, 10);
      if (end == nullptr || *end != '\0') {
        return ApiError{
            500, "", "strconv.ParseUint: parsing " + json(rv).dump() + ": invalid syntax", nullptr};
      }
      if (rv != MetaString(old, "resourceVersion")) return ConflictError(t, route.name);
    }
  }
  json next;
  if (route.sub == "status") {
    next = old;
    if (body.contains("status")) {
      next["status"] = body["status"];
    } else {
      next.erase("status");
    }
  } else {
    next = std::move(body);
    next["apiVersion"] = t.gv();
    next["kind"] = t.kind;
    if (t.status_subresource) {
      if (old.contains("status")) {
        next["status"] = old["status"];
      } else {
        next.erase("status");
      }
    }
  }
  CarryServerMetadata(old, &next);
  std::vector<std::string> warnings;
  if (auto err = Admit(t, &req, &next, &old, &warnings)) return *err;
  ApplyBuiltinDefaults(t, &next, false);
  if (auto err = ValidateBuiltin(t, next)) return *err;
  if (t.group.empty() && t.plural == "persistentvolumeclaims" && route.sub.empty() &&
      next.value("spec", json::object()) != old.value("spec", json::object())) {
    // No claim is ever bound here (no provisioner), so every spec change is refused.
    return InvalidError(t.qualified_kind(), route.name, Details(route.name, t, false),
                        {{"FieldValueForbidden",
                          PvcSpecImmutableMessage(old.value("spec", json::object()),
                                                  next.value("spec", json::object())),
                          "spec"}});
  }
  if (t.has_generation) {
    json a = old, b = next;
    for (json* o : {&a, &b}) {
      o->erase("metadata");
      o->erase("status");
    }
    std::int64_t gen = old["metadata"].value("generation", 1);
    next["metadata"]["generation"] = a == b ? gen : gen + 1;
  }
  next["metadata"]["resourceVersion"] = MetaString(old, "resourceVersion");
  HttpResponse r;
  if (next == old) {  // an effectively empty update keeps the resourceVersion
    r.body = ForOutput(t, old).dump() + "\n";
    return r;
  }
  const json* finalizers =
      next["metadata"].contains("finalizers") ? &next["metadata"]["finalizers"] : nullptr;
  // store.go's ShouldDeleteDuringUpdate: a terminating object whose finalizers are gone goes,
  // unless its deletion grace still runs (a pod waiting for its kubelet, whose status patches
  // keep it: t4-05-binding-graceful-delete.txt).
  const auto grace = next["metadata"].find("deletionGracePeriodSeconds");
  const bool grace_runs = grace != next["metadata"].end() && grace->is_number_integer() &&
                          grace->get<std::int64_t>() > 0;
  if (!MetaString(next, "deletionTimestamp").empty() &&
      (finalizers == nullptr || finalizers->empty()) && !grace_runs) {
    objs[ObjKey(route.ns, route.name)] = next;
    Remove(t, next);
    r.body = ForOutput(t, next).dump() + "\n";
    return r;
  }
  json stored = Store(t, std::move(next), "MODIFIED", &old);
  if (t.group == "apiextensions.k8s.io") RegisterCrd(stored);
  r.body = ForOutput(t, stored).dump() + "\n";
  return r;
}

Result FakeApiServer::Impl::Patch(const HttpRequest& req, const Route& route) {
  const ResourceType& t = *route.type;
  std::string ct = req.Header("content-type");
  ct = ct.substr(0, ct.find(';'));
  auto& objs = Objects(t);
  auto it = objs.find(ObjKey(route.ns, route.name));
  if (ct == "application/apply-patch+yaml") {
    if (req.Query("fieldManager").empty()) {
      return InvalidError(
          "PatchOptions.meta.k8s.io", "", ojson{{"group", "meta.k8s.io"}, {"kind", "PatchOptions"}},
          {{"FieldValueRequired", "Required value: is required for apply patch", "fieldManager"}});
    }
    json body;
    try {
      body = YamlToJson(YAML::Load(req.body));
    } catch (const YAML::Exception& e) {
      return BadRequest(std::string("error decoding YAML: ") + e.what());
    }
    if (!body.is_object() || !body.contains("apiVersion") || !body.contains("kind")) {
      return BadRequest("invalid object type: /, Kind=");
    }
    if (it == objs.end()) {
      if (route.sub == "status") return NotFoundError(t, route.name);
      body["metadata"]["name"] = route.name;
      return Create(req, route, std::move(body));
    }
    json next = it->second;
    next.merge_patch(body);
    next["metadata"]["resourceVersion"] = MetaString(it->second, "resourceVersion");
    return Update(req, route, std::move(next), true);
  }
  if (it == objs.end()) return NotFoundError(t, route.name);
  json patch = json::parse(req.body, nullptr, false);
  if (patch.is_discarded()) return BadRequest("error decoding patch: invalid JSON");
  json next = it->second;
  if (ct == "application/merge-patch+json") {
    next.merge_patch(patch);
  } else if (ct == "application/strategic-merge-patch+json") {
    if (t.custom) {
      return ApiError{415, "UnsupportedMediaType",
                      "the body of the request was in an unknown format - accepted media types "
                      "include: application/json-patch+json, application/merge-patch+json, "
                      "application/apply-patch+yaml",
                      nullptr};
    }
    StrategicMerge(&next, patch);
  } else if (ct == "application/json-patch+json") {
    try {
      next = next.patch(patch);
    } catch (const json::exception& e) {
      return ApiError{
          422, "Invalid",
          std::string("the server rejected our request due to an error in our request: ") +
              e.what(),
          nullptr};
    }
  } else {
    return ApiError{415, "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/json-patch+json, application/merge-patch+json, "
                    "application/apply-patch+yaml",
                    nullptr};
  }
  // A uid in the patch is no precondition answered 409 (as DELETE's is): the patched object
  // would change metadata.uid, which the real server refuses as immutable (an empty one is
  // filled in), with the cause given twice (transcripts/t4-02-pod-merge-patch-uid.txt; the
  // same for a ConfigMap and a TrainingJob).
  if (const std::string uid = MetaString(next, "uid");
      !uid.empty() && uid != MetaString(it->second, "uid")) {
    const std::string message = "Invalid value: " + json(uid).dump() + ": field is immutable";
    ojson details = Details(route.name, t, false);
    ojson cause = {
        {"reason", "FieldValueInvalid"}, {"message", message}, {"field", "metadata.uid"}};
    details["causes"] = ojson::array({cause, cause});
    return ApiError{
        422, "Invalid",
        t.qualified_kind() + " \"" + route.name + "\" is invalid: metadata.uid: " + message,
        details};
  }
  std::string precondition = MetaString(next, "resourceVersion");
  if (precondition != MetaString(it->second, "resourceVersion")) {
    return ConflictError(t, route.name);
  }
  return Update(req, route, std::move(next), true);
}

// As recorded on v1.28 (transcripts/t4-05-binding-graceful-delete.txt): 201 with a Status, the pod
// bound (spec.nodeName, PodScheduled=True); 409 when it already has a node, 404 when missing.
Result FakeApiServer::Impl::Bind(const HttpRequest& req, const Route& route) {
  const ResourceType& t = *route.type;
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return BadRequest(
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml");
  }
  std::string named;
  if (const auto meta = body.find("metadata"); meta != body.end() && meta->is_object()) {
    if (const auto n = meta->find("name"); n != meta->end() && n->is_string()) {
      named = n->get<std::string>();
    }
  }
  if (named != route.name) {
    return ApiError{400, "BadRequest", "name in URL does not match name in Binding object",
                    nullptr};
  }
  std::string node;
  std::string kind;
  if (const auto target = body.find("target"); target != body.end() && target->is_object()) {
    if (const auto n = target->find("name"); n != target->end() && n->is_string()) {
      node = n->get<std::string>();
    }
    if (const auto k = target->find("kind"); k != target->end() && k->is_string()) {
      kind = k->get<std::string>();
    }
  }
  if (!kind.empty() && kind != "Node") {
    return ApiError{
        500, "",
        "target.kind: Unsupported value: \"" + kind + "\": supported values: \"Node\", \"<empty>\"",
        nullptr};
  }
  if (node.empty()) {
    return ApiError{500, "", "target.name: Required value", nullptr};
  }
  auto& objs = Objects(t);
  auto it = objs.find(ObjKey(route.ns, route.name));
  if (it == objs.end()) return NotFoundError(t, route.name);
  json obj = it->second;
  const json spec = obj.value("spec", json::object());
  auto conflict = [&route](const std::string& why) {
    ojson d = ojson::object();
    d["name"] = route.name;
    d["kind"] = "pods/binding";
    return ApiError{409, "Conflict",
                    "Operation cannot be fulfilled on pods/binding \"" + route.name + "\": " + why,
                    d};
  };
  if (!MetaString(obj, "deletionTimestamp").empty()) {
    return conflict("pod " + route.name + " is being deleted, cannot be assigned to a host");
  }
  if (const auto bound = spec.find("nodeName");
      bound != spec.end() && bound->is_string() && !bound->get<std::string>().empty()) {
    return conflict("pod " + route.name + " is already assigned to node \"" +
                    bound->get<std::string>() + "\"");
  }
  const json prev = obj;
  obj["spec"]["nodeName"] = node;
  if (!obj.contains("status") || !obj["status"].is_object()) obj["status"] = json::object();
  // PodScheduled=True, in place of one the scheduler wrote (Unschedulable), else appended.
  const json scheduled = {{"type", "PodScheduled"},
                          {"status", "True"},
                          {"lastProbeTime", nullptr},
                          {"lastTransitionTime", Rfc3339Now()}};
  json conditions = json::array();
  bool replaced = false;
  if (const auto c = obj["status"].find("conditions"); c != obj["status"].end() && c->is_array()) {
    for (const auto& cond : *c) {
      const bool is = cond.is_object() && cond.value("type", "") == "PodScheduled";
      conditions.push_back(is ? scheduled : cond);
      replaced = replaced || is;
    }
  }
  if (!replaced) conditions.push_back(scheduled);
  obj["status"]["conditions"] = std::move(conditions);
  Store(t, obj, "MODIFIED", &prev);
  return ApiError{201, "", "", nullptr};
}

bool FakeApiServer::Impl::MarkDeleted(const ResourceType& t, json* obj, const json& opts) {
  const json& m = (*obj)["metadata"];
  const bool has_finalizers =
      m.contains("finalizers") && m["finalizers"].is_array() && !m["finalizers"].empty();
  const bool pod = t.group.empty() && t.plural == "pods";
  if (!has_finalizers && !pod) return false;
  const json prev = *obj;
  // A negative grace is 1 (t4-05-binding-graceful-delete.txt's last sections).
  std::optional<std::int64_t> asked;
  if (const auto g = opts.find("gracePeriodSeconds"); g != opts.end() && g->is_number_integer()) {
    asked = g->get<std::int64_t>() < 0 ? 1 : g->get<std::int64_t>();
  }
  const auto now = std::chrono::system_clock::now();
  bool graceful = false;  // a pod that stays, Terminating, until its kubelet deletes it with 0
  if (MetaString(*obj, "deletionTimestamp").empty()) {
    // As recorded on v1.28 (transcripts/t4-03-pod-delete-grace.txt, t4-04-ended-pod-delete.txt):
    // a running pod bound to a node gets the grace asked for (DeleteOptions.gracePeriodSeconds),
    // else its own terminationGracePeriodSeconds (30 by default), and a deletionTimestamp that
    // far ahead; an unbound pod, or one that has ended (Succeeded, Failed), goes at once.
    std::int64_t grace = 0;
    const json spec = obj->value("spec", json::object());
    std::string phase;
    if (const auto st = obj->find("status"); st != obj->end() && st->is_object()) {
      if (const auto ph = st->find("phase"); ph != st->end() && ph->is_string()) {
        phase = ph->get<std::string>();
      }
    }
    const auto node = spec.is_object() ? spec.find("nodeName") : spec.end();
    if (pod && node != spec.end() && node->is_string() && !node->get<std::string>().empty() &&
        phase != "Succeeded" && phase != "Failed") {
      grace = 30;
      if (const auto g = spec.find("terminationGracePeriodSeconds");
          g != spec.end() && g->is_number_integer()) {
        grace = g->get<std::int64_t>();
      }
      if (asked) grace = *asked;
    }
    (*obj)["metadata"]["deletionTimestamp"] = FormatRfc3339(now + std::chrono::seconds(grace));
    (*obj)["metadata"]["deletionGracePeriodSeconds"] = grace;
    *obj = Store(t, *obj, "MODIFIED", &prev);
    graceful = pod && grace > 0;
  } else if (pod) {
    // Already terminating (t4-05-binding-graceful-delete.txt): another delete may only shorten
    // the grace, counted from the first delete (deletionTimestamp - old grace + new grace); 0
    // (the kubelet's, once the containers have stopped) removes the pod.
    const auto had = (*obj)["metadata"].find("deletionGracePeriodSeconds");
    const std::int64_t current =
        had != (*obj)["metadata"].end() && had->is_number_integer() ? had->get<std::int64_t>() : 0;
    graceful = current > 0;
    if (asked && *asked < current) {
      const WallTime at = ParseRfc3339(MetaString(*obj, "deletionTimestamp"))
                              .value_or(std::chrono::floor<std::chrono::seconds>(now) +
                                        std::chrono::seconds(current));
      (*obj)["metadata"]["deletionTimestamp"] =
          FormatRfc3339(at - std::chrono::seconds(current) + std::chrono::seconds(*asked));
      (*obj)["metadata"]["deletionGracePeriodSeconds"] = *asked;
      *obj = Store(t, *obj, "MODIFIED", &prev);
      graceful = *asked > 0;
    }
  }
  return has_finalizers || graceful;
}

Result FakeApiServer::Impl::Delete(const HttpRequest& req, const Route& route) {
  const ResourceType& t = *route.type;
  json opts = req.body.empty() ? json::object() : json::parse(req.body, nullptr, false);
  if (opts.is_discarded()) opts = json::object();
  std::string policy = opts.value("propagationPolicy", req.Query("propagationPolicy"));
  if (!policy.empty() && policy != "Foreground" && policy != "Background" && policy != "Orphan") {
    return InvalidError("DeleteOptions.meta.k8s.io", "",
                        ojson{{"group", "meta.k8s.io"}, {"kind", "DeleteOptions"}},
                        {{"FieldValueNotSupported",
                          "Unsupported value: \"" + policy +
                              "\": supported values: \"Foreground\", \"Background\", \"Orphan\", "
                              "\"nil\"",
                          "propagationPolicy"}});
  }
  auto& objs = Objects(t);
  auto it = objs.find(ObjKey(route.ns, route.name));
  if (it == objs.end()) return NotFoundError(t, route.name);
  json obj = it->second;
  if (opts.contains("preconditions") && opts["preconditions"].is_object()) {
    const json& pre = opts["preconditions"];
    std::string uid = pre.value("uid", "");
    std::string rv = pre.value("resourceVersion", "");
    if (!uid.empty() && uid != MetaString(obj, "uid")) {
      return ApiError{409, "Conflict",
                      "Operation cannot be fulfilled on " + t.kind + " \"" + route.name +
                          "\": the UID in the precondition (" + uid +
                          ") does not match the UID in record (" + MetaString(obj, "uid") +
                          "). The object might have been deleted and then recreated",
                      Details(route.name, t, false)};
    }
    if (!rv.empty() && rv != MetaString(obj, "resourceVersion")) {
      return ApiError{409, "Conflict",
                      "Operation cannot be fulfilled on " + t.kind + " \"" + route.name +
                          "\": the ResourceVersion in the precondition (" + rv +
                          ") does not match the ResourceVersion in record (" +
                          MetaString(obj, "resourceVersion") +
                          "). The object might have been modified",
                      Details(route.name, t, false)};
    }
  }
  HttpResponse r;
  if (MarkDeleted(t, &obj, opts)) {
    r.body = ForOutput(t, obj).dump() + "\n";
    if (t.group.empty() && t.plural == "persistentvolumeclaims") ReleaseUnusedClaims(route.ns);
    return r;
  }
  Remove(t, obj);
  if (t.custom) {
    ojson d = Details(route.name, t, true);
    d["uid"] = MetaString(obj, "uid");
    return ApiError{200, "", "", d};
  }
  r.body = ForOutput(t, obj).dump() + "\n";
  return r;
}

Result FakeApiServer::Impl::DeleteCollection(const HttpRequest& req, const Route& route) {
  const ResourceType& t = *route.type;
  auto labels = LabelSelector::Parse(req.Query("labelSelector"));
  if (!labels.ok()) return BadRequest(labels.status().message());
  auto fields = FieldSelector::Parse(req.Query("fieldSelector"));
  if (!fields.ok()) return BadRequest(fields.status().message());
  std::vector<json> victims;
  for (const auto& [key, obj] : Objects(t)) {
    if (t.namespaced && !route.ns.empty() && MetaString(obj, "namespace") != route.ns) continue;
    if (labels->Matches(obj) && fields->Matches(obj)) victims.push_back(obj);
  }
  // Each as its own DELETE would go (a bound pod stays terminating, finalizers hold).
  json opts = req.body.empty() ? json::object() : json::parse(req.body, nullptr, false);
  if (opts.is_discarded() || !opts.is_object()) opts = json::object();
  for (auto& v : victims) {
    if (!MarkDeleted(t, &v, opts)) Remove(t, v);
  }
  HttpResponse r;
  r.body = ListBody(t, victims, "", std::nullopt).dump() + "\n";
  return r;
}

ojson FakeApiServer::Impl::BookmarkObject(const ResourceType& t, std::int64_t rv) const {
  ojson o = ojson::object();
  if (t.custom) {
    o["apiVersion"] = t.gv();
    o["kind"] = t.kind;
    o["metadata"] = {{"resourceVersion", std::to_string(rv)}};
    return o;
  }
  o["kind"] = t.kind;
  o["apiVersion"] = t.gv();
  ojson meta = ojson::object();
  meta["resourceVersion"] = std::to_string(rv);
  meta["creationTimestamp"] = nullptr;
  o["metadata"] = meta;
  if (t.plural == "pods") {
    o["spec"] = {{"containers", nullptr}};
    o["status"] = ojson::object();
  }
  return o;
}

bool FakeApiServer::Impl::ServeWatch(Conn* conn, const HttpRequest& req, const Route& route) {
  const ResourceType& t = *route.type;
  auto labels = LabelSelector::Parse(req.Query("labelSelector"));
  auto fields = FieldSelector::Parse(req.Query("fieldSelector"));
  bool table = req.Header("accept").find("as=Table") != std::string::npos;
  std::string rv_param = req.Query("resourceVersion");
  bool from_now = rv_param.empty() || rv_param == "0";
  bool bookmarks = !from_now && (req.Query("allowWatchBookmarks") == "true" ||
                                 req.Query("allowWatchBookmarks") == "1");
  std::optional<SteadyTime> deadline;
  if (std::string ts = req.Query("timeoutSeconds"); !ts.empty()) {
    deadline = DeadlineAfter(std::chrono::seconds(std::strtoll(ts.c_str(), nullptr, 10)));
  }
  auto send = [&](const std::string& data) {
    return net::SendAll(conn->socket, data.data(), data.size(),
                        DeadlineAfter(std::chrono::seconds(30)))
        .ok();
  };
  auto event_line = [&](const std::string& type, const json& obj) {
    std::string body;
    if (table) {
      body =
          ToTable(t, {&obj}, req.Query("includeObject"), MetaString(obj, "resourceVersion")).dump();
    } else {
      body = obj.dump();
    }
    return Chunk("{\"type\":\"" + type + "\",\"object\":" + body + "}\n");
  };
  auto matches = [&](const json& obj) {
    if (obj.is_null()) return false;
    if (t.namespaced && !route.ns.empty() && MetaString(obj, "namespace") != route.ns) return false;
    return labels->Matches(obj) && fields->Matches(obj);
  };
  if (!send(StreamHeaders(200, "application/json"))) return false;

  std::unique_lock<std::mutex> lock(mu_);
  std::int64_t seen = 0;
  std::vector<std::string> pending;
  if (from_now) {
    for (const auto& [key, obj] : objects_[t.key()]) {
      if (matches(obj)) pending.push_back(event_line("ADDED", obj));
    }
    seen = rv_;
  } else {
    seen = std::strtoll(rv_param.c_str(), nullptr, 10);
    if (seen < compacted_rv_) {
      ojson st = ojson::object();
      st["kind"] = "Status";
      st["apiVersion"] = "v1";
      st["metadata"] = ojson::object();
      st["status"] = "Failure";
      st["message"] =
          "too old resource version: " + rv_param + " (" + std::to_string(compacted_rv_) + ")";
      st["reason"] = "Expired";
      st["code"] = 410;
      lock.unlock();
      return send(Chunk("{\"type\":\"ERROR\",\"object\":" + st.dump() + "}\n")) && send(kLastChunk);
    }
  }
  std::int64_t sent_rv = seen;
  const std::int64_t start_rv = seen;
  std::uint64_t epoch = watch_epoch_;
  ++open_watches_;
  auto next_bookmark = std::chrono::steady_clock::now() + options_.bookmark_interval;
  bool final_bookmark_sent = false;
  bool clean_end = false;
  bool alive = true;
  for (;;) {
    for (auto it = std::upper_bound(log_.begin(), log_.end(), seen,
                                    [](std::int64_t rv, const Event&e) { return rv < e.rv; });
         it != log_.end(); ++it) {
      seen = it->rv;
      if (it->key != t.key()) continue;
      bool now_in = matches(it->object);
      bool was_in = matches(it->previous);
      std::string type = it->type;
      if (type == "MODIFIED") {
        if (now_in && !was_in) type = "ADDED";
        if (!now_in && was_in) type = "DELETED";
        if (!now_in && !was_in) continue;
      } else if (!now_in) {
        continue;
      }
      pending.push_back(event_line(type, it->object));
      sent_rv = it->rv;
    }
    auto now = std::chrono::steady_clock::now();
    if (bookmarks) {
      bool before_deadline =
          deadline && !final_bookmark_sent && now >= *deadline - kBookmarkBeforeDeadline;
      if (now >= next_bookmark || before_deadline) {
        // Like the watch cache: the resource's latest resourceVersion, sent once the resource
        // has moved past where this watch started (repeats are allowed, as in t2-09).
        auto last = last_rv_by_key_.find(t.key());
        std::int64_t bookmark_rv =
            std::max(sent_rv, last == last_rv_by_key_.end() ? 0 : last->second);
        if (bookmark_rv > start_rv) {
          sent_rv = bookmark_rv;
          pending.push_back(Chunk(
              "{\"type\":\"BOOKMARK\",\"object\":" + BookmarkObject(t, sent_rv).dump() + "}\n"));
        }
        if (before_deadline) final_bookmark_sent = true;
        next_bookmark = now + options_.bookmark_interval;
      }
    }
    if (!pending.empty()) {
      std::vector<std::string> out;
      out.swap(pending);
      lock.unlock();
      for (const auto& chunk : out) alive = alive && send(chunk);
      lock.lock();
      if (!alive) break;
    }
    if (stopping_) break;
    if (epoch != watch_epoch_ || (deadline && std::chrono::steady_clock::now() >= *deadline)) {
      clean_end = true;
      break;
    }
    // Notice a client that went away while nothing was being written.
    pollfd pfd{conn->socket.fd(), POLLIN | POLLRDHUP, 0};
    if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      alive = false;
      break;
    }
    auto wake = std::chrono::steady_clock::now() + kWatchPoll;
    if (bookmarks) wake = std::min(wake, next_bookmark);
    if (deadline) wake = std::min(wake, *deadline);
    cv_.wait_until(lock, wake);
  }
  --open_watches_;
  lock.unlock();
  if (clean_end && alive) return send(kLastChunk);
  return false;
}

// --- direct access -------------------------------------------------------------------------

const ResourceType* FakeApiServer::Impl::TypeForDirect(const ResourceId& id) const {
  for (const auto& t : builtin_) {
    if (t.group == id.group && t.plural == id.resource) return &t;
  }
  for (const auto& [k, t] : custom_) {
    if (t.group == id.group && t.plural == id.resource) return &t;
  }
  return nullptr;
}

std::optional<json> FakeApiServer::Impl::DirectGet(const ResourceId& id, const std::string& ns,
                                                   const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ResourceType* t = TypeForDirect(id);
  if (t == nullptr) return std::nullopt;
  auto objs = objects_.find(t->key());
  if (objs == objects_.end()) return std::nullopt;
  auto it = objs->second.find(ObjKey(t->namespaced ? ns : "", name));
  if (it == objs->second.end()) return std::nullopt;
  return it->second;
}

std::vector<json> FakeApiServer::Impl::DirectList(const ResourceId& id, const std::string& ns,
                                                  const std::string& selector) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<json> out;
  const ResourceType* t = TypeForDirect(id);
  auto labels = LabelSelector::Parse(selector);
  if (t == nullptr || !labels.ok()) return out;
  auto objs = objects_.find(t->key());
  if (objs == objects_.end()) return out;
  for (const auto& [key, obj] : objs->second) {
    if (!ns.empty() && MetaString(obj, "namespace") != ns) continue;
    if (labels->Matches(obj)) out.push_back(obj);
  }
  return out;
}

namespace {
Status ToStatus(const Result& r) {
  if (const auto* e = std::get_if<ApiError>(&r); e != nullptr && e->code >= 300) {
    StatusCode code = e->code == 404   ? StatusCode::kNotFound
                      : e->code == 409 ? (e->reason == "AlreadyExists" ? StatusCode::kAlreadyExists
                                                                       : StatusCode::kAborted)
                      : e->code == 422 ? StatusCode::kInvalidArgument
                                       : StatusCode::kInternal;
    return Status(code, e->message);
  }
  return Status::Ok();
}

json Body(const Result& r) {
  if (const auto* resp = std::get_if<HttpResponse>(&r)) return json::parse(resp->body);
  return json();
}
}  // namespace

StatusOr<json> FakeApiServer::Impl::DirectCreate(const ResourceId& id, const std::string& ns,
                                                 json obj) {
  std::lock_guard<std::mutex> lock(mu_);
  Route route;
  route.type = TypeForDirect(id);
  if (route.type == nullptr) return NotFound("no such resource " + id.resource);
  route.ns = route.type->namespaced ? ns : "";
  Result r = Create(HttpRequest{}, route, std::move(obj));
  RETURN_IF_ERROR(ToStatus(r));
  return Body(r);
}

StatusOr<json> FakeApiServer::Impl::DirectPatch(const ResourceId& id, const std::string& ns,
                                                const std::string& name, const json& patch,
                                                bool status_only) {
  std::lock_guard<std::mutex> lock(mu_);
  const ResourceType* t = TypeForDirect(id);
  if (t == nullptr) return NotFound("no such resource " + id.resource);
  auto& objs = Objects(*t);
  auto it = objs.find(ObjKey(t->namespaced ? ns : "", name));
  if (it == objs.end()) return NotFound(t->qualified() + " \"" + name + "\" not found");
  json prev = it->second;
  json next = prev;
  if (status_only) {
    json status = next.contains("status") ? next["status"] : json::object();
    status.merge_patch(patch);
    next["status"] = status;
  } else {
    next.merge_patch(patch);
  }
  if (next == prev) return prev;
  return Store(*t, std::move(next), "MODIFIED", &prev);
}

Status FakeApiServer::Impl::DirectDelete(const ResourceId& id, const std::string& ns,
                                         const std::string& name,
                                         std::optional<std::int64_t> grace_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  Route route;
  route.type = TypeForDirect(id);
  if (route.type == nullptr) return NotFound("no such resource " + id.resource);
  route.ns = route.type->namespaced ? ns : "";
  route.name = name;
  HttpRequest req;
  if (grace_seconds) req.body = json{{"gracePeriodSeconds", *grace_seconds}}.dump();
  return ToStatus(Delete(req, route));
}

// ------------------------------------------------------------------------------------------

std::unique_ptr<FakeApiServer> FakeApiServer::Create(FakeApiServerOptions options) {
  return std::unique_ptr<FakeApiServer>(
      new FakeApiServer(std::make_unique<Impl>(std::move(options))));
}

FakeApiServer::FakeApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeApiServer::~FakeApiServer() { impl_->Stop(); }

Status FakeApiServer::Start() { return impl_->Start(); }
void FakeApiServer::Stop() { impl_->Stop(); }
Status FakeApiServer::Restart(bool keep_state) {
  impl_->Stop();
  if (!keep_state) impl_->ResetState();
  return impl_->Start();
}
int FakeApiServer::port() const { return impl_->port(); }
std::string FakeApiServer::url() const { return "http://127.0.0.1:" + std::to_string(port()); }
void FakeApiServer::ForceCompaction() { impl_->ForceCompaction(); }
void FakeApiServer::CloseAllWatches() { impl_->CloseAllWatches(); }
void FakeApiServer::FailNextRequests(std::string_view method, std::string_view resource, int code,
                                     int count, int retry_after_seconds) {
  impl_->AddInjection(
      {std::string(method), std::string(resource), code, count, retry_after_seconds});
}
std::int64_t FakeApiServer::RequestCount(std::string_view method, std::string_view resource) const {
  return impl_->RequestCount(method, resource);
}
void FakeApiServer::RequireBearerTokens(std::vector<std::string> tokens) {
  impl_->RequireBearerTokens(std::move(tokens));
}
std::int64_t FakeApiServer::UnauthorizedCount() const { return impl_->UnauthorizedCount(); }
std::int64_t FakeApiServer::CurrentResourceVersion() const { return impl_->rv(); }
std::size_t FakeApiServer::OpenWatchCount() const { return impl_->open_watches(); }
std::optional<json> FakeApiServer::GetObject(const ResourceId& id, const std::string& ns,
                                             const std::string& name) const {
  return impl_->DirectGet(id, ns, name);
}
std::vector<json> FakeApiServer::ListObjects(const ResourceId& id, const std::string& ns,
                                             const std::string& label_selector) const {
  return impl_->DirectList(id, ns, label_selector);
}
StatusOr<json> FakeApiServer::CreateObject(const ResourceId& id, const std::string& ns,
                                           json object) {
  return impl_->DirectCreate(id, ns, std::move(object));
}
StatusOr<json> FakeApiServer::PatchStatus(const ResourceId& id, const std::string& ns,
                                          const std::string& name, const json& patch) {
  return impl_->DirectPatch(id, ns, name, patch, true);
}
StatusOr<json> FakeApiServer::PatchObject(const ResourceId& id, const std::string& ns,
                                          const std::string& name, const json& patch) {
  return impl_->DirectPatch(id, ns, name, patch, false);
}
Status FakeApiServer::DeleteObject(const ResourceId& id, const std::string& ns,
                                   const std::string& name,
                                   std::optional<std::int64_t> grace_seconds) {
  return impl_->DirectDelete(id, ns, name, grace_seconds);
}

}  // namespace ringtrain::fake
