// Helpers for the GPU unit tests: skipping without a device, status/CUDA assertions, device
// round trips, poisoning outputs, and ‖a − b‖ / ‖b‖ in double.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "runner/cuda/cuda_util.h"

// Every test that touches the device starts with this: on a machine without a CUDA device (or
// driver) it is reported as skipped, never as passed.
#define RT_REQUIRE_GPU()                                                                  \
  do {                                                                                    \
    if (::ringtrain::gpu::VisibleDeviceCount() == 0) {                                    \
      GTEST_SKIP() << "no CUDA device visible (this test needs a GPU; it ran no checks)"; \
    }                                                                                     \
  } while (0)

#define RT_ASSERT_OK(expr)                                                            \
  do {                                                                                \
    const ::ringtrain::Status& rt_test_status_ = (expr);                              \
    ASSERT_TRUE(rt_test_status_.ok()) << #expr << ": " << rt_test_status_.ToString(); \
  } while (0)

#define RT_ASSERT_CUDA(expr) RT_ASSERT_OK(::ringtrain::gpu::CudaStatus((expr), #expr))

namespace ringtrain::gpu::testing {

// A stream for one test; synchronized (and checked) by Sync().
class TestStream {
 public:
  TestStream() { status_ = stream_.Create(); }
  const Status& status() const { return status_; }
  cudaStream_t get() const { return stream_.get(); }
  Status Sync() const { return CudaStatus(cudaStreamSynchronize(stream_.get()), "sync"); }

 private:
  Stream stream_;
  Status status_;
};

// Blocking copies on the legacy stream. A pageable host-to-device cudaMemcpy (and a cudaMemset)
// may return before the data lands, and the code under test runs on non-blocking streams that
// do not wait for the legacy stream: so the device is synchronized before returning.
template <typename T>
Status Upload(const std::vector<T>& host, T* device) {
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload"));
  return CudaStatus(cudaDeviceSynchronize(), "upload: cudaDeviceSynchronize");
}

// The caller synchronizes the stream that wrote `device` first.
template <typename T>
Status Download(const T* device, std::size_t n, std::vector<T>& host) {
  host.resize(n);
  return CudaStatus(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost),
                    "download");
}

// Fills n floats with NaN (all bits set), so an element the code under test fails to write
// shows up as NaN.
inline Status PoisonFloats(float* device, std::size_t n) {
  RETURN_IF_ERROR(CudaStatus(cudaMemset(device, 0xFF, n * sizeof(float)), "poison"));
  return CudaStatus(cudaDeviceSynchronize(), "poison: cudaDeviceSynchronize");
}

inline bool AllFinite(std::span<const float> v) {
  for (float f : v) {
    if (!std::isfinite(f)) return false;
  }
  return true;
}

// ‖out − ref‖₂ / ‖ref‖₂ in double; NaN anywhere gives NaN (which fails every ≤ check). A zero
// reference gives ‖out‖₂ (so it must be zero too).
inline double RelErr(std::span<const float> out, std::span<const float> ref) {
  if (out.size() != ref.size()) return std::nan("");
  double diff = 0;
  double norm = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double d = static_cast<double>(out[i]) - static_cast<double>(ref[i]);
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  if (norm == 0) return std::sqrt(diff);
  return std::sqrt(diff / norm);
}

inline double MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (d != d) return d;
    m = d > m ? d : m;
  }
  return m;
}

inline bool BitwiseEqual(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace ringtrain::gpu::testing
