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
std::atomic<int> g_signal_count{0};
EventCounter g_stop_fd_polls;

void Signal(int fd) {
  std::uint64_t one = 1;
  // A full eventfd counter is still readable, which is all a waiter needs.
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
}

void OnSignal(int sig) {
  g_signal_count.fetch_add(1);
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

namespace {

// The alternate signal stack of the thread that installed the handlers (the main thread): the
// kernel builds a signal's frame on it instead of below the interrupted code's stack pointer.
// That pointer is not always on a stack: oneDNN's JIT gemm kernels run with it inside a heap
// block, and a SIGTERM arriving there wrote its frame (a few KiB with the AVX-512 state) over
// the heap below it — "free(): invalid next size" when the runner exited after the stop. In
// static storage (a signal may arrive at any time until exit), sized far above the largest
// signal frame a CPU needs today (AT_MINSIGSTKSZ: about 3.5 KiB with AVX-512, 11 KiB with AMX)
// plus the handler's own use. The other threads that run those kernels, the OpenMP workers of
// RINGTRAIN_BLAS_THREADS > 1, block the stop signals instead (runner/model/gemm.cc).
alignas(64) unsigned char g_signal_stack[128 * 1024];

void InstallAlternateSignalStack() {
  static std::once_flag once;
  std::call_once(once, [] {
    stack_t ss{};
    ss.ss_sp = g_signal_stack;
    ss.ss_size = sizeof(g_signal_stack);
    ss.ss_flags = 0;
    ::sigaltstack(&ss, nullptr);
  });
}

}  // namespace

void InstallStopSignalHandlers() {
  StopFd();  // created here: the handler must not allocate it
  InstallAlternateSignalStack();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  // No SA_RESTART: a blocking call returns EINTR and its loop re-checks the stop. SA_ONSTACK:
  // on the alternate stack where the receiving thread has one (the main thread).
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

void BlockStopSignalsOnThisThread(sigset_t* previous) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &stop, previous);
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

int StopSignalCount() { return g_signal_count.load(); }

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
  g_signal_count.store(0);
  int fd = StopFd();
  std::uint64_t v;
  while (fd >= 0 && ::read(fd, &v, sizeof(v)) > 0) {
  }
}

}  // namespace ringtrain
