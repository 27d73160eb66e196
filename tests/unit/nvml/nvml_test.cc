#include "runner/metrics/nvml.h"

#include <cstdlib>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/nvml/fake_nvml_test.h"

namespace ringtrain::metrics {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using NvmlTest = FakeNvmlTest;

TEST_F(NvmlTest, ReadsWhatTheDeviceReportsInBaseUnits) {
  auto nvml = Nvml::Load(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto count = (*nvml)->DeviceCount();
  ASSERT_TRUE(count.ok()) << count.status().ToString();
  EXPECT_EQ(*count, 2);

  auto device = (*nvml)->OpenByIndex(0);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  auto sample = (*nvml)->Sample(*device);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_EQ(sample->name, "Fake GPU 0");
  ASSERT_TRUE(sample->utilization_ratio.has_value());
  EXPECT_DOUBLE_EQ(*sample->utilization_ratio, 0.73);
  EXPECT_EQ(sample->memory_used_bytes, 21'500'000'000ull);
  EXPECT_EQ(sample->memory_total_bytes, 80 * kGiB);
  ASSERT_TRUE(sample->power_watts.has_value());
  EXPECT_DOUBLE_EQ(*sample->power_watts, 251.0);
  ASSERT_TRUE(sample->sm_clock_hertz.has_value());
  EXPECT_DOUBLE_EQ(*sample->sm_clock_hertz, 1.98e9);
}

TEST_F(NvmlTest, SeesNewReadingsOnEachSample) {
  auto nvml = Nvml::Load(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto device = (*nvml)->OpenByIndex(1);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  UpdateDevice(1, [](FakeNvmlDevice& d) {
    d.utilization_percent = 100;
    d.power_milliwatts = 700'250;
  });
  auto sample = (*nvml)->Sample(*device);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_DOUBLE_EQ(sample->utilization_ratio.value_or(-1), 1.0);
  EXPECT_DOUBLE_EQ(sample->power_watts.value_or(-1), 700.25);
}

// cudaDeviceGetPCIBusId answers with a 4-digit domain; NVML lists 8 digits. Both must work.
TEST_F(NvmlTest, OpensByPciBusIdInCudaAndNvmlForms) {
  auto nvml = Nvml::Load(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();

  auto second = (*nvml)->OpenByPciBusId("0000:65:00.0");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto sample = (*nvml)->Sample(*second);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_EQ(sample->name, "Fake GPU 1");
  EXPECT_DOUBLE_EQ(sample->utilization_ratio.value_or(-1), 0.12);
  EXPECT_DOUBLE_EQ(sample->power_watts.value_or(-1), 90.5);
  EXPECT_DOUBLE_EQ(sample->sm_clock_hertz.value_or(-1), 1.41e9);
  EXPECT_EQ(sample->memory_total_bytes, 40 * kGiB);

  auto first = (*nvml)->OpenByPciBusId("00000000:17:00.0");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  sample = (*nvml)->Sample(*first);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_EQ(sample->name, "Fake GPU 0");
}

TEST_F(NvmlTest, UnknownPciBusIdIsNotFound) {
  auto nvml = Nvml::Load(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto device = (*nvml)->OpenByPciBusId("0000:b3:00.0");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(device.status().message(), AllOf(HasSubstr("nvmlDeviceGetHandleByPciBusId_v2"),
                                               HasSubstr("0000:b3:00.0"), HasSubstr("Not Found")));
}

TEST_F(NvmlTest, IndexOutOfRangeIsInvalid) {
  auto nvml = Nvml::Load(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto past_end = (*nvml)->OpenByIndex(2);
  ASSERT_FALSE(past_end.ok());
  EXPECT_EQ(past_end.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(past_end.status().message(), HasSubstr("Invalid Argument"));
  EXPECT_EQ((*nvml)->OpenByIndex(-1).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(NvmlTest, UnsupportedReadingsAreLeftOutOfTheSample) {
  UpdateDevice(0, [](FakeNvmlDevice& d) {
    d.utilization_result = kNvmlNotSupported;  // as under MIG
    d.power_result = kNvmlNotSupported;
  });
  auto nvml = Nvml::Load(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto device = (*nvml)->OpenByIndex(0);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  auto sample = (*nvml)->Sample(*device);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_FALSE(sample->utilization_ratio.has_value());
  EXPECT_FALSE(sample->power_watts.has_value());
  EXPECT_EQ(sample->memory_used_bytes, 21'500'000'000ull);
  EXPECT_DOUBLE_EQ(sample->sm_clock_hertz.value_or(-1), 1.98e9);
}

TEST_F(NvmlTest, DeviceErrorFailsTheSampleWithNvmlsText) {
  auto nvml = Nvml::Load(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto device = (*nvml)->OpenByIndex(0);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  UpdateDevice(0, [](FakeNvmlDevice& d) { d.memory_result = kNvmlGpuIsLost; });
  auto sample = (*nvml)->Sample(*device);
  ASSERT_FALSE(sample.ok());
  EXPECT_EQ(sample.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(sample.status().message(),
              AllOf(HasSubstr("nvmlDeviceGetMemoryInfo"), HasSubstr("GPU is lost")));
}

TEST_F(NvmlTest, InitFailureCarriesNvmlErrorString) {
  SetInitResult(kNvmlDriverNotLoaded);
  auto nvml = Nvml::Load(FAKE_NVML_PATH);
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(nvml.status().message(),
              AllOf(HasSubstr("nvmlInit_v2"), HasSubstr("Driver Not Loaded")));
  EXPECT_EQ(LiveInits(), 0);
}

TEST_F(NvmlTest, ShutsNvmlDownWhenDestroyed) {
  {
    auto nvml = Nvml::Load(FAKE_NVML_PATH);
    ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
    EXPECT_EQ(LiveInits(), 1);
  }
  EXPECT_EQ(LiveInits(), 0);
}

TEST_F(NvmlTest, TakesTheLibraryFromTheEnvironmentWhenNoPathIsGiven) {
  ASSERT_EQ(setenv("RINGTRAIN_NVML_LIBRARY", FAKE_NVML_PATH, 1), 0);
  auto nvml = Nvml::Load();
  unsetenv("RINGTRAIN_NVML_LIBRARY");
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  EXPECT_EQ((*nvml)->path(), FAKE_NVML_PATH);
  EXPECT_EQ(LiveInits(), 1);
}

// Hermetic on any machine: with the driver the default loads, without it the error names it.
TEST(NvmlLoadTest, DefaultsToTheDriversLibrary) {
  unsetenv("RINGTRAIN_NVML_LIBRARY");
  auto nvml = Nvml::Load();
  if (nvml.ok()) {
    EXPECT_EQ((*nvml)->path(), "libnvidia-ml.so.1");
  } else {
    EXPECT_EQ(nvml.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(nvml.status().message(), HasSubstr("libnvidia-ml.so.1"));
  }
}

TEST(NvmlLoadTest, MissingLibraryIsFailedPreconditionNamingThePath) {
  const std::string path = "/nonexistent/ringtrain/libnvidia-ml.so.1";
  auto nvml = Nvml::Load(path);
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(nvml.status().message(), AllOf(HasSubstr("NVML unavailable"), HasSubstr(path)));
}

TEST(NvmlLoadTest, MissingSymbolIsNamed) {
  auto nvml = Nvml::Load(FAKE_NVML_NO_POWER_PATH);
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(nvml.status().message(),
              AllOf(HasSubstr("nvmlDeviceGetPowerUsage"), HasSubstr(FAKE_NVML_NO_POWER_PATH)));
}

}  // namespace
}  // namespace ringtrain::metrics
