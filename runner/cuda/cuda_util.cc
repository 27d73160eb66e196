#include "runner/cuda/cuda_util.h"

#include <atomic>
#include <cstdio>
#include <limits>
#include <thread>

#include "common/byte_format.h"

namespace ringtrain::gpu {

Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return Status::Ok();
  std::string m =
      std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorMemoryAllocation:
      return DeviceOutOfMemory(m, 0);
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

namespace {

std::atomic<std::size_t> device_bytes_held{0};

}  // namespace

namespace internal {
void CountDeviceBytes(std::size_t bytes, bool allocated) {
  if (allocated) {
    device_bytes_held.fetch_add(bytes, std::memory_order_relaxed);
  } else {
    device_bytes_held.fetch_sub(bytes, std::memory_order_relaxed);
  }
}
}  // namespace internal

std::size_t DeviceBytesHeld() { return device_bytes_held.load(std::memory_order_relaxed); }

Status ClassifyDeviceOutOfMemory(std::string_view what, std::size_t requested, std::size_t held,
                                 std::size_t free, std::size_t total) {
  const std::string asked =
      requested > 0 ? " and asked " + FormatMegabytes(requested) + " more" : "";
  const std::string m = "GPU out of memory: " + std::string(what) + ": this process holds " +
                        FormatMegabytes(held) + " in device buffers" + asked;
  // Saturating: held + requested past the address space outgrows any device too.
  const bool outgrows = total > 0 && (requested > std::numeric_limits<std::size_t>::max() - held ||
                                      held + requested > total);
  if (outgrows) {
    return InvalidArgument(m + ", more than the GPU's " + FormatMegabytes(total) +
                           " in all: the model (model.layers), its optimizer state and a batch "
                           "of batchSizePerReplica do not fit this GPU, and no restart can make "
                           "them fit");
  }
  const std::string device =
      total > 0 ? "; the GPU has " + FormatMegabytes(free) + " free of " + FormatMegabytes(total)
                : "";
  return Status(StatusCode::kResourceExhausted,
                m + device +
                    ": other processes, or the CUDA context and libraries, hold the rest (a "
                    "restart may find it free)");
}

Status DeviceOutOfMemory(std::string_view what, std::size_t requested) {
  std::size_t free = 0;
  std::size_t total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    free = total = 0;
  }
  return ClassifyDeviceOutOfMemory(what, requested, DeviceBytesHeld(), free, total);
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
