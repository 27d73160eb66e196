// Child processes for the three supervisors (`ringtrain run`, the runner's local launcher, the
// test kubelet): fork + exec with an explicit environment (the program found as execvp(3) finds
// it, on that environment's PATH), a working directory, output to a log file, death with the
// parent (PR_SET_PDEATHSIG), reaping by pid without blocking, and termination with a grace
// period before SIGKILL. Owns one child each; must not know what the child runs.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace ringtrain {

struct SpawnOptions {
  std::string log_path;     // stdout and stderr, truncated; empty = inherit the parent's
  std::string working_dir;  // the child's current directory; empty = the parent's
  // Keep the terminal's Ctrl-C away from the child. Its signals (Signal, RequestTerminate, the
  // SIGKILL after the grace) then go to the whole group, and what is left of the group gets
  // SIGKILL when the child is reaped: nothing it started outlives it. Such a child reads its
  // stdin from /dev/null, as a pod's container does: a group in the background that reads the
  // terminal is stopped (SIGTTIN), and one of a pipe would read the parent's input.
  bool new_process_group = false;
};

// Exit codes of a child that never ran its program, as a shell (and `docker run`) reports them;
// both are permanent failures in the runner contract (1-127).
inline constexpr int kExitNotFound = 127;       // no such program (on PATH, or at its path)
inline constexpr int kExitCannotExecute = 126;  // found but not runnable, or no working dir

// Go's exec.LookPath: a name with a slash is used as it is when it is an executable regular file;
// a bare name is searched on `search_path` (colon-separated; an empty entry is the current
// directory). nullopt when none is found.
std::optional<std::string> LookPath(const std::string& command, const std::string& search_path);
// The process's own PATH, or "/usr/local/bin:/usr/bin:/bin" without one.
std::string ProcessSearchPath();

// The exit code a shell would report for a waitpid(2) status: the code of a normal exit,
// 128 + n for a death by signal n (so 137 for SIGKILL, 143 for SIGTERM).
int ExitCodeFromWaitStatus(int wait_status);

// One child process, reaped only by its own pid (never waitpid(-1), which would steal the
// children of another supervisor in the same process). Movable, not copyable. A child still
// running when its ChildProcess is destroyed is killed and reaped: none outlives its owner and
// none is left a zombie. Not thread-safe: one owner (or a mutex) per child.
class ChildProcess {
 public:
  // How long Terminate and the destructor wait for a SIGKILLed child to be reaped. A kill
  // cannot be ignored, so this bounds only a child stuck in the kernel (uninterruptible I/O).
  static constexpr Duration kReapAfterKillTimeout{std::chrono::seconds(10)};

  // How long Spawn waits to learn whether the child's exec succeeded (it reports a failure
  // through a close-on-exec pipe at once; this bounds only a child stopped before its exec).
  static constexpr Duration kExecReportTimeout{std::chrono::seconds(10)};

  // Starts argv[0] with exactly `env`, in options.working_dir, the way a container runtime
  // does: a name without a slash is searched on env's PATH (execvp(3) semantics, "/bin:/usr/bin"
  // when env has no PATH; no /bin/sh fallback for a file without #!), a path with a slash is
  // taken as it is, relative to the working directory. A child that cannot enter the working
  // directory or exec its program exits kExitNotFound or kExitCannotExecute: Spawn returns it
  // already exited, with start_error() saying why (`exec "sh": not found on PATH (...)`), which
  // is also written to the log (or to stderr without one). The child gets SIGKILL when the
  // thread that spawned it ends (PR_SET_PDEATHSIG follows the forking thread, not the process).
  static StatusOr<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                      const std::map<std::string, std::string>& env,
                                      const SpawnOptions& options);

  ChildProcess() = default;  // holds no process
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Started and not yet reaped.
  bool running() const { return pid_ > 0 && !exited_; }
  bool exited() const { return exited_; }
  // Once exited: the exit code, or 128 + the signal that ended it.
  int exit_code() const { return exit_code_; }
  // Once exited: the signal that ended it, 0 when it exited on its own.
  int term_signal() const { return term_signal_; }
  // Whether Terminate or RequestTerminate was called.
  bool terminating() const { return terminating_; }
  // Why the program never ran (working directory, exec), one line; "" when it was started.
  const std::string& start_error() const { return start_error_; }

  // Reaps the child if it has ended, without blocking; sends the SIGKILL of a
  // RequestTerminate whose grace has passed. True once the child has exited.
  bool Poll();

  // Sends `signal` to a running child (its group, when it has its own); false once it has been
  // reaped (its pid may be reused).
  bool Signal(int signal);

  // Sends `signal` now and arms a SIGKILL that the first Poll after `grace` sends if the child
  // still runs; a grace of zero sends SIGKILL at once. A second call sends its signal again but
  // keeps the first deadline, so forwarding a later SIGINT never postpones the kill.
  void RequestTerminate(Duration grace, int signal = SIGTERM);

  // Waits until the child exits or `timeout` passes (DeadlineExceeded), whichever is first;
  // a stop request (common/stop.h: SIGTERM, SIGINT) ends the wait with Cancelled. A pending
  // RequestTerminate deadline is honoured while waiting.
  Status Wait(Duration timeout);

  // RequestTerminate(grace), then waits for the exit: `grace` for the child to stop on its own,
  // then SIGKILL and at most kReapAfterKillTimeout. Deliberately deaf to stop requests: it is
  // what a stopping process runs, and returning early would leave the child behind.
  Status Terminate(Duration grace);

 private:
  ChildProcess(pid_t pid, std::string name) : pid_(pid), name_(std::move(name)) {}
  void Reset();
  // Blocks on the child's pidfd (or short sleeps where pidfd_open is missing) until it exits,
  // `deadline` passes, or, when `wake_on_stop`, a stop is requested.
  void WaitUntil(SteadyTime deadline, bool wake_on_stop);
  // kill(2) to the child, or to its group when it was spawned with one of its own.
  bool SendSignal(int signal) const;

  pid_t pid_ = -1;
  std::string name_;  // argv[0], for errors
  std::string start_error_;
  bool exited_ = false;
  int exit_code_ = 0;
  int term_signal_ = 0;
  bool own_group_ = false;  // SpawnOptions::new_process_group
  bool terminating_ = false;
  bool kill_armed_ = false;
  SteadyTime kill_at_{};
};

}  // namespace ringtrain
