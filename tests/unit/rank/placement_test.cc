// Where a rank computes: pure, so every case runs without a GPU (a CUDA build's choices with
// `visible` devices, and a build without CUDA).
#include <gtest/gtest.h>

#include "runner/rank/rank.h"

namespace ringtrain::rank {
namespace {

StatusOr<Placement> Place(const train::TrainConfig& c, int local_rank, int local_world,
                          int visible) {
  return ChoosePlacement(c, local_rank, local_world, visible, /*cuda_built=*/true);
}

train::TrainConfig Config(const std::string& device, const std::string& backend) {
  train::TrainConfig c;
  c.device = *contract::EnumFromName<contract::Device>(device);
  c.backend = *contract::EnumFromName<contract::Backend>(backend);
  return c;
}

TEST(Placement, AutoPicksCudaAndNcclOnlyWhenEveryRankOwnsAGpu) {
  auto p = Place(Config("auto", "auto"), 0, 1, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->cuda);  // no GPU: CPU and the TCP ring
  EXPECT_EQ(p->device, -1);
  p = Place(Config("auto", "auto"), 1, 2, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->cuda);
  EXPECT_EQ(p->backend, Backend::kNccl);
  EXPECT_EQ(p->device, 1);  // LOCAL_RANK's GPU
  p = Place(Config("auto", "auto"), 1, 2, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->backend, Backend::kTcp);  // two ranks on one GPU: NCCL would refuse
  EXPECT_EQ(p->device, 0);
  EXPECT_NE(p->reason.find("share"), std::string::npos);
  p = Place(Config("cpu", "auto"), 0, 1, 8);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->cuda);
}

TEST(Placement, ImpossibleChoicesAreErrorsNamingTheFlag) {
  auto p = Place(Config("cuda", "auto"), 0, 1, 0);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("--device"), std::string::npos);
  p = Place(Config("cpu", "nccl"), 0, 1, 1);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--backend"), std::string::npos);
  p = Place(Config("cuda", "nccl"), 0, 2, 1);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("one GPU per rank"), std::string::npos);
}

TEST(Placement, ABuildWithoutCudaComputesOnTheCpuUnlessCudaIsAskedFor) {
  auto p = ChoosePlacement(Config("auto", "auto"), 0, 1, 0, /*cuda_built=*/false);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->cuda);
  EXPECT_EQ(p->backend, Backend::kTcp);
  for (const auto& [device, backend] :
       {std::pair{"cuda", "auto"}, std::pair{"auto", "nccl"}, std::pair{"cuda", "tcp"}}) {
    p = ChoosePlacement(Config(device, backend), 0, 1, 4, /*cuda_built=*/false);
    ASSERT_FALSE(p.ok()) << device << "/" << backend;
    EXPECT_EQ(p.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(p.status().message().find("built without CUDA"), std::string::npos)
        << p.status().message();
  }
}

// `ringtrain run` starts every replica on one machine: replicas share its GPUs as a pod's local
// ranks share the pod's, and each rank's GPU and backend follow from its place among all of them.
TEST(Placement, ReplicasOfOneMachineShareItsGpus) {
  train::RankEnv pod;  // a pod's GPUs are its own: LOCAL_RANK of LOCAL_WORLD_SIZE
  pod.local_rank = 1;
  pod.local_world_size = 2;
  EXPECT_EQ(GpuSlotOf(pod).index, 1);
  EXPECT_EQ(GpuSlotOf(pod).sharers, 2);

  // Two replicas of one GPU each (gpusPerReplica 1) under `ringtrain run`.
  auto replica = [](int r, int replicas, int gpus, int local_rank) {
    train::RankEnv e;
    e.local_rank = local_rank;
    e.local_world_size = gpus;
    e.host_ranks = replicas * gpus;
    e.host_rank_base = r * gpus;
    return GpuSlotOf(e);
  };
  for (int r = 0; r < 2; ++r) {
    const GpuSlot s = replica(r, 2, 1, 0);
    EXPECT_EQ(s.index, r);
    EXPECT_EQ(s.sharers, 2);
    // One GPU: both on it, through the TCP ring (backend auto), not NCCL.
    auto one = Place(Config("auto", "auto"), s.index, s.sharers, 1);
    ASSERT_TRUE(one.ok());
    EXPECT_TRUE(one->cuda);
    EXPECT_EQ(one->backend, Backend::kTcp);
    EXPECT_EQ(one->device, 0);
    // Two GPUs: one each, NCCL.
    auto two = Place(Config("auto", "auto"), s.index, s.sharers, 2);
    ASSERT_TRUE(two.ok());
    EXPECT_EQ(two->backend, Backend::kNccl);
    EXPECT_EQ(two->device, r);
    // NCCL asked for on one GPU: refused, naming the sharing.
    auto nccl = Place(Config("cuda", "nccl"), s.index, s.sharers, 1);
    ASSERT_FALSE(nccl.ok());
    EXPECT_NE(nccl.status().message().find("2 ranks share 1 visible GPU"), std::string::npos)
        << nccl.status().message();
  }
  // Two replicas of two GPUs each on a 4-GPU machine: replica 1's local ranks get GPUs 2 and 3.
  for (int local = 0; local < 2; ++local) {
    const GpuSlot s = replica(1, 2, 2, local);
    auto p = Place(Config("auto", "auto"), s.index, s.sharers, 4);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->backend, Backend::kNccl);
    EXPECT_EQ(p->device, 2 + local);
  }
}

TEST(Placement, TheTcpBackendOnAGpuIsTheSameRingAsOnTheCpu) {
  auto gpu = Place(Config("cuda", "tcp"), 3, 4, 2);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  EXPECT_TRUE(gpu->cuda);
  EXPECT_EQ(gpu->backend, Backend::kTcp);
  EXPECT_EQ(gpu->device, 1);  // local rank 3 of 4 on 2 GPUs
  auto cpu = Place(Config("cpu", "tcp"), 3, 4, 2);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->backend, gpu->backend);
}

}  // namespace
}  // namespace ringtrain::rank
