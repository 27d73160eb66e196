// A fake kube-apiserver for tests: HTTP/1.1 on 127.0.0.1 (port 0), JSON only, answering the way
// the transcripts in tests/fakes/apiserver/transcripts/ show (Status bodies, resourceVersion,
// 409/410/422, the status subresource, chunked watch streams with BOOKMARKs, Table output,
// CRD-served resources with their schema and x-kubernetes-validations rules, DNS-1035 Service
// names, PodSecurity "restricted" namespaces (label pod-security.kubernetes.io/enforce=restricted),
// ResourceQuota on pods, PersistentVolumeClaims). It owns no controller logic: no scheduler,
// kubelet or garbage collector, like the recording; only pvc-protection's release of an unused
// deleted claim is stood in for, so that a job's claim can go.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace YAML {
class Node;
}

namespace ringtrain::fake {

// A YAML manifest as the JSON kubectl would send: plain scalars typed (bool, null, number),
// quoted ones kept as strings.
nlohmann::json YamlToJson(const YAML::Node& node);

struct FakeApiServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: ephemeral
  // A watch with allowWatchBookmarks and a resourceVersion gets a BOOKMARK this often when the
  // resource has moved past what the watch has seen (the real server: about every 60 s).
  std::chrono::milliseconds bookmark_interval{1000};
  // Events kept for watches that resume from a resourceVersion; older ones are compacted (410).
  std::size_t event_history = 100000;
};

// Which resource a direct-access call means: group "" is the core API ("pods", "services").
struct ResourceId {
  std::string group;
  std::string resource;
};

class FakeApiServer {
 public:
  static std::unique_ptr<FakeApiServer> Create(FakeApiServerOptions options = {});
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  // Binds and serves on background threads. After Stop(), Start() binds the same port again.
  Status Start();
  // Closes the listener and every connection (open watches end without a final chunk).
  void Stop();
  // Stop + Start on the same port, as an API server restart looks to clients; with
  // keep_state=false every object is gone and resourceVersions continue from where they were.
  Status Restart(bool keep_state);
  int port() const;
  std::string url() const;  // "http://127.0.0.1:PORT"

  // --- Test hooks ---------------------------------------------------------------------------
  // Makes every resourceVersion up to now too old: watches from one get an ERROR 410 event.
  void ForceCompaction();
  // Ends every open watch stream cleanly (zero-length chunk), as the server's timeout does.
  void CloseAllWatches();
  // The next `count` requests with this method ("" = any) on this resource plural ("" = any)
  // get `code` with a Status body (429 adds Retry-After: retry_after_seconds).
  void FailNextRequests(std::string_view method, std::string_view resource, int code, int count,
                        int retry_after_seconds = 1);
  // Requests seen, by method and resource plural ("" = any), e.g. ("POST", "pods").
  std::int64_t RequestCount(std::string_view method, std::string_view resource) const;
  // Authentication as kube-apiserver does it with --anonymous-auth (t2-16-unauthenticated.txt):
  // once set, a bearer token outside `tokens` gets 401 Unauthorized and a request without one is
  // system:anonymous and gets 403 Forbidden. Unset (the default) accepts everyone. Callable any
  // time, to rotate or revoke tokens.
  void RequireBearerTokens(std::vector<std::string> tokens);
  // Requests refused with 401 so far.
  std::int64_t UnauthorizedCount() const;
  std::int64_t CurrentResourceVersion() const;
  std::size_t OpenWatchCount() const;

  // --- Direct object access (a kubelet stand-in, assertions) -----------------------------
  // Writes go through the same store as HTTP requests: resourceVersion bump and watch events.
  std::optional<nlohmann::json> GetObject(const ResourceId& id, const std::string& ns,
                                          const std::string& name) const;
  // label_selector in API syntax; ns "" = all namespaces.
  std::vector<nlohmann::json> ListObjects(const ResourceId& id, const std::string& ns,
                                          const std::string& label_selector = "") const;
  StatusOr<nlohmann::json> CreateObject(const ResourceId& id, const std::string& ns,
                                        nlohmann::json object);
  // Merge-patches .status only (how a kubelet reports pod phase, podIP, exit codes).
  StatusOr<nlohmann::json> PatchStatus(const ResourceId& id, const std::string& ns,
                                       const std::string& name, const nlohmann::json& patch);
  // Merge-patches the whole object (metadata and spec included), bypassing validation.
  StatusOr<nlohmann::json> PatchObject(const ResourceId& id, const std::string& ns,
                                       const std::string& name, const nlohmann::json& patch);
  // As a DELETE without options, or with DeleteOptions.gracePeriodSeconds `grace_seconds` (a
  // kubelet's 0 once a terminating pod's containers have stopped).
  Status DeleteObject(const ResourceId& id, const std::string& ns, const std::string& name,
                      std::optional<std::int64_t> grace_seconds = std::nullopt);

  class Impl;

 private:
  explicit FakeApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringtrain::fake
