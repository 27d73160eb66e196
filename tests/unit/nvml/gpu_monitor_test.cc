#include "runner/metrics/gpu_monitor.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "runner/metrics/runner_metrics.h"
#include "tests/unit/nvml/fake_nvml_test.h"

namespace ringtrain::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Labels = std::map<std::string, std::string>;

// A hang guard for waits on the sampling thread, never a measure of speed.
constexpr Duration kHangGuard = std::chrono::seconds(60);
constexpr Duration kForever = std::chrono::hours(24);

const char* const kGpuFamilies[] = {
    "ringtrain_gpu_utilization_ratio", "ringtrain_gpu_busy_ratio",
    "ringtrain_gpu_memory_used_bytes", "ringtrain_gpu_memory_total_bytes",
    "ringtrain_gpu_power_watts",       "ringtrain_gpu_sm_clock_hertz",
};

// Splits `a="1",b="2"` into a map (the tests' label values hold no quotes or commas).
Labels ParseLabels(const std::string& text) {
  Labels labels;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eq = text.find("=\"", pos);
    std::size_t close = text.find('"', eq + 2);
    labels[text.substr(pos, eq - pos)] = text.substr(eq + 2, close - eq - 2);
    pos = close + 2;  // past `",`
  }
  return labels;
}

// Every sample line of family `name` in Prometheus text, as labels → value.
std::map<Labels, double> Series(const std::string& text, const std::string& name) {
  std::map<Labels, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    std::size_t close = line.rfind('}');
    Labels labels = ParseLabels(line.substr(name.size() + 1, close - name.size() - 1));
    out[labels] = std::strtod(line.c_str() + close + 2, nullptr);  // also reads "Nan"
  }
  return out;
}

const Labels kGpu0 = {{"job", "mnist"}, {"namespace", "team-a"}, {"rank", "1"}, {"gpu", "0"}};

// The single value of family `name` for kGpu0; fails the test if that is not the only series.
double Value(const RunnerMetrics& metrics, const std::string& name) {
  auto series = Series(metrics.RenderText(), name);
  EXPECT_EQ(series.size(), 1u) << name;
  auto it = series.find(kGpu0);
  EXPECT_NE(it, series.end()) << name << " has no series labelled gpu=\"0\" for rank 1";
  return it == series.end() ? -1 : it->second;
}

RunnerLabels Rank1() { return {"mnist", "team-a", 1}; }

TEST(RunnerMetricsGpuTest, CpuRankExportsNoGpuSeries) {
  RunnerMetrics metrics(Rank1());
  GpuSample sample;
  sample.utilization_ratio = 0.5;
  metrics.SetGpuSample(sample);  // before SetGpu: ignored
  metrics.SetGpuBusy(0.5);
  const std::string text = metrics.RenderText();
  EXPECT_THAT(text, HasSubstr("ringtrain_steps_total{"));
  EXPECT_THAT(text, Not(HasSubstr("ringtrain_gpu_")));
}

TEST(RunnerMetricsGpuTest, SetGpuAddsOneSeriesPerFamilyWithNoValueYet) {
  RunnerMetrics metrics(Rank1());
  metrics.SetGpu("0");
  const std::string text = metrics.RenderText();
  for (const char* name : kGpuFamilies) {
    EXPECT_THAT(text, HasSubstr(std::string("# TYPE ") + name + " gauge"));
    EXPECT_TRUE(std::isnan(Value(metrics, name))) << name;
  }
}

TEST(RunnerMetricsGpuTest, PublishesSampleAndBusyRatio) {
  RunnerMetrics metrics(Rank1());
  metrics.SetGpu("0");
  GpuSample sample;
  sample.utilization_ratio = 0.73;
  sample.memory_used_bytes = 21'500'000'000ull;
  sample.memory_total_bytes = 85'899'345'920ull;
  sample.power_watts = 251;
  sample.sm_clock_hertz = 1.98e9;
  metrics.SetGpuSample(sample);
  metrics.SetGpuBusy(0.85);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_utilization_ratio"), 0.73);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_memory_used_bytes"), 21.5e9);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_memory_total_bytes"), 85899345920.0);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_power_watts"), 251);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_sm_clock_hertz"), 1.98e9);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_busy_ratio"), 0.85);

  sample.power_watts.reset();  // the board stopped reporting it: no stale value
  metrics.SetGpuSample(sample);
  EXPECT_TRUE(std::isnan(Value(metrics, "ringtrain_gpu_power_watts")));
}

TEST(RunnerMetricsGpuTest, OneGpuPerRank) {
  RunnerMetrics metrics(Rank1());
  metrics.SetGpu("0");
  metrics.SetGpu("0");
  metrics.SetGpu("1");
  metrics.SetGpuBusy(0.5);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_busy_ratio"), 0.5);
}

class GpuMonitorTest : public FakeNvmlTest {
 protected:
  static GpuMonitorOptions Options(Duration interval) {
    GpuMonitorOptions options;
    options.pci_bus_id = "0000:17:00.0";  // the fake's device 0
    options.gpu_label = "0";
    options.interval = interval;
    options.library_path = FAKE_NVML_PATH;
    return options;
  }

  // Waits until every attempt that counts was started after the caller's last change to the
  // fake: the one in flight at the change may have read the old state, the next cannot.
  static void SettleAfterChange(const GpuMonitor& monitor) {
    ASSERT_TRUE(monitor.WaitForAttempts(monitor.samples() + monitor.failures() + 2, kHangGuard));
  }
};

TEST_F(GpuMonitorTest, FirstSampleIsPublishedByCreate) {
  RunnerMetrics metrics(Rank1());
  auto monitor = GpuMonitor::Create(&metrics, Options(kForever));
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  EXPECT_EQ((*monitor)->samples(), 1);
  EXPECT_EQ((*monitor)->last_sample().value_or(GpuSample{}).name, "Fake GPU 0");
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_utilization_ratio"), 0.73);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_memory_used_bytes"), 21.5e9);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_memory_total_bytes"), 80.0 * kGiB);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_power_watts"), 251);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_sm_clock_hertz"), 1.98e9);
  EXPECT_TRUE(std::isnan(Value(metrics, "ringtrain_gpu_busy_ratio")));  // the trainer's to set
}

TEST_F(GpuMonitorTest, ThreadPublishesNewReadings) {
  RunnerMetrics metrics(Rank1());
  auto monitor = GpuMonitor::Create(&metrics, Options(std::chrono::milliseconds(1)));
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  UpdateDevice(0, [](FakeNvmlDevice& d) {
    d.utilization_percent = 40;
    d.power_milliwatts = 300'000;
    d.sm_clock_mhz = 1200;
    d.memory_used = 2 * kGiB;
  });
  ASSERT_NO_FATAL_FAILURE(SettleAfterChange(**monitor));
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_utilization_ratio"), 0.40);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_power_watts"), 300);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_sm_clock_hertz"), 1.2e9);
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_memory_used_bytes"), 2.0 * kGiB);
  EXPECT_GE((*monitor)->samples(), 3);
}

// With a day between samples, returning at all shows the wait is interruptible.
TEST_F(GpuMonitorTest, DestructionStopsTheThreadAndShutsNvmlDown) {
  {
    RunnerMetrics metrics(Rank1());
    auto monitor = GpuMonitor::Create(&metrics, Options(kForever));
    ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
    EXPECT_EQ(LiveInits(), 1);
  }
  EXPECT_EQ(LiveInits(), 0);
}

TEST_F(GpuMonitorTest, KeepsSamplingThroughFailuresAndLogsOnce) {
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  {
    RunnerMetrics metrics(Rank1());
    auto monitor = GpuMonitor::Create(&metrics, Options(std::chrono::milliseconds(1)));
    ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();

    UpdateDevice(0, [](FakeNvmlDevice& d) { d.memory_result = kNvmlGpuIsLost; });
    ASSERT_NO_FATAL_FAILURE(SettleAfterChange(**monitor));
    const std::int64_t failures = (*monitor)->failures();
    ASSERT_TRUE((*monitor)->WaitForAttempts((*monitor)->samples() + failures + 3, kHangGuard));
    EXPECT_GE((*monitor)->failures(), failures + 3);

    UpdateDevice(0, [](FakeNvmlDevice& d) {
      d.memory_result = 0;
      d.utilization_percent = 55;
    });
    const std::int64_t samples = (*monitor)->samples();
    ASSERT_NO_FATAL_FAILURE(SettleAfterChange(**monitor));
    EXPECT_GT((*monitor)->samples(), samples);
    EXPECT_DOUBLE_EQ((*monitor)->last_sample().value_or(GpuSample{}).utilization_ratio.value_or(-1),
                     0.55);
    EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_utilization_ratio"), 0.55);
  }
  spdlog::set_default_logger(previous);
  const std::string text = log.str();
  EXPECT_THAT(text, HasSubstr("GPU is lost"));
  const std::string line = "sampling gpu 0 failed";
  ASSERT_NE(text.find(line), std::string::npos) << text;
  EXPECT_EQ(text.find(line, text.find(line) + 1), std::string::npos) << text;
}

TEST_F(GpuMonitorTest, MeanUtilizationCoversTheWindowSinceReset) {
  auto monitor = GpuMonitor::Create(nullptr, Options(kForever));
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  EXPECT_DOUBLE_EQ((*monitor)->MeanUtilization().value_or(-1), 0.73);  // the first sample
  (*monitor)->Reset();
  EXPECT_FALSE((*monitor)->MeanUtilization().has_value());
}

TEST_F(GpuMonitorTest, MeanUtilizationAveragesTheThreadsSamples) {
  auto monitor = GpuMonitor::Create(nullptr, Options(std::chrono::milliseconds(1)));
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  UpdateDevice(0, [](FakeNvmlDevice& d) { d.utilization_percent = 20; });
  ASSERT_NO_FATAL_FAILURE(SettleAfterChange(**monitor));
  (*monitor)->Reset();
  ASSERT_TRUE((*monitor)->WaitForAttempts((*monitor)->samples() + 3, kHangGuard));
  EXPECT_DOUBLE_EQ((*monitor)->MeanUtilization().value_or(-1), 0.20);
}

TEST_F(GpuMonitorTest, UnreportedUtilizationIsNotAveraged) {
  UpdateDevice(0, [](FakeNvmlDevice& d) { d.utilization_result = kNvmlNotSupported; });
  RunnerMetrics metrics(Rank1());
  auto monitor = GpuMonitor::Create(&metrics, Options(kForever));
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  EXPECT_FALSE((*monitor)->MeanUtilization().has_value());
  EXPECT_TRUE(std::isnan(Value(metrics, "ringtrain_gpu_utilization_ratio")));
  EXPECT_DOUBLE_EQ(Value(metrics, "ringtrain_gpu_power_watts"), 251);
}

TEST_F(GpuMonitorTest, OpensByNvmlIndexWithoutPciBusId) {
  GpuMonitorOptions options = Options(kForever);
  options.pci_bus_id.clear();
  options.nvml_index = 1;
  auto monitor = GpuMonitor::Create(nullptr, options);
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  EXPECT_EQ((*monitor)->last_sample().value_or(GpuSample{}).name, "Fake GPU 1");
}

TEST_F(GpuMonitorTest, FailuresAtCreateAddNoGpuSeries) {
  RunnerMetrics metrics(Rank1());

  GpuMonitorOptions missing = Options(kForever);
  missing.library_path = "/nonexistent/libnvidia-ml.so.1";
  auto no_library = GpuMonitor::Create(&metrics, missing);
  ASSERT_FALSE(no_library.ok());
  EXPECT_EQ(no_library.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_library.status().message(), HasSubstr("NVML unavailable"));

  GpuMonitorOptions elsewhere = Options(kForever);
  elsewhere.pci_bus_id = "0000:b3:00.0";
  auto no_device = GpuMonitor::Create(&metrics, elsewhere);
  ASSERT_FALSE(no_device.ok());
  EXPECT_EQ(no_device.status().code(), StatusCode::kNotFound);

  UpdateDevice(0, [](FakeNvmlDevice& d) { d.memory_result = kNvmlGpuIsLost; });
  auto broken = GpuMonitor::Create(&metrics, Options(kForever));
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().ToString(), HasSubstr("GPU is lost"));

  GpuMonitorOptions unlabelled = Options(kForever);
  unlabelled.gpu_label.clear();
  EXPECT_EQ(GpuMonitor::Create(&metrics, unlabelled).status().code(), StatusCode::kInvalidArgument);
  GpuMonitorOptions no_interval = Options(Duration::zero());
  EXPECT_EQ(GpuMonitor::Create(&metrics, no_interval).status().code(),
            StatusCode::kInvalidArgument);

  EXPECT_THAT(metrics.RenderText(), Not(HasSubstr("ringtrain_gpu_")));
  EXPECT_EQ(LiveInits(), 0);
}

}  // namespace
}  // namespace ringtrain::metrics
