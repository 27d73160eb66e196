#include "common/runner_env.h"

#include "common/env.h"

namespace ringtrain::contract {
namespace {

// `primary`, else `fallback` (may be null), else `def`; must be an integer in [min, max].
StatusOr<int> Int(const EnvLookup& lookup, const char* primary, const char* fallback, int def,
                  int min, int max) {
  const char* name = primary;
  std::optional<std::string> v = lookup(primary);
  if ((!v || v->empty()) && fallback != nullptr) {
    name = fallback;
    v = lookup(fallback);
  }
  if (!v || v->empty()) return def;
  ASSIGN_OR_RETURN(std::int64_t n, ParseInt(*v, name));
  if (n < min || n > max) {
    return InvalidArgument(std::string(name) + ": " + std::to_string(n) + " is out of range [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<int>(n);
}

std::string Str(const EnvLookup& lookup, const char* primary, const char* fallback,
                const std::string& def) {
  if (auto v = lookup(primary); v && !v->empty()) return *v;
  if (fallback != nullptr) {
    if (auto v = lookup(fallback); v && !v->empty()) return *v;
  }
  return def;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> RankEnvVars(const RankEnv& e,
                                                             bool with_bind_addr) {
  const std::string rank = std::to_string(e.rank);
  const std::string world = std::to_string(e.world_size);
  const std::string port = std::to_string(e.master_port);
  std::vector<std::pair<std::string, std::string>> out = {
      {kEnvJob, e.job},
      {kEnvNamespace, e.ns},
      {kEnvRank, rank},
      {kEnvNodeRank, std::to_string(e.node_rank)},
      {kEnvNprocPerNode, std::to_string(e.local_world_size)},
      {kEnvWorldSize, world},
      {kEnvMasterAddr, e.master_addr},
      {kEnvMasterPort, port},
      {kEnvAttempt, std::to_string(e.attempt)},
  };
  if (!e.token.empty()) out.emplace_back(kEnvToken, e.token);
  if (with_bind_addr) out.emplace_back(kEnvBindAddr, e.bind_addr);
  out.insert(out.end(), {
                            {kEnvTorchMasterAddr, e.master_addr},
                            {kEnvTorchMasterPort, port},
                            {kEnvTorchWorldSize, world},
                            {kEnvTorchRank, rank},
                            {kEnvTorchLocalRank, std::to_string(e.local_rank)},
                            {kEnvMetricsPort, std::to_string(e.metrics_port)},
                            {kEnvTerminationLog, e.termination_log},
                        });
  const auto seconds = [](Duration d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count());
  };
  if (e.rendezvous_timeout != kRendezvousTimeout) {
    out.emplace_back(kEnvRendezvousTimeout, seconds(e.rendezvous_timeout));
  }
  if (e.collective_timeout != kCollectiveTimeout) {
    out.emplace_back(kEnvCollectiveTimeout, seconds(e.collective_timeout));
  }
  if (e.checkpoint_timeout != kCheckpointTimeout) {
    out.emplace_back(kEnvCheckpointTimeout, seconds(e.checkpoint_timeout));
  }
  if (!e.gang_gate.empty()) out.emplace_back(kEnvGangGate, e.gang_gate);
  if (e.recovery_timeout > Duration::zero() || e.say_recovery_timeout) {
    out.emplace_back(kEnvRecoveryTimeout, seconds(e.recovery_timeout));
  }
  if (!e.gang_gate.empty() && e.gang_gate_timeout != kGangGateTimeout) {
    out.emplace_back(kEnvGangGateTimeout, seconds(e.gang_gate_timeout));
  }
  if (e.host_ranks > 0) {
    out.emplace_back(kEnvHostRanks, std::to_string(e.host_ranks));
    out.emplace_back(kEnvHostRankBase, std::to_string(e.host_rank_base));
  }
  if (!e.image.empty()) out.emplace_back(kEnvImage, e.image);
  if (e.launcher) {
    const int nodes = e.local_world_size > 0 ? e.world_size / e.local_world_size : e.world_size;
    out.insert(out.end(), {
                              {kEnvTorchLocalWorldSize, std::to_string(e.local_world_size)},
                              {kEnvTorchrunNnodes, std::to_string(nodes)},
                              {kEnvTorchrunNodeRank, std::to_string(e.node_rank)},
                              {kEnvTorchrunNprocPerNode, std::to_string(e.local_world_size)},
                              {kEnvTorchrunMasterAddr, e.master_addr},
                              {kEnvTorchrunMasterPort, port},
                          });
  }
  return out;
}

StatusOr<RankEnv> ParseRankEnv(const EnvLookup& lookup) {
  RankEnv e;
  e.job = Str(lookup, kEnvJob, nullptr, e.job);
  e.ns = Str(lookup, kEnvNamespace, nullptr, e.ns);
  ASSIGN_OR_RETURN(e.world_size, Int(lookup, kEnvWorldSize, kEnvTorchWorldSize, 1, 1, 1 << 16));
  ASSIGN_OR_RETURN(e.rank, Int(lookup, kEnvRank, kEnvTorchRank, 0, 0, e.world_size - 1));
  ASSIGN_OR_RETURN(e.local_world_size,
                   Int(lookup, kEnvTorchLocalWorldSize, kEnvNprocPerNode, 1, 1, 1 << 10));
  ASSIGN_OR_RETURN(e.node_rank, Int(lookup, kEnvNodeRank, nullptr, 0, 0, 1 << 16));
  ASSIGN_OR_RETURN(e.local_rank, Int(lookup, kEnvTorchLocalRank, nullptr, 0, 0, 1 << 16));
  ASSIGN_OR_RETURN(e.attempt, Int(lookup, kEnvAttempt, nullptr, 0, 0, 1 << 30));
  e.master_addr = Str(lookup, kEnvMasterAddr, kEnvTorchMasterAddr, e.master_addr);
  ASSIGN_OR_RETURN(e.master_port,
                   Int(lookup, kEnvMasterPort, kEnvTorchMasterPort, kMasterPort, 1, 65535));
  const bool loopback = e.master_addr == "localhost" || e.master_addr.starts_with("127.");
  e.bind_addr = Str(lookup, kEnvBindAddr, nullptr, loopback ? "127.0.0.1" : "0.0.0.0");
  e.token = Str(lookup, kEnvToken, nullptr, "");
  if (e.token.empty() && e.world_size > 1) {
    return InvalidArgument(std::string(kEnvToken) + ": required when " + kEnvWorldSize + " > 1");
  }
  ASSIGN_OR_RETURN(e.metrics_port, Int(lookup, kEnvMetricsPort, nullptr, kMetricsPort, -1, 65535));
  e.termination_log = Str(lookup, kEnvTerminationLog, nullptr, e.termination_log);
  ASSIGN_OR_RETURN(int rdzv, Int(lookup, kEnvRendezvousTimeout, nullptr, 300, 1, 86400));
  e.rendezvous_timeout = std::chrono::seconds(rdzv);
  ASSIGN_OR_RETURN(int coll, Int(lookup, kEnvCollectiveTimeout, nullptr, 60, 1, 86400));
  e.collective_timeout = std::chrono::seconds(coll);
  constexpr int kDefaultCheckpoint = static_cast<int>(
      std::chrono::duration_cast<std::chrono::seconds>(kCheckpointTimeout).count());
  ASSIGN_OR_RETURN(int ckpt,
                   Int(lookup, kEnvCheckpointTimeout, nullptr, kDefaultCheckpoint, 1, 7 * 86400));
  e.checkpoint_timeout = std::chrono::seconds(ckpt);
  e.gang_gate = Str(lookup, kEnvGangGate, nullptr, "");
  constexpr int kDefaultGate =
      static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(kGangGateTimeout).count());
  ASSIGN_OR_RETURN(int gate,
                   Int(lookup, kEnvGangGateTimeout, nullptr, kDefaultGate, 1, 30 * 86400));
  e.gang_gate_timeout = std::chrono::seconds(gate);
  ASSIGN_OR_RETURN(int recovery, Int(lookup, kEnvRecoveryTimeout, nullptr, 0, 0, 86400));
  e.recovery_timeout = std::chrono::seconds(recovery);
  ASSIGN_OR_RETURN(e.host_ranks, Int(lookup, kEnvHostRanks, nullptr, 0, 0, 1 << 16));
  ASSIGN_OR_RETURN(e.host_rank_base, Int(lookup, kEnvHostRankBase, nullptr, 0, 0, 1 << 16));
  if (e.host_ranks > 0 && e.host_rank_base + e.local_world_size > e.host_ranks) {
    return InvalidArgument(std::string(kEnvHostRankBase) + ": " + std::to_string(e.host_rank_base) +
                           " + " + std::to_string(e.local_world_size) + " local rank(s) exceed " +
                           kEnvHostRanks + " " + std::to_string(e.host_ranks));
  }
  if (e.host_ranks == 0 && e.host_rank_base != 0) {
    return InvalidArgument(std::string(kEnvHostRankBase) + ": set without " + kEnvHostRanks);
  }
  e.image = Str(lookup, kEnvImage, nullptr, "");
  return e;
}

StatusOr<RankEnv> RankEnvFromEnvironment() {
  return ParseRankEnv([](const char* name) { return GetEnv(name); });
}

}  // namespace ringtrain::contract
