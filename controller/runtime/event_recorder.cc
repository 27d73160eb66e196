#include "controller/runtime/event_recorder.h"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "common/time_format.h"
#include "common/utf8.h"

namespace ringtrain::op {

EventRecorder::EventRecorder(kube::KubeClient* client, std::string component, std::string instance,
                             std::size_t max_queued, std::atomic<bool>* writes_abandoned)
    : client_(client),
      component_(std::move(component)),
      instance_(std::move(instance)),
      max_queued_(max_queued),
      writes_abandoned_(writes_abandoned),
      thread_([this] { Loop(); }) {}

EventRecorder::~EventRecorder() { Flush(); }

void EventRecorder::Record(const nlohmann::json& object, const std::string& type,
                           const std::string& reason, const std::string& message) {
  const auto& meta = object.value("metadata", nlohmann::json::object());
  const auto now = std::chrono::system_clock::now();
  const std::string ts = FormatRfc3339(now);
  // Cut between characters: the request's JSON dump throws on a broken one (the event is lost).
  const std::string text =
      message.size() > 1024 ? message.substr(0, Utf8Cut(message, 1021)) + "..." : message;
  const std::string key = meta.value("namespace", "") + "\x1f" + meta.value("name", "") + "\x1f" +
                          meta.value("uid", "") + "\x1f" + type + "\x1f" + reason + "\x1f" + text;
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_ || queue_.size() >= max_queued_) return;
  if (auto it = seen_.find(key); it != seen_.end()) {
    Seen& s = it->second;
    ++s.count;
    s.serial = ++serial_;
    queue_.push_back({{{"count", s.count},
                       {"lastTimestamp", ts},
                       {"metadata", {{"namespace", meta.value("namespace", "")}}},
                       {"firstTimestamp", s.first_timestamp}},
                      s.name,
                      key});
    cv_.notify_one();
    return;
  }
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), ".%llx",
                static_cast<unsigned long long>(now.time_since_epoch().count()));
  const std::string name = meta.value("name", "") + suffix;
  nlohmann::json ev = {{"apiVersion", "v1"},
                       {"kind", "Event"},
                       {"metadata", {{"name", name}, {"namespace", meta.value("namespace", "")}}},
                       {"involvedObject",
                        {{"apiVersion", object.value("apiVersion", "")},
                         {"kind", object.value("kind", "")},
                         {"name", meta.value("name", "")},
                         {"namespace", meta.value("namespace", "")},
                         {"uid", meta.value("uid", "")}}},
                       {"type", type},
                       {"reason", reason},
                       {"message", text},
                       {"source", {{"component", component_}}},
                       {"reportingComponent", component_},
                       {"reportingInstance", instance_},
                       {"firstTimestamp", ts},
                       {"lastTimestamp", ts},
                       {"count", 1}};
  if (seen_.size() >= kMaxCorrelated) {
    auto oldest = seen_.begin();
    for (auto it = seen_.begin(); it != seen_.end(); ++it) {
      if (it->second.serial < oldest->second.serial) oldest = it;
    }
    seen_.erase(oldest);
  }
  seen_[key] = Seen{name, ts, 1, ++serial_};
  queue_.push_back({std::move(ev), "", key});
  cv_.notify_one();
}

void EventRecorder::Flush(Duration timeout) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
    if (thread_.joinable() && !cv_.wait_for(lock, timeout, [this] { return loop_done_; }) &&
        !queue_.empty()) {
      spdlog::warn("events: {} not written within {} at shutdown; dropped", queue_.size(),
                   FormatDuration(timeout));
      queue_.clear();
    }
  }
  // The budget is spent (or nothing is left): a write still waiting for a plugin is abandoned.
  if (writes_abandoned_ != nullptr) writes_abandoned_->store(true);
  if (thread_.joinable()) thread_.join();
}

std::size_t EventRecorder::QueuedForTest() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void EventRecorder::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {
      loop_done_ = true;
      cv_.notify_all();
      return;
    }
    Pending item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    nlohmann::json& ev = item.event;
    const std::string ns = ev["metadata"]["namespace"];
    if (!item.patch_of.empty()) {
      nlohmann::json patch = {{"count", ev["count"]}, {"lastTimestamp", ev["lastTimestamp"]}};
      auto r = client_->Patch(kube::kEvents, ns, item.patch_of, patch, kube::PatchType::kMerge);
      if (!r.ok()) {
        spdlog::debug("event {} not updated: {}", item.patch_of, r.status().ToString());
        // Expired (events live an hour) or never written: the next repeat starts a new one.
        std::lock_guard<std::mutex> relock(mu_);
        if (auto it = seen_.find(item.key); it != seen_.end() && it->second.name == item.patch_of) {
          seen_.erase(it);
        }
      }
    } else if (auto r = client_->Create(kube::kEvents, ns, ev); !r.ok()) {
      spdlog::debug("event {} not written: {}", ev["reason"].get<std::string>(),
                    r.status().ToString());
    }
    lock.lock();
  }
}

}  // namespace ringtrain::op
