// Child processes for local replicas (`ringtrain run`, the test kubelet): fork + execve with an
// explicit environment, output to a log file, and death with the parent (PR_SET_PDEATHSIG), so
// no rank outlives the process that started it.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringtrain {

struct SpawnOptions {
  std::string log_path;            // stdout and stderr, truncated; empty = inherit the parent's
  bool new_process_group = false;  // keep the terminal's Ctrl-C away from the child
};

// Starts argv[0] (a path) with exactly `env`. A child that cannot exec exits 127.
StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& env,
                             const SpawnOptions& options);

}  // namespace ringtrain
