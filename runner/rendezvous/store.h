// The rendezvous key/value store seam (gloo's Store, c10d's Store): what every rank uses to
// find its peers. Implementations: TcpStore (tcp_store.h), PrefixStore (prefix_store.h) and
// MemoryStore (memory_store.h, one process). Must not know about communicators or training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/runner_env.h"
#include "common/status.h"

namespace ringtrain::rendezvous {

// A store wait is a rendezvous wait: the contract's one default.
inline constexpr Duration kDefaultStoreTimeout = contract::kRendezvousTimeout;

class Store {
 public:
  virtual ~Store() = default;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until the key exists or the timeout passes (DeadlineExceeded names the key).
  virtual StatusOr<std::string> Get(const std::string& key, Duration timeout) = 0;
  // Atomically adds `delta` to the integer at key (missing = 0) and returns the new value.
  virtual StatusOr<std::int64_t> Add(const std::string& key, std::int64_t delta) = 0;
  // Sets key to `desired` if its value equals `expected` ("" = missing); returns the value now.
  virtual StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                           const std::string& desired) = 0;
  // Blocks until every key exists; DeadlineExceeded lists the keys still missing.
  virtual Status Wait(const std::vector<std::string>& keys, Duration timeout) = 0;

  // CompareSet bounded by `timeout` even when the store host hangs: failure paths (a
  // communicator reporting why it aborted) must not be delayed by the store they report to.
  // Stores that never block on a network keep this default.
  virtual StatusOr<std::string> CompareSetWithin(const std::string& key,
                                                 const std::string& expected,
                                                 const std::string& desired, Duration timeout) {
    (void)timeout;
    return CompareSet(key, expected, desired);
  }
};

}  // namespace ringtrain::rendezvous
