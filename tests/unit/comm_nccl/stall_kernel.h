// A kernel-free-of-NCCL stall for watchdog tests: one GPU thread spins until the host flips a
// flag in mapped pinned memory, so work queued behind it (and events recorded after it) stay
// pending for as long as a test needs.
#pragma once

#include <cuda_runtime.h>

namespace ringtrain::testing {

// Launches the spinner on `stream`; `device_flag` is the device view of a cudaHostAllocMapped
// int that the host sets non-zero to release it.
cudaError_t LaunchStall(const int* device_flag, cudaStream_t stream);

}  // namespace ringtrain::testing
