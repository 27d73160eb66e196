// What a pod gives its runner container that a local rank of `ringtrain run` can have too: the
// working directory and environment of spec.template's "runner" container, Kubernetes' $(VAR)
// expansion, and the termination message (FallbackToLogsOnError). Pure: no I/O, no processes;
// the local executor applies it.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "controller/api/training_job.h"

namespace ringtrain::executors {

using EnvMap = std::map<std::string, std::string>;

// One entry of the runner container's env, resolved as far as it can be before a rank exists.
struct LocalEnvVar {
  std::string name;
  std::string value;       // `value` as written ($(VAR) expanded per rank), or the final value
  std::string field_path;  // a fieldRef resolved per rank (metadata.name, ...); "" = value
  bool literal = false;    // value is final: taken from ringtrain's own environment
};

struct LocalContainer {
  std::string working_dir;         // spec.template's workingDir; "" = where `ringtrain run` runs
  std::vector<LocalEnvVar> env;    // the runner container's env, in order, minus ours
  std::vector<std::string> notes;  // what a local run does differently, for the console
};

// The fieldRef paths a local rank has (everything else is treated like a secretKeyRef):
// metadata.name (the replica's name, as its pod's), metadata.namespace, status.podIP and
// status.hostIP (127.0.0.1: the gang runs on loopback), spec.nodeName (this host's name).
struct LocalPodFields {
  std::string name;
  std::string ns;
  std::string node_name;
};

// Reads spec.template's "runner" container. There is no API server under `ringtrain run`, so an
// env var whose valueFrom is a secretKeyRef, configMapKeyRef, resourceFieldRef or an
// unavailable fieldRef takes its value from `host_env` (ringtrain's own environment) when set
// there, is left unset when the reference is optional, and is refused otherwise with an error
// that names the variable and its field path; envFrom likewise (refused unless optional).
// Entries named in `injected_names` (the rank contract) are dropped, as the pod builder drops
// them. A relative workingDir is made absolute against `cwd`.
StatusOr<LocalContainer> LocalContainerFromSpec(const api::JobSpec& spec, const EnvMap& host_env,
                                                const std::string& cwd,
                                                const std::set<std::string>& injected_names);

// Kubernetes' expansion of command, args and env values: $(NAME) becomes NAME's value when
// `vars` defines it and stays as written otherwise; $$ is a literal $.
std::string ExpandVarRefs(const std::string& text, const EnvMap& vars);

struct LocalRankExec {
  std::vector<std::string> argv;
  EnvMap env;
};

// A rank's command line and environment as its pod would have them: `host_env` (a pod has its
// image's), overridden by `injected` (the rank contract; like the pod builder's entries they win
// over a template entry of the same name), then the container's entries in order, each value
// expanded with the entries declared before it; `command` is expanded with all declared
// entries (not `host_env`, which a pod does not declare either).
LocalRankExec LocalRankExecFor(const LocalContainer& container,
                               const std::vector<std::string>& command, const EnvMap& host_env,
                               const std::vector<std::pair<std::string, std::string>>& injected,
                               const LocalPodFields& pod);

// Kubernetes' limits on a termination message: the file is read up to 4096 bytes, and the log
// fallback is the last 80 lines or 2048 bytes of the log, whichever is smaller.
inline constexpr std::size_t kTerminationMessageMaxBytes = 4096;
inline constexpr std::size_t kLogFallbackMaxLines = 80;
inline constexpr std::size_t kLogFallbackMaxBytes = 2048;

// The message a failed replica's pod would show (terminationMessagePolicy
// FallbackToLogsOnError, as the pod builder sets it): the termination file's text, else, when
// the exit code is not 0, the end of the log (`log_tail`: at least the log's last
// kLogFallbackMaxBytes bytes). Trailing newlines and spaces are dropped, as the operator does.
std::string TerminationMessage(const std::string& termination_file, const std::string& log_tail,
                               int exit_code);

}  // namespace ringtrain::executors
