#include "runner/cuda/cuda_util.h"

#include <cstdio>
#include <thread>

namespace ringtrain::gpu {

Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return Status::Ok();
  std::string m =
      std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorMemoryAllocation:
      return Status(StatusCode::kResourceExhausted, "GPU out of memory: " + m);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return FailedPrecondition(m);
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorDevicesUnavailable:
    case cudaErrorUnknown:
      // Sticky: the context is unusable; a new pod (maybe on a healthy GPU) may succeed.
      return Unavailable("GPU fault: " + m);
    default:
      return Internal(m);
  }
}

int VisibleDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the non-sticky error
    return 0;
  }
  return n;
}

std::string DeviceDescription(int device) {
  cudaDeviceProp p{};
  cudaError_t err = cudaGetDeviceProperties(&p, device);
  if (err != cudaSuccess)
    return std::string("device ") + std::to_string(device) + ": " + cudaGetErrorString(err);
  char mem[32];
  std::snprintf(mem, sizeof(mem), "%.1f",
                static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  int driver = 0;
  int runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, " + mem + " GiB; CUDA driver " +
         std::to_string(driver) + ", runtime " + std::to_string(runtime) + ")";
}

Status WaitEvent(cudaEvent_t event, Duration timeout, std::string_view what,
                 const std::function<Status()>& poll) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int spins = 0;
  for (;;) {
    cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess) return Status::Ok();
    if (err != cudaErrorNotReady) return CudaStatus(err, what);
    if (poll) RETURN_IF_ERROR(poll());
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceeded(std::string(what) + ": GPU work did not finish within " +
                              FormatDuration(timeout));
    }
    // Spin briefly (steps are tens of microseconds), then back off to spare the core.
    if (++spins < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace ringtrain::gpu
