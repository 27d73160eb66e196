// A stand-in libnvidia-ml.so.1: the NVML entry points Nvml::Load resolves, with values the test
// sets through fake_nvml.h. Built with FAKE_NVML_OMIT_POWER_USAGE it lacks
// nvmlDeviceGetPowerUsage, as a driver too old for the loader would.
#include "tests/unit/nvml/fake_nvml.h"

#include <cstdio>
#include <cstring>
#include <mutex>

namespace {

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kNotFound = 6;
constexpr unsigned int kDeviceCount = 2;

}  // namespace

// NVML's opaque device type, given a body here.
struct nvmlDevice_st {
  FakeNvmlDevice state;
};

namespace {

struct Fake {
  std::mutex mu;
  nvmlDevice_st devices[kDeviceCount];
  int init_result = kSuccess;
  int live_inits = 0;
};

Fake& State() {
  static Fake fake;
  return fake;
}

void ResetLocked(Fake& f) {
  f.init_result = kSuccess;
  f.live_inits = 0;
  const char* bus_ids[kDeviceCount] = {"00000000:17:00.0", "00000000:65:00.0"};
  for (unsigned int i = 0; i < kDeviceCount; ++i) {
    FakeNvmlDevice d{};
    std::snprintf(d.pci_bus_id, sizeof(d.pci_bus_id), "%s", bus_ids[i]);
    std::snprintf(d.name, sizeof(d.name), "Fake GPU %u", i);
    f.devices[i].state = d;
  }
}

// NVML accepts "domain:bus:device.function" with any width of hex fields.
bool ParseBusId(const char* text, unsigned int out[4]) {
  char tail = 0;
  return std::sscanf(text, "%x:%x:%x.%x%c", &out[0], &out[1], &out[2], &out[3], &tail) == 4;
}

// Runs `read` on the device's state under the lock, after NVML's own argument checks.
template <typename Read>
int WithDevice(nvmlDevice_st* device, const void* out, Read read) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  if (f.live_inits == 0) return kUninitialized;
  if (device == nullptr || out == nullptr) return kInvalidArgument;
  return read(device->state);
}

}  // namespace

extern "C" {

void fake_nvml_reset(void) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  ResetLocked(f);
}

void fake_nvml_set_device(unsigned int index, const FakeNvmlDevice* device) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  if (index < kDeviceCount) f.devices[index].state = *device;
}

void fake_nvml_get_device(unsigned int index, FakeNvmlDevice* device) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  if (index < kDeviceCount) *device = f.devices[index].state;
}

void fake_nvml_set_init_result(int result) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  f.init_result = result;
}

int fake_nvml_live_inits(void) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  return f.live_inits;
}

int nvmlInit_v2(void) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  if (f.init_result == kSuccess) ++f.live_inits;
  return f.init_result;
}

int nvmlShutdown(void) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  if (f.live_inits == 0) return kUninitialized;
  --f.live_inits;
  return kSuccess;
}

// NVML's own texts, so a test can tell they reached the message.
const char* nvmlErrorString(int result) {
  switch (result) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 6:
      return "Not Found";
    case 9:
      return "Driver Not Loaded";
    case 15:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  if (f.live_inits == 0) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  *count = kDeviceCount;
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_st** device) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  if (f.live_inits == 0) return kUninitialized;
  if (index >= kDeviceCount || device == nullptr) return kInvalidArgument;
  *device = &f.devices[index];
  return kSuccess;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* pci_bus_id, nvmlDevice_st** device) {
  Fake& f = State();
  std::lock_guard<std::mutex> lock(f.mu);
  if (f.live_inits == 0) return kUninitialized;
  unsigned int want[4];
  if (pci_bus_id == nullptr || device == nullptr || !ParseBusId(pci_bus_id, want)) {
    return kInvalidArgument;
  }
  for (nvmlDevice_st& d : f.devices) {
    unsigned int have[4];
    if (ParseBusId(d.state.pci_bus_id, have) && std::memcmp(have, want, sizeof(want)) == 0) {
      *device = &d;
      return kSuccess;
    }
  }
  return kNotFound;
}

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

int nvmlDeviceGetUtilizationRates(nvmlDevice_st* device, nvmlUtilization_t* utilization) {
  return WithDevice(device, utilization, [&](const FakeNvmlDevice& d) {
    if (d.utilization_result != kSuccess) return d.utilization_result;
    *utilization = {d.utilization_percent, 0};
    return kSuccess;
  });
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_st* device, nvmlMemory_t* memory) {
  return WithDevice(device, memory, [&](const FakeNvmlDevice& d) {
    if (d.memory_result != kSuccess) return d.memory_result;
    *memory = {d.memory_total, d.memory_total - d.memory_used, d.memory_used};
    return kSuccess;
  });
}

#ifndef FAKE_NVML_OMIT_POWER_USAGE
int nvmlDeviceGetPowerUsage(nvmlDevice_st* device, unsigned int* milliwatts) {
  return WithDevice(device, milliwatts, [&](const FakeNvmlDevice& d) {
    if (d.power_result != kSuccess) return d.power_result;
    *milliwatts = d.power_milliwatts;
    return kSuccess;
  });
}
#endif

int nvmlDeviceGetClockInfo(nvmlDevice_st* device, int type, unsigned int* megahertz) {
  return WithDevice(device, megahertz, [&](const FakeNvmlDevice& d) {
    constexpr int kClockSm = 1;
    if (type != kClockSm) return kInvalidArgument;
    *megahertz = d.sm_clock_mhz;
    return kSuccess;
  });
}

int nvmlDeviceGetName(nvmlDevice_st* device, char* name, unsigned int length) {
  return WithDevice(device, name, [&](const FakeNvmlDevice& d) {
    constexpr int kInsufficientSize = 7;
    if (std::strlen(d.name) + 1 > length) return kInsufficientSize;
    std::memcpy(name, d.name, std::strlen(d.name) + 1);
    return kSuccess;
  });
}

}  // extern "C"
