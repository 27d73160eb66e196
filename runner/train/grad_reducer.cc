#include "runner/train/grad_reducer.h"

#include <algorithm>
#include <string>

#include "common/clock.h"
#include "common/saturating.h"

namespace ringtrain::train {

StatusOr<std::unique_ptr<GradReducer>> GradReducer::Create(
    comm::Communicator* comm, std::span<float> grads, const std::vector<model::ParamRange>& ranges,
    ReducerOptions options) {
  ASSIGN_OR_RETURN(
      BucketPlan plan,
      BucketPlan::Create(ranges, options.bucket_cap_bytes / sizeof(float), options.overlap));
  if (plan.total() != grads.size()) {
    return InvalidArgument("gradient ranges cover " + std::to_string(plan.total()) + " of " +
                           std::to_string(grads.size()) + " floats");
  }
  std::unique_ptr<GradReducer> r(new GradReducer(comm, grads, std::move(plan), std::move(options)));
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

std::uint64_t GradReducer::MemoryBytes(std::uint64_t ranges, const ReducerOptions& options) {
  const std::uint64_t buckets = options.overlap ? ranges : std::min<std::uint64_t>(ranges, 1);
  constexpr std::uint64_t kPerRange = sizeof(model::ParamRange);  // Model::grad_ranges()
  constexpr std::uint64_t kPerBucket = sizeof(decltype(queue_)::value_type);
  return SaturatingAdd(
      BucketPlan::BytesFor(ranges, buckets),
      SaturatingAdd(SaturatingMul(ranges, kPerRange), SaturatingMul(buckets, kPerBucket)));
}

GradReducer::GradReducer(comm::Communicator* comm, std::span<float> grads, BucketPlan plan,
                         ReducerOptions options)
    : comm_(comm), grads_(grads), plan_(std::move(plan)), options_(std::move(options)) {}

GradReducer::~GradReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradReducer::OnRangeReady(const model::ParamRange& range) {
  std::lock_guard<std::mutex> lock(mu_);
  auto launch = plan_.MarkReady(range);
  if (!launch.ok()) {
    if (plan_error_.ok()) plan_error_ = launch.status();
    return;
  }
  // Averaging over one rank is the identity: the plan still checks the reports.
  if (comm_->size() == 1 || launch->first == launch->second) return;
  for (std::size_t b = launch->first; b < launch->second; ++b) queue_.push_back(b);
  cv_.notify_all();
}

void GradReducer::Loop() {
  for (;;) {
    std::size_t b = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      b = queue_.front();
      queue_.pop_front();
      if (!error_.ok()) {
        ++done_;
        cv_.notify_all();
        continue;
      }
    }
    const GradBucket bucket = plan_.buckets()[b];  // immutable after Create
    auto start = std::chrono::steady_clock::now();
    Status s =
        comm_->AllReduce(grads_.data() + bucket.offset, bucket.count, comm::ReduceOp::kAverage);
    double seconds = SecondsSince(start);
    if (s.ok() && options_.on_allreduce) {
      options_.on_allreduce(seconds, bucket.count * sizeof(float));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!s.ok() && error_.ok()) error_ = s;
      ++done_;
    }
    cv_.notify_all();
  }
}

Status GradReducer::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  Status s = plan_error_;
  if (s.ok() && !plan_.complete()) {
    s = Internal("backward finished with " +
                 std::to_string(plan_.buckets().size() - plan_.launched()) +
                 " gradient bucket(s) not ready");
  }
  if (comm_->size() > 1) {
    // Every bucket handed to the comm thread is waited for, even after an error: the thread
    // must not touch the gradients while the optimizer or the next step does.
    const std::size_t launched = plan_.launched();
    if (!cv_.wait_for(lock, options_.finish_timeout, [&] { return done_ == launched; })) {
      comm_->Abort();
      return DeadlineExceeded("gradient buckets not reduced within " +
                              std::to_string(options_.finish_timeout.count()) + " ms");
    }
    if (s.ok()) s = error_;
  }
  done_ = 0;
  error_ = Status::Ok();
  plan_error_ = Status::Ok();
  plan_.Reset();
  return s;
}

}  // namespace ringtrain::train
