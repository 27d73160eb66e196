// The NCCL backend of the Communicator seam: one process per GPU. Rank 0 creates the
// ncclUniqueId and shares it through the (token-authenticated) rendezvous store; every rank
// joins with ncclCommInitRankConfig in non-blocking mode, polled under a timeout. Collectives
// are enqueued on CUDA streams; a watchdog (ncclCommGetAsyncError + event polling + the store's
// abort key) calls ncclCommAbort when a collective outlives the collective timeout, NCCL
// reports an error, or another rank records a failure, so no rank ever blocks in the driver.
// Failures are retryable (kUnavailable / kDeadlineExceeded / kAborted) and the first detector's
// reason is published through the gang-failure protocol (rendezvous/failure.h), as the TCP
// backend does.
//
// NCCL refuses two ranks on one GPU: each rank must own a distinct device.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/event_counter.h"
#include "runner/comm/communicator.h"
#include "runner/rendezvous/failure.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::comm {

struct NcclCommOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // CUDA device of this rank (LOCAL_RANK)
  // Covers waiting for rank 0's unique id and NCCL's own bootstrap/connection setup.
  Duration init_timeout = contract::kRendezvousTimeout;
  // How long one wait on enqueued collectives may take before the communicator aborts.
  Duration collective_timeout = kDefaultCollectiveTimeout;
  // How often the watchdog polls the store's abort key while waiting (0 = never).
  Duration abort_poll_interval{std::chrono::seconds(1)};
};

class NcclCommunicator final : public Communicator, public DeviceCollectives {
 public:
  // `store` must outlive the communicator (it is polled for other ranks' failures) and should
  // be prefixed per gang attempt (PrefixStore): "nccl/id" and "abort" must not be stale. Rank 0
  // publishes the unique id before any CUDA call; the others wait for it under init_timeout.
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(rendezvous::Store& store,
                                                            const NcclCommOptions& options);
  // Not aborted: ncclCommFinalize polled under the collective timeout, then ncclCommDestroy;
  // otherwise (or when finalizing fails or times out) ncclCommAbort. CUDA graphs that captured
  // AllReduceAsync hold the NCCL communicator: destroy them first.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  // The synchronous Communicator calls accept host or device pointers (host memory is staged
  // through a device buffer); each waits for completion under the watchdog. They run on
  // stream(), which does not wait for other streams: device buffers must be ready (the stream
  // that wrote them synchronized) before the call.
  Status AllReduce(float* data, std::size_t count, ReduceOp op) override;
  Status Broadcast(void* data, std::size_t bytes, int root) override;
  Status Barrier() override;
  Status AllGather(const void* in, std::size_t bytes, void* out) override;
  // Marks the communicator aborted and starts ncclCommAbort in the background; returns without
  // waiting for it, so it is safe from a signal-handling thread (not from an async signal
  // handler). A pending Wait returns Aborted.
  void Abort() override;

  DeviceCollectives* device_collectives() override { return this; }
  // DeviceCollectives: `stream` is a cudaStream_t and `event` a cudaEvent_t. kAverage uses
  // ncclAvg. Wait's watchdog: the collective timeout, NCCL's asynchronous errors and the
  // failures other ranks publish (rendezvous/failure.h).
  Status AllReduceAsync(float* device_data, std::size_t count, ReduceOp op, void* stream) override;
  Status Wait(void* event, std::string_view what) override;
  // The communicator's own stream for the synchronous calls.
  cudaStream_t stream() const { return stream_; }
  // Counts Wait()'s checks of an event found still pending: once it moves, a test's Abort()
  // from another thread meets a wait in progress, not one yet to start.
  const EventCounter& PendingWaitChecksForTest() const { return pending_wait_checks_; }

 private:
  struct AbortState;  // completion of the background ncclCommAbort

  NcclCommunicator(rendezvous::Store& store, const NcclCommOptions& options);
  // Records the root cause in the store ("abort", first reporter wins) unless `record` is
  // false, aborts, and returns the error to report. Called on the collective thread only.
  Status Fail(Status cause, bool record = true);
  // Fail for an error NCCL reported asynchronously (retryable kUnavailable), after a short
  // grace for the rank that saw the root cause to record it.
  Status FailAsync(Status cause);
  Status CheckUsable(std::string_view op) const;
  // While waiting: Abort() from another thread, or (every abort_poll_interval) a failure
  // another rank recorded in the store, or the store gone. Returns the cause; does not Fail.
  Status Watch(std::string_view what, SteadyTime& next_probe);
  Status ProbeAbortKey(std::string_view what);
  // NCCL's asynchronous state: Ok with *in_progress set while an operation is still being
  // enqueued (non-blocking mode), or the error NCCL reports.
  Status PollAsync(std::string_view what, bool* in_progress);
  // Calls `enqueue` (an NCCL call on the ncclComm_t it is given, returning its ncclResult_t)
  // under abort_mu_, then waits out ncclInProgress under the watchdog.
  Status Launch(std::string_view op, const std::function<int(void*)>& enqueue);
  Status RecordAndWait(std::string_view op);
  // Runs the steps of one synchronous collective on stream_; any error aborts the
  // communicator, since the peers would otherwise wait for this rank until their timeout.
  Status RunSync(std::string_view op, const std::function<Status()>& body);
  StatusOr<bool> OnDevice(const void* p, std::string_view op) const;
  Status EnsureStaging(std::size_t bytes);
  void StartAbortLocked();  // hands comm_ to a background ncclCommAbort; needs abort_mu_
  bool WaitForAbort(Duration limit);
  void AbortComm();  // StartAbortLocked + a bounded wait for it
  void Finalize();

  rendezvous::GangFailure gang_failure_;
  NcclCommOptions options_;
  void* comm_ = nullptr;  // ncclComm_t, kept opaque so nccl.h stays out of this header
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;  // recorded after each synchronous collective
  void* staging_ = nullptr;     // device scratch for host buffers
  std::size_t staging_bytes_ = 0;
  bool staging_pooled_ = false;  // cudaMallocAsync (freed without a device synchronization)
  std::mutex abort_mu_;          // guards comm_: every NCCL call on it, and handing it to abort
  std::atomic<bool> aborted_{false};
  EventCounter pending_wait_checks_;
  std::string failure_;
  std::shared_ptr<AbortState> abort_state_;
};

}  // namespace ringtrain::comm
