// The local-process executor behind `ringtrain run`: replicas are ringtrain-runner processes on
// this machine, driven by the same planner as the operator, so a job fails, restarts and
// finishes the same way on a laptop and on a cluster. Owns the child processes and their logs.
#pragma once

#include <sys/file.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/process.h"
#include "common/runner_env.h"
#include "common/status.h"
#include "controller/api/training_job.h"
#include "controller/executors/local/local_container.h"
#include "controller/reconcile/planner.h"

namespace ringtrain::executors {

struct LocalRunOptions {
  std::string runner_path;  // ringtrain-runner (unused when the spec sets a command)
  // Logs, termination messages, results (an earlier run's are removed at start) and, unless
  // spec.checkpoint.path is set, checkpoints (in checkpoints/<job name>).
  std::string workdir;
  bool tty = false;  // redraw one progress line instead of printing a line every 10 s
  // SIGTERM → SIGKILL, as a pod's terminationGracePeriodSeconds: a rank stops at an agreed
  // step and rank 0 checkpoints (a multi-GPU replica's launcher gives its ranks 15 s of it).
  Duration grace{contract::kTerminationGracePeriod};
  // Set (a second Ctrl-C) while the ranks stop after *interrupted: those still running get
  // SIGKILL at once instead of the rest of their grace. May be null.
  const std::atomic<bool>* kill_now = nullptr;
  Duration poll{std::chrono::milliseconds(100)};
  // Starts one replica's process (tests inject failures); ChildProcess::Spawn by default. An
  // error is that replica's StartError (cannot fork, cannot open its log), never the run's.
  std::function<StatusOr<ChildProcess>(const std::vector<std::string>& argv,
                                       const std::map<std::string, std::string>& env,
                                       const SpawnOptions& options)>
      spawn = ChildProcess::Spawn;
  // The kernel's count of OOM kills in the cgroup the ranks run in (they inherit this process's):
  // a rank killed by SIGKILL while it went up was OOM-killed (reason OOMKilled, as a kubelet
  // says), not killed by someone. Null: the cgroup's own counter (train::ReadOomKillCount);
  // nullopt: none to read, and a SIGKILL reads Killed.
  std::function<std::optional<std::uint64_t>()> oom_kills;
  // Timestamps (pod-like finishedAt, the planner's now) and intervals (progress polls, the
  // run's wall time); must outlive the run.
  const Clock* clock = &SystemClock();
};

struct LocalRunResult {
  api::JobStatus status;
  std::string result_json;  // rank 0's result file of the last attempt, "" if none
  double wall_seconds = 0;
  bool interrupted = false;
  // Where the built-in runner kept this job's checkpoints ("" for a spec.command job), and the
  // newest one there at the end (a step of -1 and "" when there is none): a rerun resumes
  // from it.
  std::string checkpoint_dir;
  std::int64_t checkpoint_step = -1;
  std::string checkpoint_path;
  // The checkpoint step the first attempt resumed from (its first /status read, or rank 0's
  // result), -1 when it started from step 0 or it is not known: a summary without rank 0's
  // result (an interrupted run) still says it resumed.
  std::int64_t resumed_from = -1;
};

// The newest checkpoint file (ckpt-<step>.bin) in `dir` by its step, as the runner resumes from
// it; nullopt when there is none (or no such dir). Read by name only, not checked.
std::optional<std::pair<std::int64_t, std::string>> NewestCheckpointFile(const std::string& dir);

// An exclusive flock(2) on DIR/.ringtrain.lock for as long as it lives: two `ringtrain run`s in
// one work directory would truncate each other's logs and resume from each other's
// checkpoints. The lock dies with the process (never a stale pid file); ranks do not inherit it.
class WorkDirLock {
 public:
  static constexpr char kFileName[] = ".ringtrain.lock";
  // Takes the lock without waiting: FailedPrecondition naming the directory when another
  // process holds it (with that process's pid when it wrote one). A file system that has no
  // locks (NFS without its lock daemon: ENOLCK; EOPNOTSUPP) refuses no run: the lock returned
  // then holds nothing and says why in unheld() (`flock` is a test's stand-in for flock(2)).
  static StatusOr<WorkDirLock> Acquire(const std::string& dir, int (*flock)(int, int) = ::flock);
  // Why this lock holds nothing ("" when it holds the directory).
  const std::string& unheld() const { return unheld_; }

  WorkDirLock() = default;
  ~WorkDirLock();
  WorkDirLock(WorkDirLock&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), unheld_(std::move(other.unheld_)) {}
  WorkDirLock& operator=(WorkDirLock&& other) noexcept;
  WorkDirLock(const WorkDirLock&) = delete;
  WorkDirLock& operator=(const WorkDirLock&) = delete;

 private:
  explicit WorkDirLock(int fd, std::string unheld = "") : fd_(fd), unheld_(std::move(unheld)) {}
  int fd_ = -1;
  std::string unheld_;
};

// The checkpoint directory a job names itself (spec.checkpoint.path): locked as the work
// directory is, for the run's life, so that two runs of the job, each in its own work
// directory, do not resume from and remove each other's checkpoints (review: the second resumed
// from the first's step 4900, and the first then failed on a temporary the second removed).
// Nothing to lock (an empty holder) for a job without one, a program of the user's own, or a
// path inside `workdir` (the work directory's lock holds it). FailedPrecondition naming the
// field and the holder's pid when another run holds it.
StatusOr<WorkDirLock> LockCheckpointDir(const api::JobSpec& spec, const std::string& workdir);

// spec.template's runner container as the local ranks of this process get it (its environment,
// its working directory; see local_container.h); an error names the field and what to do.
StatusOr<LocalContainer> LocalContainerForRun(const api::JobSpec& spec);

// What `ringtrain run` cannot do although a cluster can (spec.runPolicy.suspend: a local run
// cannot be resumed): a FailedPrecondition naming the field and what to do, else Ok.
Status CheckRunsLocally(const api::JobSpec& spec);

// The progress line `ringtrain run` prints (or redraws on a tty): the phase, attempt, epoch,
// step, loss and samples/s of rank 0's last good /status read, and the restarts, e.g.
// "Running | attempt 0 | epoch 2/10 | step 1200 | loss 0.4210 | 5120 samples/s | restarts 0".
// A rank 0 that is "stalled" or "recovering" shows that word after its 0 samples/s; before the
// first read, "starting N replicas" stands for the step.
std::string FormatProgressLine(const api::TrainingJob& job,
                               const std::optional<reconcile::ObservedProgress>& progress);

// Runs the job to completion (or until *interrupted becomes true: all ranks are stopped).
StatusOr<LocalRunResult> RunLocal(const api::TrainingJob& job, const LocalRunOptions& options,
                                  const std::atomic<bool>* interrupted);

}  // namespace ringtrain::executors
