#include "common/stop.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace ringtrain {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};
std::atomic<int> g_fd{-1};
std::once_flag g_fd_once;
thread_local bool t_exempt = false;
std::atomic<int> g_draining{0};  // live DrainScopes
std::atomic<bool> g_drain{false};
std::atomic<int> g_drain_signal{0};
EventCounter g_stop_fd_polls;

void Signal(int fd) {
  std::uint64_t one = 1;
  // A full eventfd counter is still readable, which is all a waiter needs.
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
}

void OnSignal(int sig) {
  // The first signal while draining is a request to stop at the next agreed step boundary.
  if (g_draining.load() > 0 && !g_drain.exchange(true)) {
    g_drain_signal.store(sig);
    return;
  }
  RequestStop(sig);
}

std::string SignalName(int sig) {
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGINT) return "SIGINT";
  return "signal " + std::to_string(sig);
}

}  // namespace

int StopFd() {
  std::call_once(g_fd_once, [] {
    int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    g_fd.store(fd);
    // A stop requested before the descriptor existed must still be seen by poll().
    if (fd >= 0 && g_stop.load()) Signal(fd);
  });
  return g_fd.load();
}

int StopFdForBlockingPoll() {
  g_stop_fd_polls.Bump();
  return StopFd();
}

const EventCounter& StopFdPollsForTest() { return g_stop_fd_polls; }

void InstallStopSignalHandlers() {
  StopFd();  // created here: the handler must not allocate it
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  // No SA_RESTART: a blocking call returns EINTR and its loop re-checks the stop.
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

void RequestStop(int signal) {
  int expected = 0;
  if (signal != 0) g_signal.compare_exchange_strong(expected, signal);
  if (g_stop.exchange(true)) return;
  int fd = g_fd.load();
  if (fd >= 0) Signal(fd);
}

bool StopRequested() { return !t_exempt && g_stop.load(std::memory_order_relaxed); }

int StopSignal() { return g_signal.load(); }

const std::atomic<bool>& StopFlag() { return g_stop; }

Status StoppedStatus(std::string_view what) {
  int sig = g_signal.load();
  std::string m = "stopped by ";
  m += sig != 0 ? SignalName(sig) : std::string("request");
  m += " during ";
  m += what;
  return Cancelled(std::move(m));
}

bool SleepOrStop(Duration d) {
  if (t_exempt) {
    std::this_thread::sleep_for(d);
    return true;
  }
  SteadyTime deadline = DeadlineAfter(d);
  for (;;) {
    if (StopRequested()) return false;
    pollfd p{StopFdForBlockingPoll(), POLLIN, 0};
    int r = ::poll(&p, 1, MillisLeft(deadline));
    if (r > 0) return false;
    if (r == 0) return true;
    if (errno != EINTR) return !StopRequested();
  }
}

bool StopExemptForThisThread() { return t_exempt; }

StopExemptScope::StopExemptScope() : previous_(t_exempt) { t_exempt = true; }
StopExemptScope::~StopExemptScope() { t_exempt = previous_; }

DrainScope::DrainScope() { g_draining.fetch_add(1); }
DrainScope::~DrainScope() {
  // A drain signal nobody acted on is still a stop request.
  if (g_draining.fetch_sub(1) == 1 && g_drain.load()) EscalateDrain();
}

const std::atomic<bool>& DrainFlag() { return g_drain; }

void EscalateDrain() {
  const int sig = g_drain_signal.load();
  RequestStop(sig);
}

void ResetStopForTest() {
  g_drain.store(false);
  g_drain_signal.store(0);
  g_stop.store(false);
  g_signal.store(0);
  int fd = StopFd();
  std::uint64_t v;
  while (fd >= 0 && ::read(fd, &v, sizeof(v)) > 0) {
  }
}

}  // namespace ringtrain
