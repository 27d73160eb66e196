#include "runner/rendezvous/gang_gate.h"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/stop.h"

namespace ringtrain::rendezvous {
namespace {

// true: open; false: closed (missing or blank).
StatusOr<bool> GateOpen(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    return FailedPrecondition("gang gate " + path + ": " + std::strerror(errno));
  }
  // The annotation's value is short ("true"); never read a hostile file whole.
  char buf[256];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  const int err = errno;
  ::close(fd);
  if (n < 0) return FailedPrecondition("gang gate " + path + ": " + std::strerror(err));
  for (ssize_t i = 0; i < n; ++i) {
    if (buf[i] != ' ' && buf[i] != '\n' && buf[i] != '\t' && buf[i] != '\r') return true;
  }
  return false;
}

}  // namespace

Status WaitForGangGate(const std::string& path, Duration timeout, const Clock& clock,
                       const GateSleep& sleep, Duration poll) {
  const SteadyTime deadline = clock.SteadyNow() + timeout;
  bool logged = false;
  while (true) {
    ASSIGN_OR_RETURN(bool open, GateOpen(path));
    if (open) {
      if (logged) spdlog::info("the whole gang is placed: starting the rendezvous");
      return Status::Ok();
    }
    if (!logged) {
      spdlog::info("waiting until the whole gang is placed (gate {}, at most {})", path,
                   FormatDuration(timeout));
      logged = true;
    }
    if (StopRequested()) return StoppedStatus("the wait for the gang to be placed");
    if (clock.SteadyNow() >= deadline) {
      return DeadlineExceeded("the gang was not placed within " + FormatDuration(timeout) +
                              " (gate " + path + " still closed)");
    }
    if (!sleep(poll)) return StoppedStatus("the wait for the gang to be placed");
  }
}

Status WaitForGangGate(const std::string& path, Duration timeout) {
  return WaitForGangGate(path, timeout, SystemClock(), SleepOrStop);
}

}  // namespace ringtrain::rendezvous
