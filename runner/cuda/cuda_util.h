// CUDA runtime helpers shared by the GPU runner: errors as Status (naming the call), RAII for
// device memory, streams and events, and a device probe that never fails on a machine without
// a driver. Host code only: no kernels here, so it compiles with the C++ compiler.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "common/clock.h"
#include "common/status.h"

namespace ringtrain::gpu {

// Ok for cudaSuccess; otherwise a Status naming `what` and CUDA's error string. Out of memory
// is DeviceOutOfMemory's answer (retryable unless this process alone outgrows the device); a
// missing device or driver kFailedPrecondition (permanent); sticky device faults (illegal
// address, ECC, launch failure, Xid) kUnavailable, so the gang restarts (possibly on another
// node); everything else kInternal.
Status CudaStatus(cudaError_t err, std::string_view what);

// Bytes this process holds in DeviceBuffers now.
std::size_t DeviceBytesHeld();

// A device allocation of `requested` bytes failed (0: a library's own, of a size it did not say)
// while this process held `held` bytes in device buffers, on a device with `total` bytes of which
// `free` were free (total 0: unknown). When held + requested exceed the whole device, no restart
// can make the job fit: a permanent error that names what to change (the model's layers, the
// batch). Otherwise other processes (or the CUDA context and libraries) hold the rest, and a
// restart may find it free: kResourceExhausted, retryable.
Status ClassifyDeviceOutOfMemory(std::string_view what, std::size_t requested, std::size_t held,
                                 std::size_t free, std::size_t total);
// ClassifyDeviceOutOfMemory with this process's DeviceBytesHeld() and the current device's
// cudaMemGetInfo (unknown when that fails too).
Status DeviceOutOfMemory(std::string_view what, std::size_t requested);

#define RT_CUDA_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(::ringtrain::gpu::CudaStatus((expr), #expr))
// After a kernel launch: checks the launch error (bad configuration), not the execution.
#define RT_CUDA_CHECK_LAUNCH(what) \
  RETURN_IF_ERROR(::ringtrain::gpu::CudaStatus(cudaGetLastError(), (what)))

// Number of CUDA devices this process can use; 0 when there is no driver or no device.
int VisibleDeviceCount();
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)" or the error text.
std::string DeviceDescription(int device);

namespace internal {
// DeviceBuffer's count of the bytes it holds (DeviceBytesHeld).
void CountDeviceBytes(std::size_t bytes, bool allocated);
// n × element bytes, or InvalidArgument naming `kind` ("a device", "a pinned") buffer when the
// product is more than memory can address.
inline StatusOr<std::size_t> BufferBytes(std::size_t n, std::size_t element, const char* kind) {
  if (n > std::numeric_limits<std::size_t>::max() / element) {
    return InvalidArgument(std::string(kind) + " buffer of " + std::to_string(n) + " elements of " +
                           std::to_string(element) + " bytes is more than memory can address");
  }
  return n * element;
}
}  // namespace internal

// Owns cudaMalloc'd memory for n elements of T.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  Status Allocate(std::size_t n) {
    Reset();
    if (n == 0) return Status::Ok();
    ASSIGN_OR_RETURN(const std::size_t want, internal::BufferBytes(n, sizeof(T), "a device"));
    const std::string what = "cudaMalloc of " + std::to_string(want) + " bytes";
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, want);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it for the calls that follow
      return DeviceOutOfMemory(what, want);
    }
    RETURN_IF_ERROR(CudaStatus(err, what));
    ptr_ = static_cast<T*>(p);
    size_ = n;
    internal::CountDeviceBytes(want, true);
    return Status::Ok();
  }
  void Reset() {
    if (ptr_ != nullptr) {
      cudaFree(ptr_);
      internal::CountDeviceBytes(bytes(), false);
    }
    ptr_ = nullptr;
    size_ = 0;
  }
  T* data() const { return ptr_; }
  std::size_t size() const { return size_; }
  std::size_t bytes() const { return size_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

// Owns cudaMallocHost'd (pinned) memory for n elements of T.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { Reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  Status Allocate(std::size_t n) {
    Reset();
    if (n == 0) return Status::Ok();
    ASSIGN_OR_RETURN(const std::size_t want, internal::BufferBytes(n, sizeof(T), "a pinned"));
    const std::string what = "cudaMallocHost of " + std::to_string(want) + " bytes";
    void* p = nullptr;
    const cudaError_t err = cudaMallocHost(&p, want);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      // Host memory, pinned: the process's memory limit, or the node's, not the GPU's.
      return Status(StatusCode::kResourceExhausted, "out of pinned host memory: " + what);
    }
    RETURN_IF_ERROR(CudaStatus(err, what));
    ptr_ = static_cast<T*>(p);
    size_ = n;
    return Status::Ok();
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }
  T* data() const { return ptr_; }
  std::size_t size() const { return size_; }

 private:
  T* ptr_ = nullptr;
  std::size_t size_ = 0;
};

// A non-blocking stream (does not synchronize with the legacy default stream).
class Stream {
 public:
  Stream() = default;
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Status Create(int priority = 0) {
    return CudaStatus(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority),
                      "cudaStreamCreateWithPriority");
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() = default;
  ~Event() {
    if (e_ != nullptr) cudaEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  // timing=false makes record/wait cheaper (no timestamp).
  Status Create(bool timing = false) {
    return CudaStatus(
        cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming),
        "cudaEventCreate");
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Polls `event` until it completes, `timeout` passes (kDeadlineExceeded naming `what`), or
// `poll` returns an error (the NCCL watchdog hooks in here). Never blocks in the driver, so a
// hung collective cannot hang the caller.
Status WaitEvent(cudaEvent_t event, Duration timeout, std::string_view what,
                 const std::function<Status()>& poll = nullptr);

}  // namespace ringtrain::gpu
