// PlanReconcile: the pure gang planner shared by the Kubernetes executor and `ringtrain run`.
// Observed job + replicas + clock in; actions, the new status and events out. No I/O, no
// clock reads, no randomness: the same input always gives the same plan (level-triggered).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/api/training_job.h"

namespace ringtrain::reconcile {

enum class ReplicaPhase { kPending, kRunning, kSucceeded, kFailed };

// One replica (a pod, or a local process) as observed now.
struct ObservedReplica {
  std::string name;
  int rank = 0;
  int attempt = 0;
  ReplicaPhase phase = ReplicaPhase::kPending;
  int exit_code = 0;         // when failed: the runner's code, or 128+signal
  std::string reason;        // "Error", "OOMKilled", "Evicted", "NodeLost", "Deleted", ...
  std::string message;       // the termination message
  bool disruption = false;   // pod condition DisruptionTarget (preemption, eviction)
  bool terminating = false;  // deletion requested, not gone yet
};

// One attempt to read rank 0's /status. reachable=false: it was asked and did not answer (or
// answered garbage); the fields are then meaningless, and the stall deadline is judged only on
// reads that succeeded, so "could not ask" is never taken for "no progress".
struct ObservedProgress {
  std::int64_t step = 0;
  int epoch = 0;
  double samples_per_second = 0;
  double loss = 0;
  bool reachable = true;
  std::string error;  // why it could not be read, when !reachable
};

struct Action {
  enum class Kind { kCreateReplica, kDeleteReplica, kDeleteJob };
  Kind kind;
  int rank = 0;
  int attempt = 0;
  std::string name;    // for deletes
  std::string reason;  // why, for logs
};

struct Event {
  std::string type;  // Normal | Warning
  std::string reason;
  std::string message;
};

struct Plan {
  std::vector<Action> actions;
  api::JobStatus status;
  std::vector<Event> events;
  std::optional<Duration> requeue_after;  // when the plan may change with time alone
};

struct PlanInput {
  const api::TrainingJob* job = nullptr;
  std::vector<ObservedReplica> replicas;
  std::optional<ObservedProgress> progress;  // nullopt: not asked this time
  WallTime now;
};

// Exit codes 1-127 are permanent; 128-255, signals, evictions and lost nodes are retryable.
bool IsRetryable(const ObservedReplica& r);

std::string ReplicaName(const std::string& job, int attempt, int rank);

Plan PlanReconcile(const PlanInput& in);

}  // namespace ringtrain::reconcile
