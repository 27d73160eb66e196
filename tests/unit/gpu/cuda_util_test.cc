// CudaStatus's answer to a device that ran out of memory: permanent only when this process alone
// outgrows the GPU, retryable when others hold the memory; and device buffers count their bytes.
#include "runner/cuda/cuda_util.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <limits>

#include "tests/unit/gpu/gpu_test_util.h"

namespace ringtrain::gpu {
namespace {

constexpr std::size_t kGB = 1000ull * 1000 * 1000;

TEST(DeviceOutOfMemory, WhatOutgrowsTheWholeGpuIsPermanentAndNamesWhatToChange) {
  // 70 GB held and 12 GB asked on an 80 GB GPU: no restart makes it fit.
  const Status s = ClassifyDeviceOutOfMemory("cudaMalloc of 12000000000 bytes", 12 * kGB, 70 * kGB,
                                             9 * kGB, 80 * kGB);
  EXPECT_FALSE(s.retryable()) << s.ToString();
  EXPECT_EQ(ExitCodeFor(s), kExitPermanent);
  EXPECT_NE(s.message().find("cudaMalloc of 12000000000 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("holds 70.0 GB in device buffers and asked 12.0 GB more"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("more than the GPU's 80.0 GB in all"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("model.layers"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("batchSizePerReplica"), std::string::npos) << s.message();
}

TEST(DeviceOutOfMemory, WhatAnotherProcessHoldsIsRetryable) {
  // 2 GB held and 1 GB asked on an 80 GB GPU with 0.5 GB free: someone else holds the rest.
  const Status s = ClassifyDeviceOutOfMemory("cudaMalloc of 1000000000 bytes", 1 * kGB, 2 * kGB,
                                             kGB / 2, 80 * kGB);
  EXPECT_TRUE(s.retryable()) << s.ToString();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("the GPU has 500.0 MB free of 80.0 GB"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("other processes"), std::string::npos) << s.message();
}

TEST(DeviceOutOfMemory, ExactlyTheWholeGpuStillFitsAndAnUnknownDeviceNeverCondemns) {
  EXPECT_TRUE(ClassifyDeviceOutOfMemory("x", 10 * kGB, 70 * kGB, 0, 80 * kGB).retryable());
  // A library's allocation of an unknown size, or a device cudaMemGetInfo could not read: the
  // job cannot be judged too large, so the failure stays retryable (bounded by backoffLimit).
  EXPECT_TRUE(ClassifyDeviceOutOfMemory("cublasCreate", 0, 70 * kGB, 0, 80 * kGB).retryable());
  EXPECT_TRUE(ClassifyDeviceOutOfMemory("x", 100 * kGB, 70 * kGB, 0, 0).retryable());
}

TEST(DeviceOutOfMemory, ASumPastTheAddressSpaceOutgrowsTheGpuRatherThanWrapping) {
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  const Status s = ClassifyDeviceOutOfMemory("x", max - 10, 70 * kGB, 0, 80 * kGB);
  EXPECT_FALSE(s.retryable()) << s.ToString();
}

TEST(DeviceBufferTest, AnElementCountPastTheAddressSpaceIsRefusedBeforeCuda) {
  // No device needed: the size is refused before cudaMalloc is called.
  DeviceBuffer<float> b;
  const Status s = b.Allocate(std::numeric_limits<std::size_t>::max() / 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(b.data(), nullptr);
  PinnedBuffer<double> p;
  EXPECT_EQ(p.Allocate(std::numeric_limits<std::size_t>::max() / 4).code(),
            StatusCode::kInvalidArgument);
}

TEST(DeviceBufferTest, BuffersCountTheBytesTheyHold) {
  RT_REQUIRE_GPU();
  const std::size_t before = DeviceBytesHeld();
  {
    DeviceBuffer<float> a;
    RT_ASSERT_OK(a.Allocate(1000));
    EXPECT_EQ(DeviceBytesHeld(), before + 4000);
    DeviceBuffer<float> moved = std::move(a);
    EXPECT_EQ(DeviceBytesHeld(), before + 4000) << "a move holds the same bytes";
    RT_ASSERT_OK(moved.Allocate(10));
    EXPECT_EQ(DeviceBytesHeld(), before + 40) << "a new allocation releases the old one";
  }
  EXPECT_EQ(DeviceBytesHeld(), before);
}

TEST(DeviceBufferTest, MoreThanTheWholeGpuIsAPermanentError) {
  RT_REQUIRE_GPU();
  const std::size_t before = DeviceBytesHeld();
  std::size_t free = 0;
  std::size_t total = 0;
  RT_ASSERT_CUDA(cudaMemGetInfo(&free, &total));
  DeviceBuffer<char> b;
  const Status s = b.Allocate(total + total / 2);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(s.retryable()) << s.ToString();
  EXPECT_NE(s.message().find("more than the GPU's"), std::string::npos) << s.message();
  EXPECT_EQ(DeviceBytesHeld(), before);
  // The failure is not sticky: the device still allocates.
  DeviceBuffer<char> small;
  RT_ASSERT_OK(small.Allocate(1024));
}

}  // namespace
}  // namespace ringtrain::gpu
