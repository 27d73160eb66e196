// NVML bound at run time: dlopen("libnvidia-ml.so.1") as NCCL does, so the runner needs no NVML
// at build time and still starts where the driver is absent. Reads device state; never uses CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"

namespace ringtrain::metrics {

// One reading of one GPU. The optional fields are empty where the device does not report them
// (NVML_ERROR_NOT_SUPPORTED: utilization under MIG, power on some boards).
struct GpuSample {
  std::string name;
  std::optional<double> utilization_ratio;  // share of the last NVML period a kernel ran, 0-1
  std::uint64_t memory_used_bytes = 0;
  std::uint64_t memory_total_bytes = 0;
  std::optional<double> power_watts;
  std::optional<double> sm_clock_hertz;
};

// An NVML device handle (nvmlDevice_t); valid while the Nvml that opened it lives.
struct GpuHandle {
  void* raw = nullptr;
};

class Nvml {
 public:
  // Default library: $RINGTRAIN_NVML_LIBRARY if set, else "libnvidia-ml.so.1".
  static constexpr const char* kDefaultLibrary = "libnvidia-ml.so.1";

  // dlopens `path` (empty = the default above), resolves every entry point and calls
  // nvmlInit_v2. A missing library or symbol is FailedPrecondition ("NVML unavailable: ...");
  // an nvmlInit_v2 failure carries nvmlErrorString's text.
  static StatusOr<std::unique_ptr<Nvml>> Load(const std::string& path = "");

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  ~Nvml();  // nvmlShutdown, then dlclose

  const std::string& path() const { return path_; }

  StatusOr<int> DeviceCount() const;
  // NVML's own index order (PCI order), which is not CUDA's under CUDA_VISIBLE_DEVICES.
  StatusOr<GpuHandle> OpenByIndex(int index) const;
  // The id cudaDeviceGetPCIBusId gives ("0000:17:00.0"); NVML's 8-digit domain form works too.
  StatusOr<GpuHandle> OpenByPciBusId(const std::string& pci_bus_id) const;

  StatusOr<GpuSample> Sample(GpuHandle device) const;

 private:
  struct Api;
  Nvml(void* library, std::string path, std::unique_ptr<Api> api);

  void* library_;
  std::string path_;
  std::unique_ptr<Api> api_;
};

}  // namespace ringtrain::metrics
