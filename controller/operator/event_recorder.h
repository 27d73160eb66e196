// Core v1 Events about TrainingJobs, written off the reconcile path by one background thread
// (bounded queue: under an event storm the newest are dropped, never the reconcile slowed).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "controller/kube/kube_client.h"

namespace ringtrain::op {

class EventRecorder {
 public:
  EventRecorder(kube::KubeClient* client, std::string component, std::string instance,
                std::size_t max_queued = 1000);
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // `object` is the involved object as the API returned it (apiVersion, kind, metadata).
  void Record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message);
  // Writes what is queued, then stops the thread.
  void Flush();

 private:
  void Loop();

  kube::KubeClient* client_;
  const std::string component_;
  const std::string instance_;
  const std::size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ringtrain::op
