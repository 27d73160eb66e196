// Reads of rank 0's GET /status, made off the reconcile workers. A read that does not answer
// holds its thread for the whole timeout: made in the worker, it queued every other job behind
// it (a review measured 13.6 s to create a new job's pods beside 150 jobs whose /status a
// NetworkPolicy dropped). Here a pass asks for a read and goes on; the read's answer is kept for
// the job's next pass, and `on_done` wakes that pass.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "controller/reconcile/planner.h"

namespace ringtrain::op {

// Rank 0's GET /status at ip:port: reachable=false (with the error) when it could not be read
// in time or was malformed; nullopt only from a fetcher that did not ask.
using ProgressFetcher = std::function<std::optional<reconcile::ObservedProgress>(
    const std::string& ip, int port, Duration timeout)>;
ProgressFetcher HttpProgressFetcher();

class StatusPoller {
 public:
  // `threads` readers; 0: each read is made at once by Start's caller (one pass asks and reads,
  // as a test wants it). `on_done(key)` is called from a reader once key's answer is kept (not
  // with threads == 0); it must not call back into the poller.
  StatusPoller(ProgressFetcher fetch, int threads,
               std::function<void(const std::string& key)> on_done = nullptr);
  ~StatusPoller();
  StatusPoller(const StatusPoller&) = delete;
  StatusPoller& operator=(const StatusPoller&) = delete;

  // Asks for a read of key's rank 0 (the pod `uid`) at ip:port, unless one of key's is still to
  // be made or under way: false then, and nothing is asked. `suspect`: its last read failed, so
  // this one may well hold a reader for its whole timeout: such reads take at most half the
  // readers (at least one), and a read of a rank that answers goes first.
  bool Start(const std::string& key, const std::string& uid, const std::string& ip, int port,
             Duration timeout, bool suspect = false);
  // The answer of key's last read, once, if it was of the pod `uid` (an answer of another pod,
  // an earlier rank 0, is dropped). nullopt while none is kept.
  std::optional<reconcile::ObservedProgress> Take(const std::string& key, const std::string& uid);
  // Drops key's kept answer and the answer of its read under way.
  void Forget(const std::string& key);
  // Ends the readers: the reads asked and not begun are dropped; a read under way ends by its
  // timeout. Idempotent.
  void Stop();

 private:
  struct Entry {
    std::uint64_t token = 0;  // of the read asked last; a Forget makes a new entry
    bool pending = false;     // asked, its answer not yet kept
    std::string answer_uid;
    std::optional<reconcile::ObservedProgress> answer;
  };
  struct Request {
    std::string key;
    std::string uid;
    std::string ip;
    int port = 0;
    Duration timeout{};
    std::uint64_t token = 0;
    bool suspect = false;
  };
  void Reader();
  std::optional<reconcile::ObservedProgress> Fetch(const Request& r) const;
  void Keep(const Request& r, std::optional<reconcile::ObservedProgress> answer);

  const ProgressFetcher fetch_;
  const std::function<void(const std::string&)> on_done_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::uint64_t next_token_ = 1;
  std::map<std::string, Entry> entries_;
  std::deque<Request> requests_;  // of ranks that answered
  std::deque<Request> suspects_;  // of ranks whose last read failed
  int suspects_running_ = 0;
  int max_suspects_running_ = 1;
  std::vector<std::thread> readers_;
};

}  // namespace ringtrain::op
