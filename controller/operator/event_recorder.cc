#include "controller/operator/event_recorder.h"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "common/time_format.h"

namespace ringtrain::op {

EventRecorder::EventRecorder(kube::KubeClient* client, std::string component, std::string instance,
                             std::size_t max_queued)
    : client_(client),
      component_(std::move(component)),
      instance_(std::move(instance)),
      max_queued_(max_queued),
      thread_([this] { Loop(); }) {}

EventRecorder::~EventRecorder() { Flush(); }

void EventRecorder::Record(const nlohmann::json& object, const std::string& type,
                           const std::string& reason, const std::string& message) {
  const auto& meta = object.value("metadata", nlohmann::json::object());
  const auto now = std::chrono::system_clock::now();
  const std::string ts = FormatRfc3339(now);
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), ".%llx",
                static_cast<unsigned long long>(now.time_since_epoch().count()));
  nlohmann::json ev = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata",
       {{"name", meta.value("name", "") + suffix}, {"namespace", meta.value("namespace", "")}}},
      {"involvedObject",
       {{"apiVersion", object.value("apiVersion", "")},
        {"kind", object.value("kind", "")},
        {"name", meta.value("name", "")},
        {"namespace", meta.value("namespace", "")},
        {"uid", meta.value("uid", "")}}},
      {"type", type},
      {"reason", reason},
      {"message", message.size() > 1024 ? message.substr(0, 1021) + "..." : message},
      {"source", {{"component", component_}}},
      {"reportingComponent", component_},
      {"reportingInstance", instance_},
      {"firstTimestamp", ts},
      {"lastTimestamp", ts},
      {"count", 1}};
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_ || queue_.size() >= max_queued_) return;
  queue_.push_back(std::move(ev));
  cv_.notify_one();
}

void EventRecorder::Flush() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void EventRecorder::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    nlohmann::json ev = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const std::string ns = ev["metadata"]["namespace"];
    if (auto r = client_->Create(kube::kEvents, ns, ev); !r.ok()) {
      spdlog::debug("event {} not written: {}", ev["reason"].get<std::string>(),
                    r.status().ToString());
    }
    lock.lock();
  }
}

}  // namespace ringtrain::op
