// An in-process Store for multi-rank tests that run ranks as threads (gloo's HashStore).
// Owns only its map; must not touch sockets, so tests using it stay hermetic and fast.
#pragma once

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runner/rendezvous/store.h"

namespace ringtrain::testing {

class InMemoryStore final : public rendezvous::Store {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard lock(mu_);
      data_[key] = value;
    }
    cv_.notify_all();
    return Status::Ok();
  }

  StatusOr<std::string> Get(const std::string& key, Duration timeout) override {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return data_.count(key) != 0; })) {
      return DeadlineExceeded("store get timed out waiting for key " + key);
    }
    return data_.at(key);
  }

  StatusOr<std::int64_t> Add(const std::string& key, std::int64_t delta) override {
    std::int64_t now = 0;
    {
      std::lock_guard lock(mu_);
      auto it = data_.find(key);
      if (it != data_.end()) {
        const std::string& v = it->second;
        auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), now);
        if (ec != std::errc() || ptr != v.data() + v.size()) {
          return InvalidArgument("store add: key " + key + " holds a non-integer value");
        }
      }
      now += delta;
      data_[key] = std::to_string(now);
    }
    cv_.notify_all();
    return now;
  }

  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired) override {
    std::string now;
    {
      std::lock_guard lock(mu_);
      auto it = data_.find(key);
      if ((it == data_.end() && expected.empty()) ||
          (it != data_.end() && it->second == expected)) {
        data_[key] = desired;
        now = desired;
      } else {
        now = it == data_.end() ? "" : it->second;
      }
    }
    cv_.notify_all();
    return now;
  }

  Status Wait(const std::vector<std::string>& keys, Duration timeout) override {
    std::unique_lock lock(mu_);
    auto all_there = [&] {
      for (const auto& k : keys) {
        if (data_.count(k) == 0) return false;
      }
      return true;
    };
    if (cv_.wait_for(lock, timeout, all_there)) return Status::Ok();
    std::string missing;
    for (const auto& k : keys) {
      if (data_.count(k) != 0) continue;
      if (!missing.empty()) missing += ", ";
      missing += k;
    }
    return DeadlineExceeded("store wait timed out; missing keys: " + missing);
  }

  std::size_t SizeForTest() const {
    std::lock_guard lock(mu_);
    return data_.size();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
};

}  // namespace ringtrain::testing
