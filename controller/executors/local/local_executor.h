// The local-process executor behind `ringtrain run`: replicas are ringtrain-runner processes on
// this machine, driven by the same planner as the operator, so a job fails, restarts and
// finishes the same way on a laptop and on a cluster. Owns the child processes and their logs.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "common/clock.h"
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
  // Timestamps (pod-like finishedAt, the planner's now) and intervals (progress polls, the
  // run's wall time); must outlive the run.
  const Clock* clock = &SystemClock();
};

struct LocalRunResult {
  api::JobStatus status;
  std::string result_json;  // rank 0's result file of the last attempt, "" if none
  double wall_seconds = 0;
  bool interrupted = false;
};

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
