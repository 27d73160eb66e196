// The rank environment: how a supervisor (the operator's pod builder, `ringtrain run`'s local
// executor, the runner's own local launcher) tells a runner process who it is, and how the runner
// reads it back. One builder and one parser, so the two binaries cannot drift; torchrun's names
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) are written beside
// ours and accepted in their place.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace ringtrain::contract {

// Ports and timeouts both binaries assume.
inline constexpr int kMasterPort = 29500;  // rank 0's rendezvous store
inline constexpr int kMetricsPort = 9400;  // /metrics, /status, /healthz (local rank i: +i)
inline constexpr Duration kRendezvousTimeout{std::chrono::seconds(300)};
inline constexpr Duration kCollectiveTimeout{std::chrono::seconds(60)};
// A SIGTERM is a handshake (runner: the gang stops at an agreed step boundary, rank 0
// checkpoints): a rank that has not agreed on one within kDrainTimeout stops at once. A pod's
// terminationGracePeriodSeconds leaves room for that and a checkpoint of the largest built-in
// model (MB, written in well under a second).
inline constexpr Duration kDrainTimeout{std::chrono::seconds(10)};
inline constexpr Duration kTerminationGracePeriod{std::chrono::seconds(30)};
// How long rank 0 may take to read or write a checkpoint while the others wait for it (they hear
// every second that it still works, so a large model on a slow volume fails no one; a volume
// that hangs longer fails the gang, retryably).
inline constexpr Duration kCheckpointTimeout{std::chrono::minutes(30)};
// How long the survivors of a lost rank wait for its replacement when the supervisor replaces
// ranks in place (a pod to schedule and start, a process to spawn) before the gang restarts.
inline constexpr Duration kRecoveryTimeout{std::chrono::seconds(120)};
// How long a rank waits at the gang gate when its supervisor gives no bound: the operator's
// runPolicy.schedulingTimeoutSeconds ends a wait first (and sets the variable from it).
inline constexpr Duration kGangGateTimeout{std::chrono::hours(24)};

// Variable names.
inline constexpr char kEnvJob[] = "RINGTRAIN_JOB";
inline constexpr char kEnvNamespace[] = "RINGTRAIN_NAMESPACE";
inline constexpr char kEnvRank[] = "RINGTRAIN_RANK";
inline constexpr char kEnvNodeRank[] = "RINGTRAIN_NODE_RANK";
inline constexpr char kEnvNprocPerNode[] = "RINGTRAIN_NPROC_PER_NODE";
inline constexpr char kEnvWorldSize[] = "RINGTRAIN_WORLD_SIZE";
inline constexpr char kEnvMasterAddr[] = "RINGTRAIN_MASTER_ADDR";
inline constexpr char kEnvMasterPort[] = "RINGTRAIN_MASTER_PORT";
inline constexpr char kEnvBindAddr[] = "RINGTRAIN_BIND_ADDR";
inline constexpr char kEnvAttempt[] = "RINGTRAIN_ATTEMPT";
inline constexpr char kEnvToken[] = "RINGTRAIN_TOKEN";
inline constexpr char kEnvMetricsPort[] = "RINGTRAIN_METRICS_PORT";
inline constexpr char kEnvTerminationLog[] = "RINGTRAIN_TERMINATION_LOG";
inline constexpr char kEnvLocalWorker[] = "RINGTRAIN_LOCAL_WORKER";  // "1": a launched local rank
inline constexpr char kEnvRendezvousTimeout[] = "RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS";
inline constexpr char kEnvCollectiveTimeout[] = "RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS";
inline constexpr char kEnvCheckpointTimeout[] = "RINGTRAIN_CHECKPOINT_TIMEOUT_SECONDS";
// The gang gate: a file that stays empty until the whole gang is placed and running (in a pod,
// a downward-API projection of the pod annotation the operator sets then). A rank waits for it
// before it starts its rendezvous clock, so a scheduling wait never times a rendezvous out.
inline constexpr char kEnvGangGate[] = "RINGTRAIN_GANG_GATE";
inline constexpr char kEnvGangGateTimeout[] = "RINGTRAIN_GANG_GATE_TIMEOUT_SECONDS";
// In-place recovery: how long the surviving ranks of a gang wait, with their state in memory,
// for a lost rank's replacement before they give up (then the gang restarts from the newest
// checkpoint). 0 = off: any lost rank ends the attempt.
inline constexpr char kEnvRecoveryTimeout[] = "RINGTRAIN_RECOVERY_TIMEOUT_SECONDS";
// Ranks that share one machine's GPUs beyond a pod's own (`ringtrain run` starts every replica on
// this machine, where a cluster's device plugin would give each pod its own GPUs): how many, and
// this process's first one among them. A rank's GPU is chosen by its index among them, and NCCL
// only where each gets its own. Unset: the node's LOCAL_WORLD_SIZE ranks, from 0.
inline constexpr char kEnvHostRanks[] = "RINGTRAIN_HOST_RANKS";
inline constexpr char kEnvHostRankBase[] = "RINGTRAIN_HOST_RANK_BASE";
// Optional: the container image this rank runs (the pod builder sets the runner container's),
// published with the gang's fingerprint so that a gang of mixed images is refused naming them.
inline constexpr char kEnvImage[] = "RINGTRAIN_IMAGE";
inline constexpr char kEnvTorchRank[] = "RANK";
inline constexpr char kEnvTorchWorldSize[] = "WORLD_SIZE";
inline constexpr char kEnvTorchLocalRank[] = "LOCAL_RANK";
inline constexpr char kEnvTorchLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kEnvTorchMasterAddr[] = "MASTER_ADDR";
inline constexpr char kEnvTorchMasterPort[] = "MASTER_PORT";
// torchrun's own settings, which it reads from the environment (PET_<FLAG>) where no flag says
// them: given to a user's program (spec.command), which runs once per replica, so that
// `torchrun train.py` starts the replica's LOCAL_WORLD_SIZE processes and joins the others'
// with no flag. RANK and WORLD_SIZE above are the replica's first rank and the gang's size;
// torchrun sets each of its workers' own.
inline constexpr char kEnvTorchrunNnodes[] = "PET_NNODES";
inline constexpr char kEnvTorchrunNodeRank[] = "PET_NODE_RANK";
inline constexpr char kEnvTorchrunNprocPerNode[] = "PET_NPROC_PER_NODE";
inline constexpr char kEnvTorchrunMasterAddr[] = "PET_MASTER_ADDR";
inline constexpr char kEnvTorchrunMasterPort[] = "PET_MASTER_PORT";

struct RankEnv {
  std::string job = "local";
  std::string ns = "default";
  int rank = 0;  // global; a pod with several GPUs gets its first rank
  int world_size = 1;
  int node_rank = 0;  // which pod or process of the gang
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this node (LOCAL_WORLD_SIZE / RINGTRAIN_NPROC_PER_NODE)
  int attempt = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = kMasterPort;
  std::string token;  // required only when world_size > 1
  // Where this rank listens (store, ring, metrics): RINGTRAIN_BIND_ADDR, else loopback for a
  // gang on loopback (nothing off this host may reach it), else every interface.
  std::string bind_addr = "0.0.0.0";
  int metrics_port = kMetricsPort;  // -1 = off
  std::string termination_log = "/dev/termination-log";
  Duration rendezvous_timeout = kRendezvousTimeout;
  Duration collective_timeout = kCollectiveTimeout;
  Duration checkpoint_timeout = kCheckpointTimeout;
  std::string gang_gate;  // "" = no gate (a local gang starts together)
  Duration gang_gate_timeout = kGangGateTimeout;
  Duration recovery_timeout{0};  // 0 = no in-place recovery
  // Say recovery_timeout even when it is 0 (it is left out then otherwise): the operator's value
  // must replace one a pod template sets (RankEnvVars' place in the list, not the template's).
  bool say_recovery_timeout = false;
  int host_ranks = 0;      // 0 = unset: local_world_size
  int host_rank_base = 0;  // this process's first rank among host_ranks
  std::string image;       // "" = not said (RINGTRAIN_IMAGE unset)
  // A user's program (spec.command), not the runner: LOCAL_WORLD_SIZE and torchrun's PET_*
  // settings are said too.
  bool launcher = false;
};

// The variables that give a runner `env`, ours and torchrun's, in a fixed order. The token is
// left out when empty (a pod takes it from a Secret); the bind address only when `bind_addr`
// is set explicitly (with_bind_addr); the timeouts only when they differ from the defaults.
std::vector<std::pair<std::string, std::string>> RankEnvVars(const RankEnv& env,
                                                             bool with_bind_addr = false);

using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
// Reads a rank's environment; errors name the variable. Ours win over torchrun's names.
StatusOr<RankEnv> ParseRankEnv(const EnvLookup& lookup);
// ParseRankEnv over this process's environment.
StatusOr<RankEnv> RankEnvFromEnvironment();

}  // namespace ringtrain::contract
