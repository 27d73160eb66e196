// The NCCL backend of the Communicator seam: one process per GPU. Rank 0 creates the
// ncclUniqueId and shares it through the (token-authenticated) rendezvous store; every rank
// joins with ncclCommInitRankConfig in non-blocking mode, polled under a timeout. Collectives
// are enqueued on CUDA streams; a watchdog (ncclCommGetAsyncError + event polling + the store's
// abort key) calls ncclCommAbort when a collective outlives the collective timeout, NCCL
// reports an error, or another rank records a failure, so no rank ever blocks in the driver.
// Failures are retryable (kUnavailable / kDeadlineExceeded / kAborted) and the first detector's
// reason is recorded in the store under "abort", as the TCP backend does.
//
// NCCL refuses two ranks on one GPU: each rank must own a distinct device.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "runner/comm/communicator.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::comm {

struct NcclCommOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // CUDA device of this rank (LOCAL_RANK)
  // Covers waiting for rank 0's unique id and NCCL's own bootstrap/connection setup.
  Duration init_timeout{std::chrono::seconds(300)};
  // How long one wait on enqueued collectives may take before the communicator aborts.
  Duration collective_timeout = kDefaultCollectiveTimeout;
  // How often the watchdog polls the store's abort key while waiting (0 = never).
  Duration abort_poll_interval{std::chrono::seconds(1)};
};

class NcclCommunicator final : public Communicator {
 public:
  // `store` must outlive the communicator (it is polled for other ranks' failures).
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(rendezvous::Store& store,
                                                            const NcclCommOptions& options);
  ~NcclCommunicator() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  // The synchronous Communicator calls accept host or device pointers (host memory is staged
  // through a device buffer); each waits for completion under the watchdog.
  Status AllReduce(float* data, std::size_t count, ReduceOp op) override;
  Status Broadcast(void* data, std::size_t bytes, int root) override;
  Status Barrier() override;
  Status AllGather(const void* in, std::size_t bytes, void* out) override;
  void Abort() override;

  // Enqueues an in-place all-reduce of device memory on `stream` without waiting. Capturable
  // in a CUDA graph. kAverage uses ncclAvg.
  Status AllReduceAsync(float* device_data, std::size_t count, ReduceOp op, cudaStream_t stream);
  // Waits until `event` (recorded after enqueued collectives) completes, under the watchdog:
  // on timeout, an NCCL async error or a failure recorded by another rank, aborts the
  // communicator and returns a retryable error naming `what` and the cause.
  Status Wait(cudaEvent_t event, std::string_view what);
  // The communicator's own stream for the synchronous calls.
  cudaStream_t stream() const { return stream_; }

 private:
  NcclCommunicator(rendezvous::Store& store, const NcclCommOptions& options);
  Status Fail(Status cause);  // records the root cause, aborts, returns the error to report
  Status CheckUsable(std::string_view op) const;

  rendezvous::Store& store_;
  NcclCommOptions options_;
  void* comm_ = nullptr;  // ncclComm_t, kept opaque so nccl.h stays out of this header
  cudaStream_t stream_ = nullptr;
  void* staging_ = nullptr;  // device scratch for host buffers
  std::size_t staging_bytes_ = 0;
  std::mutex abort_mu_;
  std::atomic<bool> aborted_{false};
  std::string failure_;
};

// True when this binary was built with NCCL and `count` devices make a one-GPU-per-rank gang
// possible for `local_world_size` ranks on this node.
bool NcclUsable(int visible_devices, int local_world_size);

}  // namespace ringtrain::comm
