#include "common/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/group_janitor.h"
#include "common/stop.h"

namespace ringtrain {
namespace {

// Where pidfd_open is missing (Linux < 5.3) a wait falls back to sleeps this long.
constexpr Duration kPollFallback{20};

// execvp(3)'s search path when the environment has none (confstr _CS_PATH on glibc).
constexpr char kDefaultSearchPath[] = "/bin:/usr/bin";

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// What a child that could not run its program tells its parent, in one write(2) to a
// close-on-exec pipe: the pipe closes without a word when the exec succeeds.
struct ExecReport {
  int stage = 0;  // kStageChdir | kStageExec
  int error = 0;  // errno
};
constexpr int kStageChdir = 1;
constexpr int kStageExec = 2;

// The files execvp would try for `file`, in order: `file` itself when it holds a slash (a
// relative one is taken from the working directory), else each directory of `search_path`, an
// empty entry meaning the working directory.
std::vector<std::string> ExecCandidates(const std::string& file, const std::string& search_path) {
  if (file.find('/') != std::string::npos) return {file};
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = search_path.find(':', start);
    const std::string dir = search_path.substr(start, end - start);
    out.push_back(dir.empty() ? file : dir + "/" + file);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// The errors after which execvp goes on to the next directory of the search path.
bool TryNextCandidate(int error) {
  return error == ENOENT || error == ENOTDIR || error == EACCES || error == ESTALE ||
         error == ENODEV || error == ETIMEDOUT;
}

bool IsNotFound(int error) { return error == ENOENT || error == ENOTDIR; }

// Blocks until the child reports a failed exec (true) or the pipe closes because the exec
// succeeded (false), at most kExecReportTimeout.
bool ReadExecReport(int fd, ExecReport* report) {
  const SteadyTime deadline = DeadlineAfter(ChildProcess::kExecReportTimeout);
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, MillisLeft(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;  // still not exec'd: it did not fail, as far as we know
    // One write of a few bytes to a pipe is atomic: the report arrives whole or not at all.
    const ssize_t n = ::read(fd, report, sizeof(*report));
    if (n < 0 && errno == EINTR) continue;
    return n == static_cast<ssize_t>(sizeof(*report));
  }
}

std::string CurrentDir() {
  std::string buf(4096, '\0');
  if (::getcwd(buf.data(), buf.size()) == nullptr) return ".";
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

// One line that names what could not be run and why, in the words of a container runtime.
std::string StartErrorMessage(const ExecReport& report, const std::string& file,
                              const std::string& search_path, const std::string& working_dir) {
  if (report.stage == kStageChdir) {
    return "workingDir \"" + working_dir + "\": " + std::strerror(report.error);
  }
  std::string m = "exec \"" + file + "\": ";
  // Said whether the file was named or found on PATH: the planner takes it for an error no
  // restart on this machine heals.
  const char* no_program =
      report.error == ENOEXEC ? " (not a binary for this machine, and no #! line)" : "";
  if (file.find('/') == std::string::npos) {
    if (IsNotFound(report.error)) return m + "not found on PATH (" + search_path + ")";
    return m + std::strerror(report.error) + no_program;
  }
  m += std::strerror(report.error);
  m += no_program;
  if (file.front() != '/') {
    m += " (relative to " + (working_dir.empty() ? CurrentDir() : working_dir) + ")";
  }
  return m;
}

}  // namespace

std::optional<std::string> LookPath(const std::string& command, const std::string& search_path) {
  if (command.find('/') != std::string::npos) {
    if (IsExecutableFile(command)) return command;
    return std::nullopt;
  }
  std::size_t start = 0;
  for (;;) {
    std::size_t colon = search_path.find(':', start);
    std::string dir = search_path.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + command;
    if (IsExecutableFile(candidate)) return candidate;
    if (colon == std::string::npos) return std::nullopt;
    start = colon + 1;
  }
}

std::string ProcessSearchPath() {
  const char* path = std::getenv("PATH");
  return path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
}

int ExitCodeFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;  // stopped or continued: not an end, and never asked for (no WUNTRACED)
}

namespace {

// `fd` moved to 3 or above (close-on-exec), so that the child's dup2 onto 0, 1 and 2 never
// meets it there: a parent started with stdin (or stdout) closed gets such a low number from
// open, and the child's stdin would overwrite its log. -1 (errno set) on failure.
int AboveStdio(int fd) {
  if (fd < 0 || fd > STDERR_FILENO) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  const int err = errno;
  ::close(fd);
  errno = err;
  return moved;
}

}  // namespace

StatusOr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                           const std::map<std::string, std::string>& env,
                                           const SpawnOptions& options) {
  if (argv.empty()) return InvalidArgument("spawn: empty command");
  if (argv[0].empty()) return InvalidArgument("spawn: empty program name");
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> args = argv;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const auto path_it = env.find("PATH");
  const std::string search_path = path_it != env.end() ? path_it->second : kDefaultSearchPath;
  const std::vector<std::string> candidates = ExecCandidates(argv[0], search_path);
  const std::string& working_dir = options.working_dir;
  int log_fd = -1;
  if (!options.log_path.empty()) {
    log_fd = AboveStdio(
        // Truncated, so never through a symbolic link to a file elsewhere.
        ::open(options.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
               0644));
    if (log_fd < 0) return ErrnoStatus(StatusCode::kUnavailable, "open " + options.log_path, errno);
  }
  const bool new_group = options.new_process_group;
  int null_fd = -1;
  if (new_group) {
    null_fd = AboveStdio(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (null_fd < 0) {
      const int err = errno;
      if (log_fd >= 0) ::close(log_fd);
      return ErrnoStatus(StatusCode::kUnavailable, "open /dev/null", err);
    }
  }
  // The parent's copies of the child's descriptors, once the child has its own (or none).
  auto close_childs = [&log_fd, &null_fd] {
    if (log_fd >= 0) ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
  };
  int report_pipe[2];
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close_childs();
    return ErrnoStatus(StatusCode::kUnavailable, "pipe", err);
  }
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    close_childs();
    ::close(report_pipe[0]);
    ::close(report_pipe[1]);
    return ErrnoStatus(StatusCode::kUnavailable, "fork", err);
  }
  if (pid == 0) {
    if (new_group) ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);  // the parent died before prctl
    // The program starts with the signals a pod's would, not with this process's own: the
    // SIGPIPE it ignores survives exec (`yes | head` under pipefail exited 1, permanent, where
    // a pod's exits 141, retryable), and so does a mask (threads here block SIGTERM, SIGINT).
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    ExecReport report{kStageExec, ENOENT};
    if (!working_dir.empty() && ::chdir(working_dir.c_str()) != 0) {
      report = {kStageChdir, errno};
    } else {
      // execvp's search: past a directory where the file is missing or not executable; a file
      // found but not executable anywhere reads EACCES rather than the last ENOENT.
      bool denied = false;
      for (const std::string& candidate : candidates) {
        ::execve(candidate.c_str(), cargv.data(), cenv.data());
        report.error = errno;
        denied = denied || report.error == EACCES;
        if (!TryNextCandidate(report.error)) break;
      }
      if (denied && TryNextCandidate(report.error)) report.error = EACCES;
    }
    [[maybe_unused]] auto n = ::write(report_pipe[1], &report, sizeof(report));
    ::_exit(report.stage == kStageExec && IsNotFound(report.error) ? kExitNotFound
                                                                   : kExitCannotExecute);
  }
  // Also here, so the group exists before the first signal to it, whichever runs first.
  if (new_group) {
    (void)::setpgid(pid, pid);
    JanitorWatchGroup(pid);  // killed even when this process is (ringtrain run's janitor)
  }
  ::close(report_pipe[1]);
  ExecReport report;
  const bool failed = ReadExecReport(report_pipe[0], &report);
  ::close(report_pipe[0]);
  ChildProcess child(pid, argv[0]);
  child.own_group_ = new_group;
  if (failed) {
    child.start_error_ = StartErrorMessage(report, argv[0], search_path, working_dir);
    // Where the program's own output would have gone, so its log says why it is empty.
    const std::string line = child.start_error_ + "\n";
    [[maybe_unused]] auto n =
        ::write(log_fd >= 0 ? log_fd : STDERR_FILENO, line.data(), line.size());
    // The child exits right after its report; reap it so the caller sees it ended.
    const SteadyTime give_up = DeadlineAfter(kReapAfterKillTimeout);
    while (!child.Poll() && std::chrono::steady_clock::now() < give_up) {
      child.WaitUntil(give_up, /*wake_on_stop=*/false);
    }
  }
  close_childs();
  return child;
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
  start_error_ = std::move(other.start_error_);
  exited_ = other.exited_;
  exit_code_ = other.exit_code_;
  term_signal_ = other.term_signal_;
  own_group_ = other.own_group_;
  terminating_ = other.terminating_;
  kill_armed_ = other.kill_armed_;
  kill_at_ = other.kill_at_;
  other.Reset();
  return *this;
}

void ChildProcess::Reset() {
  pid_ = -1;
  name_.clear();
  start_error_.clear();
  exited_ = false;
  exit_code_ = 0;
  term_signal_ = 0;
  own_group_ = false;
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
    // What the child left running in its group ends with it, as a container's processes end
    // with its first one. Its pid stays a group id (never reused) while any member lives.
    if (own_group_) {
      (void)::kill(-pid_, SIGKILL);
      JanitorForgetGroup(pid_);
    }
    return true;
  }
  if (r < 0) {
    // ECHILD: reaped behind our back (SIGCHLD ignored, or someone's waitpid(-1)); the code is
    // lost, so report it as a failure the gang logic retries rather than a success.
    if (own_group_) JanitorForgetGroup(pid_);  // its id may be anyone's now
    exited_ = true;
    exit_code_ = 128 + SIGKILL;
    term_signal_ = SIGKILL;
    return true;
  }
  if (kill_armed_ && std::chrono::steady_clock::now() >= kill_at_) {
    kill_armed_ = false;
    SendSignal(SIGKILL);
  }
  return false;
}

bool ChildProcess::SendSignal(int signal) const {
  return ::kill(own_group_ ? -pid_ : pid_, signal) == 0;
}

bool ChildProcess::Signal(int signal) {
  if (!running()) return false;
  return SendSignal(signal);
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
    SendSignal(SIGKILL);
    return;
  }
  SendSignal(signal);
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
  if (wake_on_stop && !StopExemptForThisThread()) {
    fds[n++] = {StopFdForBlockingPoll(), POLLIN, 0};
  }
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
