// The control surface of the fake libnvidia-ml (fake_nvml.cc). Tests dlopen the same file that
// Nvml::Load opens and reach these through dlsym, so both see one state.
#pragma once

// NVML return codes the tests make the fake return.
constexpr int kNvmlNotSupported = 3;
constexpr int kNvmlDriverNotLoaded = 9;
constexpr int kNvmlGpuIsLost = 15;

extern "C" {

struct FakeNvmlDevice {
  char pci_bus_id[32];  // NVML's form, "00000000:17:00.0"
  char name[96];
  unsigned int utilization_percent;
  unsigned long long memory_used;
  unsigned long long memory_total;
  unsigned int power_milliwatts;
  unsigned int sm_clock_mhz;
  int memory_result;  // what nvmlDeviceGetMemoryInfo returns (15: GPU is lost)
  int utilization_result;
  int power_result;  // 3: not supported
};

// Two devices (00000000:17:00.0 and 00000000:65:00.0), every call succeeding, not initialized.
void fake_nvml_reset(void);
void fake_nvml_set_device(unsigned int index, const FakeNvmlDevice* device);
void fake_nvml_get_device(unsigned int index, FakeNvmlDevice* device);
void fake_nvml_set_init_result(int result);
int fake_nvml_live_inits(void);  // nvmlInit_v2 calls not yet matched by nvmlShutdown
}
