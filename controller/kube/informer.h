// A list+watch cache of one resource, like client-go's informer: lists, then watches from the
// list's resourceVersion with bookmarks, re-watches when the server ends a watch, relists on
// 410 Gone, reconnects with jittered backoff. Owns one thread; knows nothing about reconciling.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/backoff.h"
#include "controller/kube/kube_client.h"

namespace ringtrain::kube {

struct InformerOptions {
  Resource resource;
  std::string ns;  // "" = all namespaces
  std::string label_selector;
  int watch_timeout_seconds = 300;  // the server ends each watch after this; we re-watch
  BackoffOptions backoff{Duration(100), Duration(5'000), 2.0};
  // Applied to every object before it is cached or handed to a handler (client-go's
  // SetTransform): keep only what the consumer reads, so large caches stay small.
  std::function<Json(const Json&)> transform;
  // Handlers run on the informer thread, after the cache has changed; keep them short (enqueue a
  // key) and never throw. on_delete also fires for objects a relist finds gone (deleted during a
  // watch gap).
  std::function<void(const Json&)> on_add;
  std::function<void(const Json&)> on_update;
  std::function<void(const Json&)> on_delete;
  // Metrics hooks: a watch ended (by the server, an error or 410) and was opened again; a full
  // relist after the first list (410 Gone, or a watch that cannot resume).
  std::function<void()> on_watch_restart;
  std::function<void()> on_relist;
  // A list failed (retried with backoff): no resource type (a CRD not installed), RBAC, an API
  // server away. Until one succeeds the informer has nothing, and nothing is reconciled.
  std::function<void(const Status&)> on_list_error;
};

class Informer {
 public:
  // `client` must outlive the informer.
  Informer(KubeClient* client, InformerOptions options);
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void Start();
  // Closes the open watch and joins the thread; prompt (no waiting for the server).
  void Stop();

  // True once the first list has filled the cache and its on_add calls have returned.
  bool HasSynced() const;
  // Blocks until synced or the timeout; false on timeout.
  bool WaitForSync(Duration timeout) const;

  std::optional<Json> Get(const std::string& ns, const std::string& name) const;
  std::vector<Json> List() const;
  // The resourceVersion the next watch resumes from (the latest seen in events and bookmarks).
  std::string LastResourceVersion() const;

 private:
  using Key = std::pair<std::string, std::string>;  // namespace, name
  void Run();
  // Lists and replaces the cache, calling handlers for the differences. Returns the list's rv.
  StatusOr<std::string> ListAndReplace();
  // Watches until the stream ends. Returns kGone when a relist is needed.
  Status WatchOnce(const std::string& resource_version);
  void Apply(const std::string& type, const Json& received);
  // Sleeps up to `d` unless Stop() is called; false if stopping.
  bool SleepUnlessStopped(Duration d);

  KubeClient* const client_;
  const InformerOptions options_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<Key, Json> cache_;
  bool synced_ = false;
  bool stopping_ = false;
  std::string resource_version_;
  std::unique_ptr<WatchStream> watch_;  // guarded by mu_ so Stop() can Close() it

  std::thread thread_;
};

}  // namespace ringtrain::kube
