// An in-memory KubeClient for unit tests of code above the client (the reconciler): objects by
// resource/namespace/name, resourceVersions, AlreadyExists/NotFound/Conflict, the status
// subresource, merge patches, equality label selectors, and a log of the writes made. No
// watches (Watch answers kUnavailable): tests drive caches directly.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "controller/kube/kube_client.h"

namespace ringtrain::kube::testing {

class FakeKubeClient final : public KubeClient {
 public:
  struct Write {
    std::string verb;  // create | update | update-status | patch | delete
    std::string plural;
    std::string ns;
    std::string name;
    std::optional<std::int64_t> grace;  // a delete's gracePeriodSeconds
  };

  StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_) return LostClient();
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return NotFound(r.plural + " \"" + name + "\" not found");
    return it->second;
  }

  StatusOr<Json> List(const Resource& r, const std::string& ns,
                      const ListOptions& options) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_) return LostClient();
    Json items = Json::array();
    for (const auto& [k, obj] : objects_) {
      if (std::get<0>(k) != r.group + "/" + r.plural) continue;
      if (!ns.empty() && r.namespaced && std::get<1>(k) != ns) continue;
      if (Matches(obj, options.label_selector)) items.push_back(obj);
    }
    return Json{{"kind", "List"},
                {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                {"items", items}};
  }

  StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) override {
    std::lock_guard<std::mutex> lock(mu_);
    Json obj = object;
    const std::string name = obj["metadata"].value("name", "");
    // One look at the failure list per call: a second would consume the next failure.
    if (Status st = Fail("create", r, ns, name); !st.ok()) return st;
    auto key = Key(r, ns, name);
    if (objects_.count(key)) return AlreadyExists(r.plural + " \"" + name + "\" already exists");
    obj["metadata"]["namespace"] = ns;
    obj["metadata"]["uid"] = "uid-" + std::to_string(++uid_);
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z";
    objects_[key] = obj;
    writes_.push_back({"create", r.plural, ns, name});
    Written("create", r);
    return obj;
  }

  StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) override {
    return Put(r, ns, object, false);
  }
  StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                              const Json& object) override {
    return Put(r, ns, object, true);
  }

  StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                       const Json& patch, PatchType, bool status) override {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Fail("patch", r, ns, name));
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return NotFound(r.plural + " \"" + name + "\" not found");
    Json p = status ? Json{{"status", patch.value("status", Json::object())}} : patch;
    // Another uid is a change of an immutable field, as the real API server answers it (422).
    if (const auto meta = p.find("metadata"); meta != p.end() && meta->is_object()) {
      const std::string uid = meta->value("uid", "");
      if (!uid.empty() && uid != it->second["metadata"].value("uid", "")) {
        return InvalidArgument(name + ": metadata.uid: Invalid value: \"" + uid +
                               "\": field is immutable");
      }
    }
    it->second.merge_patch(p);
    it->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
    writes_.push_back({"patch", r.plural, ns, name});
    Written("patch", r);
    return it->second;
  }

  Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                const DeleteOptions& options) override {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Fail("delete", r, ns, name));
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return NotFound(r.plural + " \"" + name + "\" not found");
    if (!options.precondition_uid.empty() &&
        it->second["metadata"].value("uid", "") != options.precondition_uid) {
      return Aborted("precondition failed: uid");
    }
    // A delete of grace 0 of a terminating pod removes it, as the real server does
    // (tests/fakes/apiserver/transcripts/t4-05-binding-graceful-delete.txt), unless a finalizer
    // keeps it: its grace is then 0.
    const Json& md = it->second["metadata"];
    const bool finalized = md.contains("finalizers") && !md["finalizers"].empty();
    const bool forced =
        r.plural == "pods" && options.grace_period_seconds == 0 && md.contains("deletionTimestamp");
    if (forced && finalized) {
      it->second["metadata"]["deletionGracePeriodSeconds"] = 0;
      it->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
    } else if (graceful_pod_deletes_ && r.plural == "pods" && !forced) {
      Json& meta = it->second["metadata"];
      if (!meta.contains("deletionTimestamp")) {
        meta["deletionTimestamp"] = "2030-01-01T00:00:00Z";
        meta["deletionGracePeriodSeconds"] = options.grace_period_seconds.value_or(30);
      }
      meta["resourceVersion"] = std::to_string(++rv_);
    } else {
      objects_.erase(it);
      ++rv_;
    }
    writes_.push_back({"delete", r.plural, ns, name, options.grace_period_seconds});
    Written("delete", r);
    return Status::Ok();
  }

  StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource&, const std::string&,
                                               const WatchOptions&) override {
    return Unavailable("FakeKubeClient has no watches");
  }

  // --- Test hooks ---------------------------------------------------------------------------
  // Objects as a kubelet or a user would change them, bypassing the write log.
  void Set(const Resource& r, const std::string& ns, const Json& object) {
    std::lock_guard<std::mutex> lock(mu_);
    Json obj = object;
    obj["metadata"]["resourceVersion"] = std::to_string(++rv_);
    objects_[Key(r, ns, obj["metadata"].value("name", ""))] = obj;
  }
  // The next `count` calls of `verb` on `plural` fail with `status`, after `skip` that succeed
  // (a quota that lets the first pods of a gang in).
  void FailNext(const std::string& verb, const std::string& plural, Status status, int count,
                int skip = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    failures_.push_back({verb, plural, std::move(status), count, skip});
  }
  // A pod's delete leaves it terminating (a deletionTimestamp) until the test removes it, as a
  // kubelet still stopping its containers does, instead of removing it at once.
  void GracefulPodDeletes() {
    std::lock_guard<std::mutex> lock(mu_);
    graceful_pod_deletes_ = true;
  }
  // The client of an operator lost (killed, its lease gone) right after its next `verb` on
  // `plural`: that write lands, and every call after it fails kUnavailable until Revive (the
  // same API for the next operator).
  void LoseAfter(const std::string& verb, const std::string& plural) {
    std::lock_guard<std::mutex> lock(mu_);
    lose_after_ = {verb, plural};
  }
  bool Lost() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }
  void Revive() {
    std::lock_guard<std::mutex> lock(mu_);
    lost_ = false;
    lose_after_ = {};
  }
  std::vector<Write> Writes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }
  int CountWrites(const std::string& verb, const std::string& plural) const {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& w : writes_) n += w.verb == verb && w.plural == plural ? 1 : 0;
    return n;
  }

 private:
  using ObjKey = std::tuple<std::string, std::string, std::string>;
  struct Failure {
    std::string verb;
    std::string plural;
    Status status;
    int remaining;
    int skip = 0;
  };

  static ObjKey Key(const Resource& r, const std::string& ns, const std::string& name) {
    return {r.group + "/" + r.plural, r.namespaced ? ns : "", name};
  }

  static Status LostClient() { return Unavailable("the operator is gone"); }
  void Written(const std::string& verb, const Resource& r) {
    if (lose_after_.first == verb && lose_after_.second == r.plural) lost_ = true;
  }

  Status Fail(const std::string& verb, const Resource& r, const std::string&, const std::string&) {
    if (lost_) return LostClient();
    for (auto it = failures_.begin(); it != failures_.end(); ++it) {
      if (it->verb == verb && it->plural == r.plural) {
        if (it->skip > 0) {
          --it->skip;
          return Status::Ok();
        }
        Status st = it->status;
        if (--it->remaining <= 0) failures_.erase(it);
        return st;
      }
    }
    return Status::Ok();
  }

  // "a=b,c" (equality and existence only).
  static bool Matches(const Json& obj, const std::string& selector) {
    if (selector.empty()) return true;
    const Json labels = obj.value("/metadata/labels"_json_pointer, Json::object());
    std::stringstream ss(selector);
    std::string term;
    while (std::getline(ss, term, ',')) {
      auto eq = term.find('=');
      if (eq == std::string::npos) {
        if (!labels.contains(term)) return false;
      } else if (labels.value(term.substr(0, eq), std::string("\x01")) != term.substr(eq + 1)) {
        return false;
      }
    }
    return true;
  }

  StatusOr<Json> Put(const Resource& r, const std::string& ns, const Json& object, bool status) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string name = object["metadata"].value("name", "");
    RETURN_IF_ERROR(Fail(status ? "update-status" : "update", r, ns, name));
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return NotFound(r.plural + " \"" + name + "\" not found");
    const std::string rv = object["metadata"].value("resourceVersion", "");
    if (!rv.empty() && rv != it->second["metadata"].value("resourceVersion", "")) {
      return Aborted("Operation cannot be fulfilled on " + r.plural + " \"" + name +
                     "\": the object has been modified");
    }
    if (status) {
      it->second["status"] = object.value("status", Json::object());
    } else {
      Json keep = it->second.value("status", Json());
      it->second = object;
      if (!keep.is_null()) it->second["status"] = keep;
    }
    it->second["metadata"]["resourceVersion"] = std::to_string(++rv_);
    writes_.push_back({status ? "update-status" : "update", r.plural, ns, name});
    Written(status ? "update-status" : "update", r);
    return it->second;
  }

  mutable std::mutex mu_;
  std::map<ObjKey, Json> objects_;
  std::vector<Write> writes_;
  std::vector<Failure> failures_;
  bool graceful_pod_deletes_ = false;
  std::pair<std::string, std::string> lose_after_;  // verb, plural
  bool lost_ = false;
  std::int64_t rv_ = 100;
  std::int64_t uid_ = 0;
};

}  // namespace ringtrain::kube::testing
