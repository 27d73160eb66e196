// The Kubernetes API seam: typed errors over JSON objects, list/watch, and the few verbs the
// operator uses. Implementation over cpprestsdk in kube_client.cc (kept out of this header so
// cpprestsdk is compiled once); tests run it against tests/fakes/apiserver.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/event_counter.h"
#include "common/status.h"

namespace ringtrain::kube {

using Json = nlohmann::json;

// Where a resource lives: {"", "v1", "pods"} or {"ringtrain.dev", "v1alpha1", "trainingjobs"}.
struct Resource {
  std::string group;
  std::string version;
  std::string plural;
  bool namespaced = true;
};

inline const Resource kPods{"", "v1", "pods"};
inline const Resource kServices{"", "v1", "services"};
inline const Resource kSecrets{"", "v1", "secrets"};
inline const Resource kEvents{"", "v1", "events"};
inline const Resource kLeases{"coordination.k8s.io", "v1", "leases"};
inline const Resource kTrainingJobs{"ringtrain.dev", "v1alpha1", "trainingjobs"};
inline const Resource kNamespaces{"", "v1", "namespaces", false};
inline const Resource kCustomResourceDefinitions{"apiextensions.k8s.io", "v1",
                                                 "customresourcedefinitions", false};

// API errors map onto Status codes: 404 kNotFound, 409 AlreadyExists kAlreadyExists,
// 409 Conflict kAborted, 422 kInvalidArgument (message lists the causes), 410 kGone,
// 401 kUnauthenticated, 403 kPermissionDenied, 429 kResourceExhausted, 5xx and transport
// errors kUnavailable, client-side timeouts kDeadlineExceeded. The message is the server's.
struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;
  int limit = 0;
};

struct WatchOptions {
  std::string label_selector;
  std::string resource_version;
  bool allow_bookmarks = true;
  int timeout_seconds = 300;  // server-side end of the watch
};

struct WatchEvent {
  std::string type;  // ADDED | MODIFIED | DELETED | BOOKMARK | ERROR
  Json object;
};

class WatchStream {
 public:
  virtual ~WatchStream() = default;
  // The next event; nullopt when the server ended the stream. Times out with kDeadlineExceeded.
  virtual StatusOr<std::optional<WatchEvent>> Next(Duration timeout) = 0;
  virtual void Close() = 0;
  // Counts the Next() calls that found nothing and blocked, under the lock Close() takes: once
  // a test sees it move, a Close() can only reach the reader as a wake-up.
  virtual const EventCounter& BlockedNextsForTest() const = 0;
};

enum class PatchType { kMerge, kStrategicMerge, kJson };

struct DeleteOptions {
  std::string propagation_policy = "Background";
  std::string precondition_uid;
  // gracePeriodSeconds: a pod's termination grace for this delete (nullopt: the pod's own).
  std::optional<std::int64_t> grace_period_seconds;
};

class KubeClient {
 public:
  virtual ~KubeClient() = default;
  // ns is ignored for cluster-scoped resources; "" lists across all namespaces.
  virtual StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) = 0;
  virtual StatusOr<Json> List(const Resource& r, const std::string& ns,
                              const ListOptions& options) = 0;
  virtual StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) = 0;
  // PUT; the object's metadata.resourceVersion makes it conditional.
  virtual StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) = 0;
  virtual StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                                      const Json& object) = 0;
  virtual StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                               const Json& patch, PatchType type, bool status = false) = 0;
  virtual Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                        const DeleteOptions& options = {}) = 0;
  virtual StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                                       const WatchOptions& options) = 0;
};

}  // namespace ringtrain::kube
