// Stream-ordered uploads of small host values (a step's scalars, a data cursor) that a captured
// CUDA graph then reads from device memory. The source is a ring of pinned slots, so the copy
// is a true asynchronous DMA that never waits for the stream's earlier work; a slot is written
// again only after its previous copy has completed (its event), so a pending copy never sees
// its source change.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <string>

#include "common/status.h"
#include "runner/cuda/cuda_util.h"

namespace ringtrain::gpu {

template <typename T>
class PinnedUpload {
 public:
  static constexpr int kSlots = 16;

  PinnedUpload() = default;
  PinnedUpload(const PinnedUpload&) = delete;
  PinnedUpload& operator=(const PinnedUpload&) = delete;
  ~PinnedUpload() {
    // Copies still in flight read the pinned slots freed below.
    for (Event& e : copied_) {
      if (e.get() != nullptr) (void)cudaEventSynchronize(e.get());
    }
  }

  Status Init() {
    RETURN_IF_ERROR(host_.Allocate(kSlots));
    for (Event& e : copied_) RETURN_IF_ERROR(e.Create());
    return Status::Ok();
  }

  // Enqueues *device = value on `stream`. Blocks only while the slot's previous copy (kSlots
  // uploads ago) has not run, i.e. when the stream is that far behind the host.
  Status Enqueue(const T& value, T* device, cudaStream_t stream) {
    const int slot = static_cast<int>(next_ % kSlots);
    RETURN_IF_ERROR(WaitEvent(copied_[slot].get(), std::chrono::minutes(5),
                              "waiting for a pinned upload slot"));
    host_.data()[slot] = value;
    RT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device, host_.data() + slot, sizeof(T), cudaMemcpyHostToDevice, stream));
    RT_CUDA_RETURN_IF_ERROR(cudaEventRecord(copied_[slot].get(), stream));
    ++next_;
    return Status::Ok();
  }

 private:
  PinnedBuffer<T> host_;
  Event copied_[kSlots];  // never-recorded events count as complete
  long long next_ = 0;
};

}  // namespace ringtrain::gpu
