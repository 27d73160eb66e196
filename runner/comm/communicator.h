// The collective-communication seam shared by the TCP ring and NCCL backends. A Communicator
// is created once per gang attempt and used from one thread at a time; the order of
// collectives must be identical on every rank. Any error (peer lost, timeout) leaves the
// communicator aborted: every later call fails fast, and peers see the failure too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/clock.h"
#include "common/runner_env.h"
#include "common/status.h"

namespace ringtrain::comm {

inline constexpr Duration kDefaultCollectiveTimeout = contract::kCollectiveTimeout;

enum class ReduceOp { kSum, kAverage };

// The stream-ordered side of a device backend (NCCL), reached through the seam (c10d's async
// work on a stream): collectives enqueued on an accelerator stream without the host waiting,
// completion awaited under the communicator's watchdog. Streams and events are the CUDA
// runtime's handles (cudaStream_t, cudaEvent_t), opaque here so that this header stays free of
// CUDA.
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  // Enqueues an in-place all-reduce of device memory on `stream` without waiting. Capturable in
  // a CUDA graph.
  virtual Status AllReduceAsync(float* device_data, std::size_t count, ReduceOp op,
                                void* stream) = 0;
  // Waits until `event` (recorded after enqueued collectives) completes. On a timeout, a
  // backend error or a failure another rank published, aborts the communicator and returns a
  // retryable error naming `what` and the cause.
  virtual Status Wait(void* event, std::string_view what) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place over `count` float32 elements (count may be 0).
  virtual Status AllReduce(float* data, std::size_t count, ReduceOp op) = 0;
  // Copies `bytes` from `root`'s buffer into every rank's buffer.
  virtual Status Broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual Status Barrier() = 0;
  // Each rank contributes `bytes` at `in`; `out` receives size()*bytes, rank-major.
  virtual Status AllGather(const void* in, std::size_t bytes, void* out) = 0;
  // Makes every pending and future call fail with Aborted; safe from any thread.
  virtual void Abort() = 0;
  // The stream-ordered collectives of a device backend; null for a host backend (TCP), whose
  // callers stage device buffers through host memory.
  virtual DeviceCollectives* device_collectives() { return nullptr; }
};

}  // namespace ringtrain::comm
