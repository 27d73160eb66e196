// Samples one GPU through NVML on a background thread and publishes it in RunnerMetrics' GPU
// gauges. Owns the NVML binding and the thread; must not touch CUDA or the trainer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/status.h"
#include "runner/metrics/nvml.h"

namespace ringtrain::metrics {

class RunnerMetrics;

struct GpuMonitorOptions {
  static constexpr Duration kDefaultInterval = std::chrono::seconds(1);

  // Which device: `pci_bus_id` when set (cudaDeviceGetPCIBusId's answer: CUDA and NVML number
  // devices differently under CUDA_VISIBLE_DEVICES), else NVML's index `nvml_index`.
  std::string pci_bus_id;
  int nvml_index = 0;
  std::string gpu_label;  // the series' `gpu` label: the device index in the pod, e.g. "0"
  Duration interval = kDefaultInterval;
  std::string library_path;  // "" = Nvml::Load's default
};

class GpuMonitor {
 public:
  // Loads NVML, opens the device and takes a first sample, so an unusable GPU fails here and
  // not silently later; then calls metrics->SetGpu, publishes, and starts sampling every
  // `interval`. `metrics` may be null (sampling only, for benchmarks); else it must outlive
  // the monitor.
  static StatusOr<std::unique_ptr<GpuMonitor>> Create(RunnerMetrics* metrics,
                                                      GpuMonitorOptions options);
  static StatusOr<std::unique_ptr<GpuMonitor>> Create(std::unique_ptr<Nvml> nvml,
                                                      RunnerMetrics* metrics,
                                                      GpuMonitorOptions options);

  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;
  ~GpuMonitor();  // wakes the thread and joins it: returns within one NVML call

  std::optional<GpuSample> last_sample() const;  // the newest successful sample
  std::int64_t samples() const;                  // successful samples, the first one included
  std::int64_t failures() const;                 // failed samples (only the first is logged)

  // Starts a new averaging window for MeanUtilization.
  void Reset();
  // Mean utilization ratio (0-1) of the samples since Reset() or creation; empty when none of
  // them reported utilization.
  std::optional<double> MeanUtilization() const;

  // Blocks until samples() + failures() >= count or `timeout` passes; whether it got there.
  bool WaitForAttempts(std::int64_t count, Duration timeout) const;

 private:
  GpuMonitor(std::unique_ptr<Nvml> nvml, GpuHandle device, RunnerMetrics* metrics,
             GpuMonitorOptions options);
  void Record(const StatusOr<GpuSample>& sample);
  void Loop();

  std::unique_ptr<Nvml> nvml_;
  GpuHandle device_;
  RunnerMetrics* metrics_;
  GpuMonitorOptions options_;

  mutable std::mutex mu_;
  std::condition_variable wake_;             // stop_ changed
  mutable std::condition_variable sampled_;  // samples_ or failures_ changed
  bool stop_ = false;
  std::optional<GpuSample> last_;
  std::int64_t samples_ = 0;
  std::int64_t failures_ = 0;
  double window_utilization_sum_ = 0;
  std::int64_t window_utilization_count_ = 0;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace ringtrain::metrics
