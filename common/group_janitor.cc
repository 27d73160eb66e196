#include "common/group_janitor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace ringtrain {
namespace {

// The write end of the janitor's pipe (non-blocking, close-on-exec), -1 without a janitor.
std::atomic<int> g_fd{-1};
std::atomic<pid_t> g_pid{-1};

// More groups than any run starts at once; one past it is not watched.
constexpr int kMaxGroups = 8192;

void Send(std::int32_t value) {
  const int fd = g_fd.load();
  if (fd < 0) return;
  // One write of 4 bytes to a pipe is atomic. EAGAIN (a full pipe: the janitor is stopped) or
  // EPIPE (it is gone) lose this group, never stall the caller.
  ssize_t n;
  do {
    n = ::write(fd, &value, sizeof(value));
  } while (n < 0 && errno == EINTR);
}

// Async-signal-safe text for the janitor's one line (it may not allocate: it was forked from a
// process that may have threads).
struct Line {
  char buf[256];
  std::size_t len = 0;
  void Add(const char* s) {
    while (*s != '\0' && len < sizeof(buf)) buf[len++] = *s++;
  }
  void Add(long long v) {
    char digits[24];
    int n = 0;
    const bool negative = v < 0;
    unsigned long long u = negative ? 0ULL - static_cast<unsigned long long>(v) : v;
    do {
      digits[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (negative && len < sizeof(buf)) buf[len++] = '-';
    while (n > 0 && len < sizeof(buf)) buf[len++] = digits[--n];
  }
};

std::int64_t NowMillis() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// Drops the groups that have no process left (their ids may be reused from then on, by anyone):
// how many are left.
int DropEnded(pid_t* groups, int n) {
  for (int i = 0; i < n;) {
    if (::kill(-groups[i], 0) != 0 && errno == ESRCH) {
      groups[i] = groups[--n];
    } else {
      ++i;
    }
  }
  return n;
}

// Closes every descriptor from `first` on: close_range(2), else (Linux < 5.9, a seccomp profile
// that refuses it) one close(2) each, up to the descriptor limit.
void CloseFrom(int first) {
  if (::syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0U) == 0) return;
  rlimit lim{};
  rlim_t last = 65536;
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) last = lim.rlim_cur;
  if (last > (1U << 20)) last = 1U << 20;
  for (rlim_t fd = static_cast<rlim_t>(first); fd < last; ++fd) (void)::close(static_cast<int>(fd));
}

// `fd` (the pipe's read end) and `write_end` are above stdio (StartGroupJanitor moves them).
[[noreturn]] void JanitorMain(int fd, int write_end, std::int64_t grace_ms, pid_t owner) {
  // Its own copy of the write end first: with it open the pipe never reads end-of-file.
  (void)::close(write_end);
  (void)::setpgid(0, 0);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (const int sig :
       {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTTIN, SIGTTOU, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM}) {
    (void)::sigaction(sig, &ignore, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  (void)::sigprocmask(SIG_SETMASK, &none, nullptr);
  (void)::prctl(PR_SET_NAME, "rt-janitor");
  // Nothing of the owner's but the pipe and stderr: a listening socket, a work directory's lock
  // or the other end of a `| tee` must not live on in it.
  const int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    (void)::dup2(null_fd, STDIN_FILENO);
    (void)::dup2(null_fd, STDOUT_FILENO);
  }
  if (fd != 3) {
    (void)::dup2(fd, 3);
    fd = 3;
  }
  CloseFrom(4);

  static pid_t groups[kMaxGroups];
  int n = 0;
  unsigned char buf[4096];
  std::size_t have = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf + have, sizeof(buf) - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // EOF: the owner is gone
    have += static_cast<std::size_t>(r);
    std::size_t i = 0;
    for (; i + sizeof(std::int32_t) <= have; i += sizeof(std::int32_t)) {
      std::int32_t v;
      std::memcpy(&v, buf + i, sizeof(v));
      if (v > 0 && n < kMaxGroups) {
        groups[n++] = v;
      } else if (v < 0) {
        for (int k = 0; k < n; ++k) {
          if (groups[k] == -v) {
            groups[k] = groups[--n];
            break;
          }
        }
      }
    }
    std::memmove(buf, buf + i, have - i);
    have -= i;
  }
  n = DropEnded(groups, n);
  if (n > 0) {
    Line line;
    line.Add("ringtrain: process ");
    line.Add(static_cast<long long>(owner));
    line.Add(" ended with ");
    line.Add(static_cast<long long>(n));
    line.Add(" rank process group(s) still running: SIGTERM, SIGKILL after ");
    line.Add(static_cast<long long>(grace_ms / 1000));
    line.Add("s\n");
    (void)!::write(STDERR_FILENO, line.buf, line.len);
    for (int i = 0; i < n; ++i) (void)::kill(-groups[i], SIGTERM);
    const std::int64_t kill_at = NowMillis() + grace_ms;
    while ((n = DropEnded(groups, n)) > 0 && NowMillis() < kill_at) {
      const timespec nap{0, 100 * 1000 * 1000};
      (void)::nanosleep(&nap, nullptr);
    }
    // Only the groups still alive a moment ago: an ended one's id may be someone else's now.
    for (int i = 0; i < n; ++i) (void)::kill(-groups[i], SIGKILL);
  }
  ::_exit(0);
}

}  // namespace

Status StartGroupJanitor(Duration grace) {
  if (g_fd.load() >= 0) return FailedPrecondition("the group janitor is already started");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return ErrnoStatus(StatusCode::kUnavailable, "group janitor: pipe", errno);
  }
  // Above stdio: with stdin or stdout closed the pipe would get 0 or 1, which the janitor points
  // at /dev/null (and this process's output would go into the pipe).
  for (int& fd : fds) {
    if (fd > STDERR_FILENO) continue;
    const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    const int err = errno;
    ::close(fd);
    fd = moved;
    if (moved < 0) {
      for (const int other : fds) {
        if (other >= 0) ::close(other);
      }
      return ErrnoStatus(StatusCode::kUnavailable, "group janitor: fcntl", err);
    }
  }
  const pid_t owner = ::getpid();
  const std::int64_t grace_ms = std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(grace).count());
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return ErrnoStatus(StatusCode::kUnavailable, "group janitor: fork", err);
  }
  if (pid == 0) JanitorMain(fds[0], fds[1], grace_ms, owner);
  ::close(fds[0]);
  (void)::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  g_pid = pid;
  g_fd = fds[1];
  return Status::Ok();
}

void JanitorWatchGroup(pid_t pgid) {
  if (pgid > 0) Send(static_cast<std::int32_t>(pgid));
}

void JanitorForgetGroup(pid_t pgid) {
  if (pgid > 0) Send(-static_cast<std::int32_t>(pgid));
}

pid_t GroupJanitorPid() { return g_pid.load(); }

}  // namespace ringtrain
