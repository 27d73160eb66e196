// Gradient buckets all-reduced on a communication thread while backward still runs (DDP's
// reducer): deciding which bucket is ready is kept apart from doing the collective. Buckets are
// contiguous ranges of the flat gradient buffer, formed from the last layer backwards, and are
// launched strictly in bucket order, so the order of collectives is identical on every rank.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/status.h"
#include "runner/comm/communicator.h"
#include "runner/model/model.h"

namespace ringtrain::train {

struct ReducerOptions {
  std::size_t bucket_cap_bytes = 256 * 1024;
  bool overlap = true;  // false: one all-reduce of the whole buffer after backward
  // A backstop only: each collective has its own timeout, so Finish ends well before this.
  Duration finish_timeout{std::chrono::minutes(10)};
  // Called on the comm thread after each bucket: seconds and bytes.
  std::function<void(double, std::size_t)> on_allreduce;
};

class GradReducer {
 public:
  static StatusOr<std::unique_ptr<GradReducer>> Create(comm::Communicator* comm,
                                                       std::span<float> grads,
                                                       const std::vector<model::ParamRange>& layers,
                                                       ReducerOptions options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Called from backward when a layer's gradients are final.
  void OnLayerReady(const model::ParamRange& range);
  // Waits until every bucket of this step is averaged across ranks; resets for the next step.
  Status Finish();
  std::size_t num_buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::size_t offset = 0;
    std::size_t count = 0;
    int layers = 0;
    int pending = 0;
  };

  GradReducer(comm::Communicator* comm, std::span<float> grads, ReducerOptions options);
  void Loop();
  void Launch(std::size_t bucket);  // requires mu_

  comm::Communicator* comm_;
  std::span<float> grads_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_layer_;  // indexed by layer ordinal (offset order)
  std::vector<std::size_t> layer_offsets_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::size_t> queue_;
  std::size_t next_launch_ = 0;
  std::size_t done_ = 0;
  Status error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ringtrain::train
