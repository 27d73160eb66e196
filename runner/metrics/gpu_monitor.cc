#include "runner/metrics/gpu_monitor.h"

#include <spdlog/spdlog.h>

#include "runner/metrics/runner_metrics.h"

namespace ringtrain::metrics {

StatusOr<std::unique_ptr<GpuMonitor>> GpuMonitor::Create(RunnerMetrics* metrics,
                                                         GpuMonitorOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Nvml> nvml, Nvml::Load(options.library_path));
  return Create(std::move(nvml), metrics, std::move(options));
}

StatusOr<std::unique_ptr<GpuMonitor>> GpuMonitor::Create(std::unique_ptr<Nvml> nvml,
                                                         RunnerMetrics* metrics,
                                                         GpuMonitorOptions options) {
  if (options.interval <= Duration::zero()) {
    return InvalidArgument("GPU sampling interval must be positive, got " +
                           FormatDuration(options.interval));
  }
  if (metrics != nullptr && options.gpu_label.empty()) {
    return InvalidArgument("GPU monitor: gpu_label is required to export metrics");
  }
  StatusOr<GpuHandle> device = options.pci_bus_id.empty()
                                   ? nvml->OpenByIndex(options.nvml_index)
                                   : nvml->OpenByPciBusId(options.pci_bus_id);
  if (!device.ok()) return device.status().WithContext("GPU monitor");
  StatusOr<GpuSample> first = nvml->Sample(*device);
  if (!first.ok()) return first.status().WithContext("GPU monitor: first sample");

  if (metrics != nullptr) metrics->SetGpu(options.gpu_label);
  std::unique_ptr<GpuMonitor> monitor(
      new GpuMonitor(std::move(nvml), *device, metrics, std::move(options)));
  monitor->Record(first);
  monitor->thread_ = std::thread([m = monitor.get()] { m->Loop(); });
  return monitor;
}

GpuMonitor::GpuMonitor(std::unique_ptr<Nvml> nvml, GpuHandle device, RunnerMetrics* metrics,
                       GpuMonitorOptions options)
    : nvml_(std::move(nvml)), device_(device), metrics_(metrics), options_(std::move(options)) {}

GpuMonitor::~GpuMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuMonitor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, options_.interval, [this] { return stop_; })) {
    lock.unlock();
    StatusOr<GpuSample> sample = nvml_->Sample(device_);
    Record(sample);
    lock.lock();
  }
}

void GpuMonitor::Record(const StatusOr<GpuSample>& sample) {
  if (!sample.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A lost GPU would fail every interval: say it once, keep sampling in case it recovers.
      if (failures_++ == 0) {
        spdlog::warn("GPU metrics: sampling gpu {} failed: {} (further failures are not logged)",
                     options_.gpu_label, sample.status().ToString());
      }
    }
    sampled_.notify_all();
    return;
  }
  if (metrics_ != nullptr) metrics_->SetGpuSample(*sample);
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_ = *sample;
    ++samples_;
    if (sample->utilization_ratio) {
      window_utilization_sum_ += *sample->utilization_ratio;
      ++window_utilization_count_;
    }
  }
  sampled_.notify_all();
}

std::optional<GpuSample> GpuMonitor::last_sample() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

std::int64_t GpuMonitor::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

std::int64_t GpuMonitor::failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

void GpuMonitor::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  window_utilization_sum_ = 0;
  window_utilization_count_ = 0;
}

std::optional<double> GpuMonitor::MeanUtilization() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (window_utilization_count_ == 0) return std::nullopt;
  return window_utilization_sum_ / static_cast<double>(window_utilization_count_);
}

bool GpuMonitor::WaitForAttempts(std::int64_t count, Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return sampled_.wait_for(lock, timeout, [&] { return samples_ + failures_ >= count; });
}

}  // namespace ringtrain::metrics
