#include "common/runner_env.h"

#include <gtest/gtest.h>

#include <map>

namespace ringtrain::contract {
namespace {

EnvLookup From(const std::map<std::string, std::string>& env) {
  return [env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> Build(const RankEnv& e, bool bind = false) {
  std::map<std::string, std::string> env;
  for (const auto& [k, v] : RankEnvVars(e, bind)) {
    EXPECT_TRUE(env.emplace(k, v).second) << k << " written twice";
  }
  return env;
}

// What the supervisors build is what the runner reads: one builder, one parser.
TEST(RankEnv, BuilderAndParserRoundTrip) {
  RankEnv e;
  e.job = "mnist";
  e.ns = "team-a";
  e.rank = 4;
  e.world_size = 8;
  e.node_rank = 1;
  e.local_world_size = 4;
  e.attempt = 3;
  e.master_addr = "mnist-a3-0.mnist.team-a.svc";
  e.master_port = 29511;
  e.token = "0123abcd";
  e.bind_addr = "10.0.0.7";
  e.metrics_port = 9401;
  e.termination_log = "/tmp/term";
  e.rendezvous_timeout = std::chrono::seconds(30);
  e.collective_timeout = std::chrono::seconds(7);
  e.checkpoint_timeout = std::chrono::seconds(900);
  e.host_ranks = 16;
  e.host_rank_base = 4;
  e.image = "ghcr.io/ringtrain/ringtrain-runner:0.2.0";
  auto back = ParseRankEnv(From(Build(e, /*bind=*/true)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job, e.job);
  EXPECT_EQ(back->ns, e.ns);
  EXPECT_EQ(back->rank, e.rank);
  EXPECT_EQ(back->world_size, e.world_size);
  EXPECT_EQ(back->node_rank, e.node_rank);
  EXPECT_EQ(back->local_world_size, e.local_world_size);
  EXPECT_EQ(back->local_rank, 0);
  EXPECT_EQ(back->attempt, e.attempt);
  EXPECT_EQ(back->master_addr, e.master_addr);
  EXPECT_EQ(back->master_port, e.master_port);
  EXPECT_EQ(back->token, e.token);
  EXPECT_EQ(back->bind_addr, e.bind_addr);
  EXPECT_EQ(back->metrics_port, e.metrics_port);
  EXPECT_EQ(back->termination_log, e.termination_log);
  EXPECT_EQ(back->rendezvous_timeout, e.rendezvous_timeout);
  EXPECT_EQ(back->collective_timeout, e.collective_timeout);
  EXPECT_EQ(back->checkpoint_timeout, e.checkpoint_timeout);
  EXPECT_EQ(back->host_ranks, 16);
  EXPECT_EQ(back->host_rank_base, 4);
  EXPECT_EQ(back->image, e.image);
}

TEST(RankEnv, TorchrunNamesAloneAreEnough) {
  auto e = ParseRankEnv(From({{"RANK", "1"},
                              {"WORLD_SIZE", "2"},
                              {"LOCAL_RANK", "1"},
                              {"LOCAL_WORLD_SIZE", "2"},
                              {"MASTER_ADDR", "127.0.0.1"},
                              {"MASTER_PORT", "29600"},
                              {"RINGTRAIN_TOKEN", "t"}}));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->world_size, 2);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_world_size, 2);
  EXPECT_EQ(e->master_port, 29600);
  EXPECT_EQ(e->bind_addr, "127.0.0.1");  // a gang on loopback listens on loopback only
}

TEST(RankEnv, DefaultsAreTheContractsPortsAndTimeouts) {
  auto e = ParseRankEnv(From({}));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->world_size, 1);
  EXPECT_EQ(e->master_port, kMasterPort);
  EXPECT_EQ(e->metrics_port, kMetricsPort);
  EXPECT_EQ(e->rendezvous_timeout, kRendezvousTimeout);
  EXPECT_EQ(e->collective_timeout, kCollectiveTimeout);
  EXPECT_EQ(e->checkpoint_timeout, kCheckpointTimeout);
  // Defaults are not written: a pod spec carries only what differs.
  const auto env = Build(RankEnv{});
  EXPECT_EQ(env.count(kEnvRendezvousTimeout), 0u);
  EXPECT_EQ(env.count(kEnvToken), 0u);  // empty: a pod takes it from a Secret
  EXPECT_EQ(env.count(kEnvBindAddr), 0u);
  EXPECT_EQ(env.count(kEnvHostRanks), 0u);  // a pod's GPUs are its own
  EXPECT_EQ(env.count(kEnvImage), 0u);      // optional: a rank started by hand may not know it
  EXPECT_EQ(e->image, "");
  EXPECT_EQ(e->host_ranks, 0);
  EXPECT_EQ(e->host_rank_base, 0);
}

TEST(RankEnv, BadValuesNameTheVariable) {
  struct Case {
    std::map<std::string, std::string> env;
    const char* names;
  } cases[] = {
      {{{"RINGTRAIN_WORLD_SIZE", "two"}}, "RINGTRAIN_WORLD_SIZE"},
      {{{"WORLD_SIZE", "0"}}, "WORLD_SIZE"},
      {{{"RINGTRAIN_WORLD_SIZE", "2"}, {"RINGTRAIN_RANK", "2"}, {"RINGTRAIN_TOKEN", "t"}},
       "RINGTRAIN_RANK"},
      {{{"RINGTRAIN_WORLD_SIZE", "2"}}, "RINGTRAIN_TOKEN"},
      {{{"MASTER_PORT", "70000"}}, "MASTER_PORT"},
      {{{"RINGTRAIN_METRICS_PORT", "-2"}}, "RINGTRAIN_METRICS_PORT"},
      {{{"RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS", "0"}}, "RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS"},
      {{{"RINGTRAIN_CHECKPOINT_TIMEOUT_SECONDS", "0"}}, "RINGTRAIN_CHECKPOINT_TIMEOUT_SECONDS"},
      {{{"RINGTRAIN_HOST_RANKS", "-1"}}, "RINGTRAIN_HOST_RANKS"},
      // Two local ranks from index 3 do not fit among 4.
      {{{"RINGTRAIN_HOST_RANKS", "4"},
        {"RINGTRAIN_HOST_RANK_BASE", "3"},
        {"LOCAL_WORLD_SIZE", "2"}},
       "RINGTRAIN_HOST_RANK_BASE"},
      {{{"RINGTRAIN_HOST_RANK_BASE", "1"}}, "RINGTRAIN_HOST_RANK_BASE"},
  };
  for (const Case& c : cases) {
    auto e = ParseRankEnv(From(c.env));
    ASSERT_FALSE(e.ok()) << c.names;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(c.names), std::string::npos) << e.status().ToString();
  }
}

}  // namespace
}  // namespace ringtrain::contract
