#include "tests/unit/comm_nccl/stall_kernel.h"

namespace ringtrain::testing {
namespace {

__global__ void SpinUntilReleased(const volatile int* flag) {
  while (*flag == 0) {
    __nanosleep(10000);
  }
}

}  // namespace

cudaError_t LaunchStall(const int* device_flag, cudaStream_t stream) {
  SpinUntilReleased<<<1, 1, 0, stream>>>(device_flag);
  return cudaGetLastError();
}

}  // namespace ringtrain::testing
