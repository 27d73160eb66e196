// One pod, several GPUs: with RINGTRAIN_NPROC_PER_NODE (or LOCAL_WORLD_SIZE) = g > 1 and no
// RINGTRAIN_LOCAL_WORKER, the runner becomes a small launcher (torchrun's role): it starts g
// copies of itself, rank = node_rank × g + local_rank, LOCAL_RANK = local_rank (its GPU), each
// with its own metrics port (base + local_rank), forwards SIGTERM/SIGINT, and when one rank
// fails stops the others and exits with that rank's code and reason, so the controller's
// gang logic (retryable 128-255 vs permanent) sees the pod exactly as for a single rank.
// The ranks' termination messages go to a folder under $TMPDIR, removed on the way out; one
// left by a launcher killed outright is removed by the next launcher that starts there.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace ringtrain {

struct LocalLaunch {
  int nproc = 1;
  int node_rank = 0;
  std::string self;  // the runner binary
  std::vector<std::string> args;
  std::string termination_log = "/dev/termination-log";
  int metrics_port = 9400;  // base; -1 = off; 0 = ephemeral for every rank
};

// How many ranks this pod should start, from the environment (1 = run in this process).
StatusOr<LocalLaunch> LocalLaunchFromEnvironment(const std::vector<std::string>& args);

// Runs the local ranks to completion; returns the process exit code. A stop request
// (common/stop.h: SIGTERM/SIGINT) is forwarded to every rank as its signal.
int RunLocalRanks(const LocalLaunch& launch);

}  // namespace ringtrain
