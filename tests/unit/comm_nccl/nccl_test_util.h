// Shared pieces of the NCCL communicator tests: the GPU skip, a store that reports what the
// watchdog does with the "abort" key, and a host-released GPU stall.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runner/cuda/cuda_util.h"
#include "runner/rendezvous/store.h"

// NCCL needs a device: without one the test is reported as skipped, not passed.
#define RT_SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                          \
    if (::ringtrain::gpu::VisibleDeviceCount() == 0) {                                          \
      GTEST_SKIP() << "no CUDA device visible: this NCCL test needs a GPU (it runs on GPU CI)"; \
    }                                                                                           \
  } while (0)

namespace ringtrain::testing {

// Forwards to another store, and calls `on_abort_key` (once) when the "abort" key is written
// or read back with a value: the moment the watchdog has decided. Tests use it to release a
// stalled GPU exactly then, so that a completed event can never race the decision. With
// `lose_abort_reads`, reading "abort" fails as it does once rank 0 (the store host) is gone.
class ObservedStore final : public rendezvous::Store {
 public:
  explicit ObservedStore(rendezvous::Store& inner) : inner_(inner) {}

  void OnAbortKey(std::function<void()> f) { on_abort_key_ = std::move(f); }
  void LoseAbortReads() { lose_abort_reads_ = true; }
  int abort_reads() const { return abort_reads_.load(); }

  Status Set(const std::string& key, const std::string& value) override {
    Status s = inner_.Set(key, value);
    if (key == "abort") Fire();
    return s;
  }
  StatusOr<std::string> Get(const std::string& key, Duration timeout) override {
    if (key != "abort") return inner_.Get(key, timeout);
    abort_reads_.fetch_add(1);
    if (lose_abort_reads_) {
      Fire();
      return Unavailable("rendezvous store 10.0.0.1:29500: connect: Connection refused");
    }
    auto v = inner_.Get(key, timeout);
    if (v.ok()) Fire();
    return v;
  }
  StatusOr<std::int64_t> Add(const std::string& key, std::int64_t delta) override {
    return inner_.Add(key, delta);
  }
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired) override {
    auto v = inner_.CompareSet(key, expected, desired);
    if (key == "abort") Fire();
    return v;
  }
  Status Wait(const std::vector<std::string>& keys, Duration timeout) override {
    return inner_.Wait(keys, timeout);
  }
  StatusOr<std::string> CompareSetWithin(const std::string& key, const std::string& expected,
                                         const std::string& desired, Duration timeout) override {
    auto v = inner_.CompareSetWithin(key, expected, desired, timeout);
    if (key == "abort") Fire();
    return v;
  }

 private:
  void Fire() {
    if (on_abort_key_ && !fired_.exchange(true)) on_abort_key_();
  }

  rendezvous::Store& inner_;
  std::function<void()> on_abort_key_;
  bool lose_abort_reads_ = false;
  std::atomic<bool> fired_{false};
  std::atomic<int> abort_reads_{0};
};

// An int in mapped pinned memory: 0 holds LaunchStall's spinner, anything else releases it.
// Released on destruction, so a failing test never leaves the GPU spinning.
class StallFlag {
 public:
  StallFlag() = default;
  ~StallFlag() {
    Release();
    if (host_ != nullptr) (void)cudaFreeHost(host_);
  }
  StallFlag(const StallFlag&) = delete;
  StallFlag& operator=(const StallFlag&) = delete;

  Status Create() {
    void* p = nullptr;
    RETURN_IF_ERROR(gpu::CudaStatus(cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped),
                                    "cudaHostAlloc(mapped)"));
    host_ = static_cast<int*>(p);
    __atomic_store_n(host_, 0, __ATOMIC_SEQ_CST);
    void* d = nullptr;
    RETURN_IF_ERROR(
        gpu::CudaStatus(cudaHostGetDevicePointer(&d, host_, 0), "cudaHostGetDevicePointer"));
    device_ = static_cast<const int*>(d);
    return Status::Ok();
  }
  void Release() {
    if (host_ != nullptr) __atomic_store_n(host_, 1, __ATOMIC_SEQ_CST);
  }
  const int* device() const { return device_; }

 private:
  int* host_ = nullptr;
  const int* device_ = nullptr;
};

}  // namespace ringtrain::testing
