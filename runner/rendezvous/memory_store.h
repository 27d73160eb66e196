// An in-process Store (gloo's HashStore): the ranks of one process share its map. Serves a
// world of one (no peer needs a socket) and the tests that run ranks as threads. Owns only its
// map; must not touch sockets.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::rendezvous {

// How often a blocked Get/Wait looks at the process's stop request: a signal handler cannot
// notify a condition variable, so the wait is cut into slices this long.
inline constexpr Duration kMemoryStoreStopPoll{std::chrono::milliseconds(50)};

// Thread-safe. Get and Wait block until the keys exist, the timeout passes (DeadlineExceeded
// names the keys) or the process is asked to stop (Cancelled, as TcpStore's waits).
class MemoryStore final : public Store {
 public:
  MemoryStore() = default;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, Duration timeout) override;
  StatusOr<std::int64_t> Add(const std::string& key, std::int64_t delta) override;
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired) override;
  Status Wait(const std::vector<std::string>& keys, Duration timeout) override;

  // How many keys the store holds.
  std::size_t size() const;
  // How many Get/Wait calls are blocked right now: lets a test wait for a caller to block.
  int waiters() const;

 private:
  // Waits under `lock` until `ready()`; DeadlineExceeded / Cancelled otherwise.
  template <typename Ready>
  Status WaitLocked(std::unique_lock<std::mutex>& lock, Duration timeout, const Ready& ready,
                    const std::string& what);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
  int waiters_ = 0;
};

}  // namespace ringtrain::rendezvous
