#include "controller/executors/kubernetes/status_poller.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "common/runner_status.h"
#include "controller/reconcile/observe_status.h"

namespace ringtrain::op {

ProgressFetcher HttpProgressFetcher() {
  return [](const std::string& ip, int port,
            Duration timeout) -> std::optional<reconcile::ObservedProgress> {
    return reconcile::ObserveRunnerStatus(contract::FetchRunnerStatus(ip, port, timeout));
  };
}

StatusPoller::StatusPoller(ProgressFetcher fetch, int threads,
                           std::function<void(const std::string& key)> on_done)
    : fetch_(std::move(fetch)),
      on_done_(std::move(on_done)),
      max_suspects_running_(std::max(1, threads / 2)) {
  for (int i = 0; i < threads; ++i) readers_.emplace_back([this] { Reader(); });
}

StatusPoller::~StatusPoller() { Stop(); }

bool StatusPoller::Start(const std::string& key, const std::string& uid, const std::string& ip,
                         int port, Duration timeout, bool suspect) {
  Request r{key, uid, ip, port, timeout, 0, suspect};
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_[key];
    if (e.pending || stopping_) return false;
    e.pending = true;
    e.token = r.token = next_token_++;
    if (!readers_.empty()) {
      (suspect ? suspects_ : requests_).push_back(std::move(r));
      cv_.notify_all();
      return true;
    }
  }
  Keep(r, Fetch(r));
  return true;
}

std::optional<reconcile::ObservedProgress> StatusPoller::Fetch(const Request& r) const {
  // The edge of a reader thread: an exception (a library's, an allocation) is a read that
  // failed, never a controller that terminates.
  try {
    return fetch_(r.ip, r.port, r.timeout);
  } catch (const std::exception& e) {
    reconcile::ObservedProgress failed;
    failed.reachable = false;
    failed.error = std::string("reading /status threw: ") + e.what();
    return failed;
  }
}

std::optional<reconcile::ObservedProgress> StatusPoller::Take(const std::string& key,
                                                              const std::string& uid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || !it->second.answer) return std::nullopt;
  std::optional<reconcile::ObservedProgress> answer = std::move(it->second.answer);
  it->second.answer.reset();
  if (it->second.answer_uid != uid) return std::nullopt;
  return answer;
}

void StatusPoller::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(key);
  // A request not yet begun goes too; one under way finds no entry of its token when it ends.
  std::erase_if(requests_, [&key](const Request& r) { return r.key == key; });
  std::erase_if(suspects_, [&key](const Request& r) { return r.key == key; });
}

void StatusPoller::Stop() {
  std::vector<std::thread> readers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    requests_.clear();
    suspects_.clear();
    readers.swap(readers_);
  }
  cv_.notify_all();
  for (std::thread& t : readers) t.join();
}

void StatusPoller::Reader() {
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] {
        return stopping_ || !requests_.empty() ||
               (!suspects_.empty() && suspects_running_ < max_suspects_running_);
      });
      if (stopping_) return;
      std::deque<Request>& from = !requests_.empty() ? requests_ : suspects_;
      r = std::move(from.front());
      from.pop_front();
      if (r.suspect) ++suspects_running_;
    }
    Keep(r, Fetch(r));
    if (r.suspect) {
      std::lock_guard<std::mutex> lock(mu_);
      --suspects_running_;
    }
    cv_.notify_all();
    if (on_done_) on_done_(r.key);
  }
}

void StatusPoller::Keep(const Request& r, std::optional<reconcile::ObservedProgress> answer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(r.key);
  if (it == entries_.end() || it->second.token != r.token) return;  // forgotten since
  it->second.pending = false;
  it->second.answer_uid = r.uid;
  it->second.answer = std::move(answer);
}

}  // namespace ringtrain::op
