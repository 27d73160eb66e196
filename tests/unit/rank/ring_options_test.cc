// Both the CPU and the GPU path build their TCP ring from TcpRingOptions: where it listens
// and what it advertises come from the rank's environment, whichever engine computes.
#include "runner/rank/rank.h"

#include <gtest/gtest.h>

#include <map>

#include "tests/fakes/rank_fixtures.h"

namespace ringtrain::rank {
namespace {

TEST(TcpRingOptions, ListenWhereTheEnvironmentSays) {
  train::RankEnv env = testing::RankEnvOf({{"RINGTRAIN_RANK", "1"},
                                           {"RINGTRAIN_WORLD_SIZE", "4"},
                                           {"RINGTRAIN_TOKEN", "t"},
                                           {"RINGTRAIN_MASTER_ADDR", "job-a0-0.job.default.svc"},
                                           {"RINGTRAIN_BIND_ADDR", "10.1.2.3"},
                                           {"RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS", "42"},
                                           {"RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS", "7"}});
  comm::TcpCommOptions o = TcpRingOptions(env, "10.1.2.3");
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.size, 4);
  EXPECT_EQ(o.bind_host, "10.1.2.3");
  EXPECT_EQ(o.advertise_host, "10.1.2.3");
  EXPECT_EQ(o.connect_timeout, std::chrono::seconds(42));
  EXPECT_EQ(o.collective_timeout, std::chrono::seconds(7));
}

TEST(TcpRingOptions, ALoopbackGangListensOnLoopbackOnly) {
  train::RankEnv env = testing::RankEnvOf({{"RINGTRAIN_RANK", "0"},
                                           {"RINGTRAIN_WORLD_SIZE", "2"},
                                           {"RINGTRAIN_TOKEN", "t"},
                                           {"RINGTRAIN_MASTER_ADDR", "127.0.0.1"}});
  EXPECT_EQ(TcpRingOptions(env, "127.0.0.1").bind_host, "127.0.0.1");
}

}  // namespace
}  // namespace ringtrain::rank
