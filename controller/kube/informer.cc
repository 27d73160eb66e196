#include "controller/kube/informer.h"
#include "common/json_fields.h"

#include <spdlog/spdlog.h>

namespace ringtrain::kube {
namespace {

std::string Meta(const Json& object, const char* field) {
  if (!object.is_object() || !object.contains("metadata") || !object["metadata"].is_object()) {
    return "";
  }
  const Json& m = object["metadata"];
  return m.contains(field) && m[field].is_string() ? m[field].get<std::string>() : "";
}

// A watch that ends this soon without an event is treated like an error (backoff), so a server
// that closes every watch at once is not hammered.
constexpr Duration kShortWatch{1'000};

}  // namespace

Informer::Informer(KubeClient* client, InformerOptions options)
    : client_(client), options_(std::move(options)) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (watch_ != nullptr) watch_->Close();
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool Informer::HasSynced() const {
  std::lock_guard<std::mutex> lock(mu_);
  return synced_;
}

bool Informer::WaitForSync(Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return synced_; });
}

std::optional<Json> Informer::Get(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find({options_.resource.namespaced ? ns : "", name});
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> Informer::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Json> out;
  out.reserve(cache_.size());
  for (const auto& [key, object] : cache_) out.push_back(object);
  return out;
}

std::string Informer::LastResourceVersion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_version_;
}

bool Informer::SleepUnlessStopped(Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stopping_; });
}

void Informer::Run() {
  Backoff backoff(options_.backoff);
  bool need_list = true;
  bool listed_once = false;
  const std::string what = options_.resource.plural;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
    if (need_list) {
      auto rv = ListAndReplace();
      if (!rv.ok()) {
        // A 404 of a list is a resource type the server does not serve (a CRD not installed).
        const Resource& r = options_.resource;
        spdlog::warn(
            "informer {}: list failed: {}{}", what, rv.status().ToString(),
            rv.status().code() == StatusCode::kNotFound
                ? " (the API server serves no " + r.plural +
                      (r.group.empty() ? "" : "." + r.group) + "/" + r.version +
                      (r.group.empty() ? "" : ": is its CustomResourceDefinition installed?") + ")"
                : std::string());
        if (options_.on_list_error) options_.on_list_error(rv.status());
        if (!SleepUnlessStopped(backoff.Next())) break;
        continue;
      }
      if (listed_once && options_.on_relist) options_.on_relist();
      listed_once = true;
      need_list = false;
    }
    std::string rv;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rv = resource_version_;
    }
    auto started = std::chrono::steady_clock::now();
    Status s = WatchOnce(rv);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
    if (options_.on_watch_restart) options_.on_watch_restart();
    if (s.code() == StatusCode::kGone) {
      spdlog::info("informer {}: resourceVersion {} expired, relisting", what, rv);
      need_list = true;
      continue;
    }
    bool short_lived = std::chrono::steady_clock::now() - started < kShortWatch;
    if (s.ok() && !short_lived) {
      backoff.Reset();
      continue;
    }
    if (!s.ok()) spdlog::warn("informer {}: watch failed: {}", what, s.ToString());
    if (!SleepUnlessStopped(backoff.Next())) break;
  }
  std::unique_ptr<WatchStream> last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = std::move(watch_);
  }
}

StatusOr<std::string> Informer::ListAndReplace() {
  ListOptions list_options;
  list_options.label_selector = options_.label_selector;
  ASSIGN_OR_RETURN(Json list, client_->List(options_.resource, options_.ns, list_options));
  std::string rv = Meta(list, "resourceVersion");
  std::map<Key, Json> fresh;
  if (list.contains("items") && list["items"].is_array()) {
    for (auto& item : list["items"]) {
      Key key{options_.resource.namespaced ? Meta(item, "namespace") : "", Meta(item, "name")};
      fresh[std::move(key)] = options_.transform ? options_.transform(item) : std::move(item);
    }
  }
  std::vector<Json> added, updated, deleted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, object] : fresh) {
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        added.push_back(object);
      } else if (Meta(it->second, "resourceVersion") != Meta(object, "resourceVersion")) {
        updated.push_back(object);
      }
    }
    for (const auto& [key, object] : cache_) {
      if (fresh.find(key) == fresh.end()) deleted.push_back(object);
    }
    cache_ = std::move(fresh);
    resource_version_ = rv;
  }
  for (const auto& o : deleted) {
    if (options_.on_delete) options_.on_delete(o);
  }
  for (const auto& o : added) {
    if (options_.on_add) options_.on_add(o);
  }
  for (const auto& o : updated) {
    if (options_.on_update) options_.on_update(o);
  }
  // Synced only once the handlers have seen the first list, as client-go's HasSynced.
  {
    std::lock_guard<std::mutex> lock(mu_);
    synced_ = true;
  }
  cv_.notify_all();
  return rv;
}

Status Informer::WatchOnce(const std::string& resource_version) {
  WatchOptions watch_options;
  watch_options.label_selector = options_.label_selector;
  watch_options.resource_version = resource_version;
  watch_options.allow_bookmarks = true;
  watch_options.timeout_seconds = options_.watch_timeout_seconds;
  ASSIGN_OR_RETURN(auto stream, client_->Watch(options_.resource, options_.ns, watch_options));
  WatchStream* w = stream.get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    watch_ = std::move(stream);
    if (stopping_) watch_->Close();
  }
  const Duration idle = Duration(options_.watch_timeout_seconds * 1000LL) + Duration(60'000);
  Status result;
  for (;;) {
    auto event = w->Next(idle);
    if (!event.ok()) {
      result = event.status();
      break;
    }
    if (!event->has_value()) break;  // the server ended the watch
    const WatchEvent& e = **event;
    if (e.type == "ERROR") {
      long long code = IntField(e.object, "code");
      std::string message = StringField(e.object, "message");
      result = code == 410 ? Status(StatusCode::kGone, message)
                           : Unavailable("watch ERROR event: " + e.object.dump());
      break;
    }
    if (e.type == "BOOKMARK") {
      std::string rv = Meta(e.object, "resourceVersion");
      std::lock_guard<std::mutex> lock(mu_);
      if (!rv.empty()) resource_version_ = rv;
      continue;
    }
    Apply(e.type, e.object);
  }
  std::unique_ptr<WatchStream> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done = std::move(watch_);
  }
  return result;
}

void Informer::Apply(const std::string& type, const Json& received) {
  const Json object = options_.transform ? options_.transform(received) : received;
  const Key key{options_.resource.namespaced ? Meta(object, "namespace") : "",
                Meta(object, "name")};
  const std::string rv = Meta(object, "resourceVersion");
  enum { kNone, kAdd, kUpdate, kDelete } action = kNone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!rv.empty()) resource_version_ = rv;
    auto it = cache_.find(key);
    if (type == "DELETED") {
      if (it != cache_.end()) {
        cache_.erase(it);
        action = kDelete;
      }
    } else if (type == "ADDED" || type == "MODIFIED") {
      if (it == cache_.end()) {
        cache_.emplace(key, object);
        action = kAdd;
      } else if (Meta(it->second, "resourceVersion") != rv) {
        // An ADDED for an object we hold is a replay after a reconnect: an update, not an add.
        it->second = object;
        action = kUpdate;
      }
    }
  }
  if (action == kAdd && options_.on_add) options_.on_add(object);
  if (action == kUpdate && options_.on_update) options_.on_update(object);
  if (action == kDelete && options_.on_delete) options_.on_delete(object);
}

}  // namespace ringtrain::kube
