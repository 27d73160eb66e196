// A gtest fixture that drives the fake libnvidia-ml (fake_nvml.cc) through its controls. It
// holds the library open, so the fake's state outlives each Nvml that loads and unloads it.
#pragma once

#include <dlfcn.h>

#include <functional>

#include <gtest/gtest.h>

#include "tests/unit/nvml/fake_nvml.h"

namespace ringtrain::metrics {

class FakeNvmlTest : public ::testing::Test {
 protected:
  static constexpr unsigned long long kGiB = 1ull << 30;

  void SetUp() override {
    library_ = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library_, nullptr) << dlerror();
    ASSERT_NO_FATAL_FAILURE(Resolve("fake_nvml_reset", &reset_));
    ASSERT_NO_FATAL_FAILURE(Resolve("fake_nvml_set_device", &set_device_));
    ASSERT_NO_FATAL_FAILURE(Resolve("fake_nvml_get_device", &get_device_));
    ASSERT_NO_FATAL_FAILURE(Resolve("fake_nvml_set_init_result", &set_init_result_));
    ASSERT_NO_FATAL_FAILURE(Resolve("fake_nvml_live_inits", &live_inits_));
    reset_();
    // Two boards that differ in every reading, so a test can tell which one it read.
    UpdateDevice(0, [](FakeNvmlDevice& d) {
      d.utilization_percent = 73;
      d.memory_used = 21'500'000'000ull;
      d.memory_total = 80 * kGiB;
      d.power_milliwatts = 251'000;
      d.sm_clock_mhz = 1980;
    });
    UpdateDevice(1, [](FakeNvmlDevice& d) {
      d.utilization_percent = 12;
      d.memory_used = 1 * kGiB;
      d.memory_total = 40 * kGiB;
      d.power_milliwatts = 90'500;
      d.sm_clock_mhz = 1410;
    });
  }

  void TearDown() override {
    if (library_ != nullptr) dlclose(library_);
  }

  void UpdateDevice(unsigned int index, const std::function<void(FakeNvmlDevice&)>& change) {
    FakeNvmlDevice d{};
    get_device_(index, &d);
    change(d);
    set_device_(index, &d);
  }
  void SetInitResult(int result) { set_init_result_(result); }
  int LiveInits() { return live_inits_(); }

 private:
  template <typename Fn>
  void Resolve(const char* name, Fn* out) {
    *out = reinterpret_cast<Fn>(dlsym(library_, name));
    ASSERT_NE(*out, nullptr) << name;
  }

  void* library_ = nullptr;
  decltype(&fake_nvml_reset) reset_ = nullptr;
  decltype(&fake_nvml_set_device) set_device_ = nullptr;
  decltype(&fake_nvml_get_device) get_device_ = nullptr;
  decltype(&fake_nvml_set_init_result) set_init_result_ = nullptr;
  decltype(&fake_nvml_live_inits) live_inits_ = nullptr;
};

}  // namespace ringtrain::metrics
