// A Store view that prefixes every key ("<job>/<attempt>/"), so a restarted gang never reads a
// stale gang's keys. Owns only the key mapping; must not outlive or own the wrapped store.
#pragma once

#include <string>
#include <vector>

#include "runner/rendezvous/store.h"

namespace ringtrain::rendezvous {

class PrefixStore final : public Store {
 public:
  PrefixStore(Store& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}

  const std::string& prefix() const { return prefix_; }

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, Duration timeout) override;
  StatusOr<std::int64_t> Add(const std::string& key, std::int64_t delta) override;
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired) override;
  Status Wait(const std::vector<std::string>& keys, Duration timeout) override;
  StatusOr<std::string> CompareSetWithin(const std::string& key, const std::string& expected,
                                         const std::string& desired, Duration timeout) override;

 private:
  std::string Key(const std::string& key) const { return prefix_ + key; }

  Store& store_;
  std::string prefix_;
};

}  // namespace ringtrain::rendezvous
