#include "runner/rendezvous/memory_store.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <system_error>

#include "common/stop.h"

namespace ringtrain::rendezvous {

template <typename Ready>
Status MemoryStore::WaitLocked(std::unique_lock<std::mutex>& lock, Duration timeout,
                               const Ready& ready, const std::string& what) {
  const SteadyTime deadline = std::chrono::steady_clock::now() + std::max(timeout, Duration(0));
  ++waiters_;
  Status result = Status::Ok();
  for (;;) {
    if (ready()) break;
    if (StopRequested()) {
      result = StoppedStatus(what);
      break;
    }
    const SteadyTime now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      result = DeadlineExceeded(what + " timed out");
      break;
    }
    cv_.wait_until(lock, std::min(deadline, now + kMemoryStoreStopPoll));
  }
  --waiters_;
  return result;
}

Status MemoryStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
  return Status::Ok();
}

StatusOr<std::string> MemoryStore::Get(const std::string& key, Duration timeout) {
  std::unique_lock lock(mu_);
  Status s = WaitLocked(
      lock, timeout, [&] { return data_.count(key) != 0; }, "store get of key " + key);
  if (s.code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceeded("store get timed out after " + FormatDuration(timeout) +
                            " waiting for key " + key);
  }
  RETURN_IF_ERROR(s);
  return data_.at(key);
}

StatusOr<std::int64_t> MemoryStore::Add(const std::string& key, std::int64_t delta) {
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

StatusOr<std::string> MemoryStore::CompareSet(const std::string& key, const std::string& expected,
                                              const std::string& desired) {
  std::string now;
  {
    std::lock_guard lock(mu_);
    auto it = data_.find(key);
    if ((it == data_.end() && expected.empty()) || (it != data_.end() && it->second == expected)) {
      data_[key] = desired;
      now = desired;
    } else {
      now = it == data_.end() ? "" : it->second;
    }
  }
  cv_.notify_all();
  return now;
}

Status MemoryStore::Wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock lock(mu_);
  auto missing = [&] {
    std::string m;
    for (const auto& k : keys) {
      if (data_.count(k) != 0) continue;
      if (!m.empty()) m += ", ";
      m += k;
    }
    return m;
  };
  Status s = WaitLocked(
      lock, timeout, [&] { return missing().empty(); }, "store wait");
  if (s.code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceeded("store wait timed out after " + FormatDuration(timeout) +
                            "; missing keys: " + missing());
  }
  return s;
}

std::size_t MemoryStore::size() const {
  std::lock_guard lock(mu_);
  return data_.size();
}

int MemoryStore::waiters() const {
  std::lock_guard lock(mu_);
  return waiters_;
}

}  // namespace ringtrain::rendezvous
