// Gradient buckets all-reduced on a communication thread while backward still runs (DDP's
// reducer): deciding which bucket is ready (BucketPlan, shared with the CUDA engine) is kept
// apart from doing the collective, which this class runs on its own thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
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
#include "runner/train/bucket_plan.h"

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
  // `ranges`: what backward reports (Model::grad_ranges()), tiling `grads`.
  static StatusOr<std::unique_ptr<GradReducer>> Create(comm::Communicator* comm,
                                                       std::span<float> grads,
                                                       const std::vector<model::ParamRange>& ranges,
                                                       ReducerOptions options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Called from backward when a range's gradients are final. A range the plan does not know,
  // or one reported twice, fails this step's Finish.
  void OnRangeReady(const model::ParamRange& range);
  // Waits until every bucket of this step is averaged across ranks; resets for the next step.
  Status Finish();
  std::size_t num_buckets() const { return plan_.buckets().size(); }
  // The bytes a reducer over `ranges` gradient ranges (model::GradRangeCount) holds besides the
  // gradients, which it reduces in place: its plan's bookkeeping (BucketPlan::BytesFor) with a
  // bucket per range at most (one in all without overlap), its queue of buckets to reduce and
  // the model's list of the ranges. Saturating; a bound known before the model is built.
  static std::uint64_t MemoryBytes(std::uint64_t ranges, const ReducerOptions& options);
  const BucketPlan& plan() const { return plan_; }

 private:
  GradReducer(comm::Communicator* comm, std::span<float> grads, BucketPlan plan,
              ReducerOptions options);
  void Loop();

  comm::Communicator* comm_;
  std::span<float> grads_;
  BucketPlan plan_;  // guarded by mu_
  ReducerOptions options_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::size_t> queue_;
  std::size_t done_ = 0;
  Status error_;       // the step's first collective failure
  Status plan_error_;  // the step's first bad report from backward
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ringtrain::train
