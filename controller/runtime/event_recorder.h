// Core v1 Events about TrainingJobs, written off the reconcile path by one background thread
// (bounded queue: under an event storm the newest are dropped, never the reconcile slowed).
// Like client-go's event correlator, a repeat of an event (same object, type, reason, message)
// is not a new Event: the first one's count and lastTimestamp are patched, so a create that
// fails on every retry shows as one Warning "(xN over ...)" in `kubectl describe`.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/clock.h"
#include "controller/kube/kube_client.h"

namespace ringtrain::op {

class EventRecorder {
 public:
  // `writes_abandoned` (may be null; must outlive the recorder): set by Flush() once its budget
  // has run out or the queue is written, before it waits for the write in flight. Give it to the
  // client as ClientOptions::exec_stop, so that a credential plugin that write waits for is
  // killed instead of holding the shutdown up to the plugin's own timeout (60 s).
  EventRecorder(kube::KubeClient* client, std::string component, std::string instance,
                std::size_t max_queued = kMaxQueued, std::atomic<bool>* writes_abandoned = nullptr);
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // `object` is the involved object as the API returned it (apiVersion, kind, metadata).
  void Record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message);
  // Writes what is queued, then stops the thread. What is still queued after `timeout` (an API
  // server that answers slowly or not at all) is dropped, with a warning; the write in flight
  // then ends as the client's request timeout or stop (or `writes_abandoned`) allows.
  void Flush(Duration timeout = kFlushTimeout);

  // Events queued at most, by default.
  static constexpr std::size_t kMaxQueued = 1000;
  // How long Flush() writes by default: a few seconds of a pod's 30 s grace period.
  static constexpr Duration kFlushTimeout{3'000};

  // Events queued and not yet being written.
  std::size_t QueuedForTest();

  // How many distinct events are remembered for correlation (the oldest is forgotten first).
  static constexpr std::size_t kMaxCorrelated = 4096;

 private:
  struct Pending {
    nlohmann::json event;  // the whole Event to create, or the patch of a repeat
    std::string patch_of;  // the name of the Event a repeat updates ("" = create)
    std::string key;       // its correlation key
  };
  struct Seen {
    std::string name;
    std::string first_timestamp;
    int count = 0;
    std::uint64_t serial = 0;
  };

  void Loop();

  kube::KubeClient* client_;
  const std::string component_;
  const std::string instance_;
  const std::size_t max_queued_;
  std::atomic<bool>* const writes_abandoned_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::map<std::string, Seen> seen_;  // correlation key -> the Event written for it
  std::uint64_t serial_ = 0;
  bool stop_ = false;
  bool loop_done_ = false;  // Loop() returned
  std::thread thread_;
};

}  // namespace ringtrain::op
