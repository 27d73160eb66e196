// The controller's work queue (client-go semantics): keys are deduplicated while waiting, a key
// being processed is never handed to a second worker (it is re-queued on Done if it was added
// meanwhile), delayed adds for requeue_after, and per-key exponential backoff for errors.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/clock.h"

namespace ringtrain::op {

struct WorkQueueOptions {
  Duration base_delay{20};     // first retry after an error
  Duration max_delay{30'000};  // cap of the exponential backoff
};

class WorkQueue {
 public:
  // `clock` (must outlive the queue) times delayed adds and backoff.
  explicit WorkQueue(WorkQueueOptions options = {}, const Clock* clock = &SystemClock())
      : options_(options), clock_(clock) {}

  void Add(const std::string& key);
  // Adds the key once `delay` has passed; an earlier pending time for the key wins.
  void AddAfter(const std::string& key, Duration delay);
  // Adds after the key's backoff, which doubles with each call until Forget(key).
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;

  // Blocks until a key is ready; nullopt once shut down. Pair every key with Done(key).
  std::optional<std::string> Get();
  // The next key that is ready now (delayed ones whose time has come included), without waiting.
  std::optional<std::string> TryGet();
  void Done(const std::string& key);
  void ShutDown();
  std::size_t Len() const;

 private:
  void AddLocked(const std::string& key);
  void PromoteDueLocked(SteadyTime now);
  std::optional<std::string> TakeLocked();

  const WorkQueueOptions options_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;       // queued or to be re-queued after processing
  std::set<std::string> processing_;  // handed out, not Done yet
  std::map<std::string, SteadyTime> waiting_;
  std::map<std::string, int> failures_;
  bool shutdown_ = false;
};

}  // namespace ringtrain::op
