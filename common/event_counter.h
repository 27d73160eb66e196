// A count of one kind of event that a test waits on instead of sleeping: "the waiter is blocked
// now", "the client was refused once". Bump() on the production path is one atomic add and one
// atomic load (a lock only while a test waits). Header-only; knows nothing of what it counts.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "common/clock.h"

namespace ringtrain {

class EventCounter {
 public:
  void Bump() {
    n_.fetch_add(1);
    // A waiter registers under mu_ before it checks the count: either it sees this add, or
    // this load sees it and the notify (under mu_) reaches it inside its wait.
    if (waiters_.load() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  }

  std::uint64_t value() const { return n_.load(); }

  // Blocks until the count exceeds `seen`; false when `timeout` passes first (the bound only
  // turns a missing event into a failure instead of a hang).
  bool AwaitAbove(std::uint64_t seen, Duration timeout) const {
    std::unique_lock<std::mutex> lock(mu_);
    waiters_.fetch_add(1);
    const bool ok = cv_.wait_for(lock, timeout, [&] { return n_.load() > seen; });
    waiters_.fetch_sub(1);
    return ok;
  }

 private:
  std::atomic<std::uint64_t> n_{0};
  mutable std::atomic<int> waiters_{0};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

}  // namespace ringtrain
