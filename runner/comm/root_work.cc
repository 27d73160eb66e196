#include "runner/comm/root_work.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>

#include "common/stop.h"

namespace ringtrain::comm {
namespace {

// What the root's helper thread shares with it; owned jointly, so that a helper left behind by
// a timeout never touches freed memory.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status result;
};

constexpr std::uint8_t kBusy = 1;
constexpr std::uint8_t kDone = 0;

// Runs `work` on `helper`, which reports its status (an exception as an error) through `shared`.
Status StartHelper(const std::shared_ptr<Shared>& shared, const std::function<Status()>& work,
                   const RootWorkOptions& options, std::thread& helper) {
  try {
    helper = std::thread([shared, work] {
      Status s;
      try {
        s = work();
      } catch (const std::bad_alloc&) {
        s = FailedPrecondition("out of memory: an allocation failed (std::bad_alloc)");
      } catch (const std::exception& e) {
        s = Internal(std::string("unexpected exception: ") + e.what());
      }
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->result = std::move(s);
      shared->done = true;
      shared->cv.notify_all();
    });
  } catch (const std::system_error& e) {
    return Unavailable(options.what + ": cannot start a thread: " + e.what());
  }
  return Status::Ok();
}

std::string TimeoutMessage(const RootWorkOptions& options) {
  return options.what + ": not done after " + FormatDuration(options.timeout) +
         (options.timeout_name.empty() ? "" : " (" + options.timeout_name + ")") + "; giving up";
}

}  // namespace

Duration HeartbeatFor(Duration collective_timeout) {
  return std::clamp(collective_timeout / 4, Duration{1}, Duration{1000});
}

Status WhileRootWorks(Communicator& comm, const std::function<Status()>& work,
                      const RootWorkOptions& options) {
  if (comm.rank() != options.root) {
    const std::string waiting =
        "waiting for rank " + std::to_string(options.root) + "'s " + options.what;
    for (;;) {
      // A backend whose collectives do not watch for a stop request (NCCL) still ends here.
      if (StopRequested()) return StoppedStatus(waiting);
      // Said by the root: a backend that leaves the buffer alone (a world of one) reads done.
      std::uint8_t flag = kDone;
      RETURN_IF_ERROR(comm.Broadcast(&flag, sizeof(flag), options.root).WithContext(waiting));
      if (flag == kDone) return Status::Ok();
    }
  }
  auto shared = std::make_shared<Shared>();
  std::thread helper;
  RETURN_IF_ERROR(StartHelper(shared, work, options, helper));
  SteadyTime deadline = DeadlineAfter(options.timeout);
  Status gang;  // the first failed heartbeat, or the stop request: no more heartbeats
  bool stopped = false;
  std::unique_lock<std::mutex> lock(shared->mu);
  for (;;) {
    if (!stopped && StopRequested()) {
      stopped = true;
      deadline = std::min(deadline, DeadlineAfter(options.stop_grace));
      if (gang.ok()) gang = StoppedStatus(options.what);
    }
    const SteadyTime now = std::chrono::steady_clock::now();
    if (!shared->done && now >= deadline) break;
    // Heartbeats while the gang hears them; after that, short waits that notice a stop.
    const Duration slice = gang.ok() ? options.heartbeat : Duration{100};
    shared->cv.wait_until(lock, std::min(deadline, now + slice), [&] { return shared->done; });
    if (!gang.ok()) {
      if (shared->done) break;
      continue;
    }
    std::uint8_t flag = shared->done ? kDone : kBusy;
    lock.unlock();
    gang = comm.Broadcast(&flag, sizeof(flag), options.root);
    lock.lock();
    if (gang.ok() && flag == kDone) break;
  }
  if (!shared->done) {
    lock.unlock();
    helper.detach();
    if (stopped) return gang.WithContext(options.what + ": not done");
    return Status(
        StatusCode::kResourceExhausted,
        TimeoutMessage(options) + (gang.ok() ? std::string() : "; and " + gang.ToString()));
  }
  Status result = std::move(shared->result);
  lock.unlock();
  helper.join();
  if (!gang.ok()) return gang.WithContext(options.what);
  return result;
}

Status WorkAlone(const std::function<Status()>& work, const RootWorkOptions& options) {
  // The signal that ends the wait: the next one when a stop was requested already (the work is
  // what the rank does before it stops), else the one after it (the next asks the rank to stop,
  // and the work comes first as it does for a stop requested before it).
  const int enough = StopSignalCount() + (StopFlag().load() ? 1 : 2);
  auto shared = std::make_shared<Shared>();
  std::thread helper;
  RETURN_IF_ERROR(StartHelper(shared, work, options, helper));
  const SteadyTime deadline = DeadlineAfter(options.timeout);
  std::unique_lock<std::mutex> lock(shared->mu);
  bool signalled = false;
  while (!shared->done) {
    signalled = StopSignalCount() >= enough;
    const SteadyTime now = std::chrono::steady_clock::now();
    if (signalled || now >= deadline) break;
    // Short waits: a signal handler cannot notify the condition variable.
    shared->cv.wait_until(lock, std::min(deadline, now + Duration{50}),
                          [&] { return shared->done; });
  }
  if (!shared->done) {
    lock.unlock();
    helper.detach();
    if (signalled) return Cancelled(options.what + ": not done; asked to stop again, giving up");
    return Status(StatusCode::kResourceExhausted, TimeoutMessage(options));
  }
  Status result = std::move(shared->result);
  lock.unlock();
  helper.join();
  return result;
}

}  // namespace ringtrain::comm
