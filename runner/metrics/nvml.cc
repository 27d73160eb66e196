#include "runner/metrics/nvml.h"

#include <dlfcn.h>

#include <string_view>

#include "common/env.h"

namespace ringtrain::metrics {
namespace {

// The slice of NVML's C ABI we call (nvml.h is not needed to build: the driver ships the library).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr int NVML_CLOCK_SM = 1;  // nvmlClockType_t
constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

const char* const kLibraryEnv = "RINGTRAIN_NVML_LIBRARY";

template <typename Fn>
Status Resolve(void* library, const std::string& path, const char* name, Fn* out) {
  dlerror();
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    const char* err = dlerror();
    return FailedPrecondition("NVML unavailable: " + path + " has no symbol " + name +
                              (err != nullptr ? std::string(" (") + err + ")" : ""));
  }
  *out = reinterpret_cast<Fn>(symbol);
  return Status::Ok();
}

struct LibraryCloser {
  void operator()(void* library) const { dlclose(library); }
};

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  const char* (*error_string)(nvmlReturn_t);
  nvmlReturn_t (*device_count)(unsigned int*);
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*handle_by_pci_bus_id)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*);
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*);
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int);

  std::string Describe(nvmlReturn_t rc) const {
    const char* text = error_string(rc);
    return std::string(text != nullptr ? text : "unknown error") + " (NVML error " +
           std::to_string(rc) + ")";
  }

  // "nvmlDeviceGetPowerUsage: GPU is lost (NVML error 15)", coded by what a caller can do.
  Status Error(std::string_view call, nvmlReturn_t rc) const {
    std::string message = std::string(call) + ": " + Describe(rc);
    switch (rc) {
      case NVML_ERROR_INVALID_ARGUMENT:
        return InvalidArgument(std::move(message));
      case NVML_ERROR_NOT_SUPPORTED:
        return FailedPrecondition(std::move(message));
      case NVML_ERROR_NO_PERMISSION:
        return PermissionDenied(std::move(message));
      case NVML_ERROR_NOT_FOUND:
        return NotFound(std::move(message));
      default:
        return Unavailable(std::move(message));
    }
  }
};

StatusOr<std::unique_ptr<Nvml>> Nvml::Load(const std::string& path) {
  std::string library_path = path;
  if (library_path.empty()) library_path = GetEnv(kLibraryEnv).value_or(kDefaultLibrary);

  std::unique_ptr<void, LibraryCloser> library(dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (library == nullptr) {
    const char* err = dlerror();
    std::string reason = err != nullptr ? err : "dlopen failed";
    // glibc names the file in its message; say it ourselves when another libc does not.
    if (reason.find(library_path) == std::string::npos) reason = library_path + ": " + reason;
    return FailedPrecondition("NVML unavailable: " + reason);
  }

  auto api = std::make_unique<Api>();
  void* lib = library.get();
  RETURN_IF_ERROR(Resolve(lib, library_path, "nvmlInit_v2", &api->init));
  RETURN_IF_ERROR(Resolve(lib, library_path, "nvmlShutdown", &api->shutdown));
  RETURN_IF_ERROR(Resolve(lib, library_path, "nvmlErrorString", &api->error_string));
  RETURN_IF_ERROR(Resolve(lib, library_path, "nvmlDeviceGetCount_v2", &api->device_count));
  RETURN_IF_ERROR(
      Resolve(lib, library_path, "nvmlDeviceGetHandleByIndex_v2", &api->handle_by_index));
  RETURN_IF_ERROR(
      Resolve(lib, library_path, "nvmlDeviceGetHandleByPciBusId_v2", &api->handle_by_pci_bus_id));
  RETURN_IF_ERROR(Resolve(lib, library_path, "nvmlDeviceGetUtilizationRates", &api->utilization));
  RETURN_IF_ERROR(Resolve(lib, library_path, "nvmlDeviceGetMemoryInfo", &api->memory));
  RETURN_IF_ERROR(Resolve(lib, library_path, "nvmlDeviceGetPowerUsage", &api->power));
  RETURN_IF_ERROR(Resolve(lib, library_path, "nvmlDeviceGetClockInfo", &api->clock));
  RETURN_IF_ERROR(Resolve(lib, library_path, "nvmlDeviceGetName", &api->name));

  if (nvmlReturn_t rc = api->init(); rc != NVML_SUCCESS) {
    return FailedPrecondition("NVML unavailable: nvmlInit_v2: " + api->Describe(rc));
  }
  return std::unique_ptr<Nvml>(new Nvml(library.release(), library_path, std::move(api)));
}

Nvml::Nvml(void* library, std::string path, std::unique_ptr<Api> api)
    : library_(library), path_(std::move(path)), api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  dlclose(library_);
}

StatusOr<int> Nvml::DeviceCount() const {
  unsigned int count = 0;
  if (nvmlReturn_t rc = api_->device_count(&count); rc != NVML_SUCCESS) {
    return api_->Error("nvmlDeviceGetCount_v2", rc);
  }
  return static_cast<int>(count);
}

StatusOr<GpuHandle> Nvml::OpenByIndex(int index) const {
  if (index < 0) return InvalidArgument("NVML device index " + std::to_string(index));
  nvmlDevice_t device = nullptr;
  if (nvmlReturn_t rc = api_->handle_by_index(static_cast<unsigned int>(index), &device);
      rc != NVML_SUCCESS) {
    return api_->Error("nvmlDeviceGetHandleByIndex_v2(" + std::to_string(index) + ")", rc);
  }
  return GpuHandle{device};
}

StatusOr<GpuHandle> Nvml::OpenByPciBusId(const std::string& pci_bus_id) const {
  nvmlDevice_t device = nullptr;
  if (nvmlReturn_t rc = api_->handle_by_pci_bus_id(pci_bus_id.c_str(), &device);
      rc != NVML_SUCCESS) {
    return api_->Error("nvmlDeviceGetHandleByPciBusId_v2(" + pci_bus_id + ")", rc);
  }
  return GpuHandle{device};
}

StatusOr<GpuSample> Nvml::Sample(GpuHandle handle) const {
  auto device = static_cast<nvmlDevice_t>(handle.raw);
  GpuSample sample;

  nvmlMemory_t memory{};
  if (nvmlReturn_t rc = api_->memory(device, &memory); rc != NVML_SUCCESS) {
    return api_->Error("nvmlDeviceGetMemoryInfo", rc);
  }
  sample.memory_used_bytes = memory.used;
  sample.memory_total_bytes = memory.total;

  // The rest may be unsupported on a given board or MIG slice: leave that field out.
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (nvmlReturn_t rc = api_->name(device, name, sizeof(name)); rc == NVML_SUCCESS) {
    sample.name = name;
  } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
    return api_->Error("nvmlDeviceGetName", rc);
  }

  nvmlUtilization_t utilization{};
  if (nvmlReturn_t rc = api_->utilization(device, &utilization); rc == NVML_SUCCESS) {
    sample.utilization_ratio = utilization.gpu / 100.0;
  } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
    return api_->Error("nvmlDeviceGetUtilizationRates", rc);
  }

  unsigned int milliwatts = 0;
  if (nvmlReturn_t rc = api_->power(device, &milliwatts); rc == NVML_SUCCESS) {
    sample.power_watts = milliwatts / 1000.0;
  } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
    return api_->Error("nvmlDeviceGetPowerUsage", rc);
  }

  unsigned int megahertz = 0;
  if (nvmlReturn_t rc = api_->clock(device, NVML_CLOCK_SM, &megahertz); rc == NVML_SUCCESS) {
    sample.sm_clock_hertz = megahertz * 1e6;
  } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
    return api_->Error("nvmlDeviceGetClockInfo(SM)", rc);
  }
  return sample;
}

}  // namespace ringtrain::metrics
