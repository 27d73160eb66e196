#include "controller/runtime/work_queue.h"

#include <algorithm>

#include "common/backoff.h"

namespace ringtrain::op {

void WorkQueue::AddLocked(const std::string& key) {
  if (shutdown_ || dirty_.count(key)) return;
  dirty_.insert(key);
  if (processing_.count(key)) return;
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::Add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.erase(key);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, Duration delay) {
  if (delay <= Duration(0)) return Add(key);
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return;
  const SteadyTime at = clock_->SteadyNow() + delay;
  auto [it, inserted] = waiting_.emplace(key, at);
  if (!inserted && at < it->second) it->second = at;
  // A sleeping Get() may need to wake earlier than it planned.
  cv_.notify_all();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  Duration delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int n = failures_[key]++;
    delay = BackoffDelay({options_.base_delay, options_.max_delay, 2.0}, n);
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::PromoteDueLocked(SteadyTime now) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second <= now) {
      std::string key = it->first;
      it = waiting_.erase(it);
      AddLocked(key);
    } else {
      ++it;
    }
  }
}

std::optional<std::string> WorkQueue::TakeLocked() {
  PromoteDueLocked(clock_->SteadyNow());
  if (queue_.empty()) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  dirty_.erase(key);
  processing_.insert(key);
  return key;
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (shutdown_) return std::nullopt;
    if (auto key = TakeLocked()) return key;
    if (waiting_.empty()) {
      cv_.wait(lock);
    } else {
      SteadyTime next = SteadyTime::max();
      for (const auto& [k, at] : waiting_) next = std::min(next, at);
      // The wait itself is in real time; the clock says how long until the next key is due.
      cv_.wait_for(lock, next - clock_->SteadyNow());
    }
  }
}

std::optional<std::string> WorkQueue::TryGet() {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return std::nullopt;
  return TakeLocked();
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(key);
  if (dirty_.count(key)) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

std::size_t WorkQueue::Len() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace ringtrain::op
