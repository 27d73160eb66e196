#include "common/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "common/stop.h"

namespace ringtrain {
namespace {

// Where pidfd_open is missing (Linux < 5.3) a wait falls back to sleeps this long.
constexpr Duration kPollFallback{20};

}  // namespace

int ExitCodeFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;  // stopped or continued: not an end, and never asked for (no WUNTRACED)
}

StatusOr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                           const std::map<std::string, std::string>& env,
                                           const SpawnOptions& options) {
  if (argv.empty()) return InvalidArgument("spawn: empty command");
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> args = argv;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const std::string exec_error = "cannot execute " + argv[0] + "\n";
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return ErrnoStatus(StatusCode::kUnavailable, "open " + options.log_path, errno);
  }
  const pid_t parent = ::getpid();
  const bool new_group = options.new_process_group;

  pid_t pid = ::fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    return ErrnoStatus(StatusCode::kUnavailable, "fork", errno);
  }
  if (pid == 0) {
    if (new_group) ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);  // the parent died before prctl
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    ::execve(cargv[0], cargv.data(), cenv.data());
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, exec_error.data(), exec_error.size());
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  return ChildProcess(pid, argv[0]);
}

ChildProcess::~ChildProcess() {
  if (running()) (void)Terminate(Duration::zero());
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this == &other) return *this;
  if (running()) (void)Terminate(Duration::zero());
  pid_ = other.pid_;
  name_ = std::move(other.name_);
  exited_ = other.exited_;
  exit_code_ = other.exit_code_;
  term_signal_ = other.term_signal_;
  terminating_ = other.terminating_;
  kill_armed_ = other.kill_armed_;
  kill_at_ = other.kill_at_;
  other.Reset();
  return *this;
}

void ChildProcess::Reset() {
  pid_ = -1;
  name_.clear();
  exited_ = false;
  exit_code_ = 0;
  term_signal_ = 0;
  terminating_ = false;
  kill_armed_ = false;
}

bool ChildProcess::Poll() {
  if (!running()) return exited_;
  int wait_status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &wait_status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    exited_ = true;
    exit_code_ = ExitCodeFromWaitStatus(wait_status);
    term_signal_ = WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0;
    return true;
  }
  if (r < 0) {
    // ECHILD: reaped behind our back (SIGCHLD ignored, or someone's waitpid(-1)); the code is
    // lost, so report it as a failure the gang logic retries rather than a success.
    exited_ = true;
    exit_code_ = 128 + SIGKILL;
    term_signal_ = SIGKILL;
    return true;
  }
  if (kill_armed_ && std::chrono::steady_clock::now() >= kill_at_) {
    kill_armed_ = false;
    ::kill(pid_, SIGKILL);
  }
  return false;
}

bool ChildProcess::Signal(int signal) {
  if (!running()) return false;
  return ::kill(pid_, signal) == 0;
}

void ChildProcess::RequestTerminate(Duration grace, int signal) {
  if (!running()) return;
  if (!terminating_) {
    terminating_ = true;
    kill_armed_ = true;
    kill_at_ = DeadlineAfter(grace);
  }
  if (grace <= Duration::zero()) {
    kill_armed_ = false;
    ::kill(pid_, SIGKILL);
    return;
  }
  ::kill(pid_, signal);
}

void ChildProcess::WaitUntil(SteadyTime deadline, bool wake_on_stop) {
  // A pidfd turns readable when the child ends: one poll for the exit, the deadline and the
  // stop request together, no sleep-and-check.
  // The raw syscall: glibc 2.36's <sys/pidfd.h> declares pidfd_open without C linkage.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  pollfd fds[2];
  nfds_t n = 0;
  if (pidfd >= 0) fds[n++] = {pidfd, POLLIN, 0};
  // Inside a StopExemptScope the stop descriptor stays readable: it would only spin the poll.
  if (wake_on_stop && !StopExemptForThisThread()) fds[n++] = {StopFd(), POLLIN, 0};
  int timeout_ms = MillisLeft(deadline);
  if (pidfd < 0) timeout_ms = std::min(timeout_ms, static_cast<int>(kPollFallback.count()));
  if (n == 0) {
    std::this_thread::sleep_for(Duration(timeout_ms));
  } else {
    (void)::poll(fds, n, timeout_ms);  // EINTR: the caller's loop checks again
  }
  if (pidfd >= 0) ::close(pidfd);
}

Status ChildProcess::Wait(Duration timeout) {
  if (pid_ <= 0) return FailedPrecondition("wait: no process");
  const SteadyTime deadline = DeadlineAfter(timeout);
  for (;;) {
    if (Poll()) return Status::Ok();
    if (StopRequested()) return StoppedStatus("the wait for " + name_);
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceeded(name_ + " (pid " + std::to_string(pid_) + ") still runs after " +
                              FormatDuration(timeout));
    }
    WaitUntil(kill_armed_ ? std::min(deadline, kill_at_) : deadline, /*wake_on_stop=*/true);
  }
}

Status ChildProcess::Terminate(Duration grace) {
  if (pid_ <= 0) return FailedPrecondition("terminate: no process");
  RequestTerminate(grace);
  const SteadyTime give_up =
      DeadlineAfter(std::max(grace, Duration::zero())) + kReapAfterKillTimeout;
  for (;;) {
    if (Poll()) return Status::Ok();
    if (std::chrono::steady_clock::now() >= give_up) {
      return DeadlineExceeded(name_ + " (pid " + std::to_string(pid_) + ") not reaped " +
                              FormatDuration(kReapAfterKillTimeout) + " after SIGKILL");
    }
    WaitUntil(kill_armed_ ? std::min(give_up, kill_at_) : give_up, /*wake_on_stop=*/false);
  }
}

}  // namespace ringtrain
