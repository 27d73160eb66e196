#include "runner/train/grad_reducer.h"

#include <algorithm>

#include "common/clock.h"

namespace ringtrain::train {

StatusOr<std::unique_ptr<GradReducer>> GradReducer::Create(
    comm::Communicator* comm, std::span<float> grads, const std::vector<model::ParamRange>& layers,
    ReducerOptions options) {
  if (layers.empty()) return InvalidArgument("model has no parameters to reduce");
  std::unique_ptr<GradReducer> r(new GradReducer(comm, grads, std::move(options)));
  for (const auto& l : layers) r->layer_offsets_.push_back(l.offset);
  r->bucket_of_layer_.resize(layers.size());
  const std::size_t cap = std::max<std::size_t>(r->options_.bucket_cap_bytes / sizeof(float), 1);
  if (!r->options_.overlap) {
    // One bucket of everything, reduced after backward completes.
    r->buckets_.push_back({0, grads.size(), static_cast<int>(layers.size()), 0});
  } else {
    for (std::size_t i = layers.size(); i-- > 0;) {
      if (r->buckets_.empty() || r->buckets_.back().count >= cap) r->buckets_.push_back({});
      Bucket& b = r->buckets_.back();
      // Walking backwards, each layer extends the bucket towards the start of the buffer.
      b.offset = layers[i].offset;
      b.count += layers[i].count;
      ++b.layers;
      r->bucket_of_layer_[i] = r->buckets_.size() - 1;
    }
  }
  for (auto& b : r->buckets_) b.pending = b.layers;
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

GradReducer::GradReducer(comm::Communicator* comm, std::span<float> grads, ReducerOptions options)
    : comm_(comm), grads_(grads), options_(std::move(options)) {}

GradReducer::~GradReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradReducer::OnLayerReady(const model::ParamRange& range) {
  if (comm_->size() == 1) return;  // averaging over one rank is the identity
  auto it = std::lower_bound(layer_offsets_.begin(), layer_offsets_.end(), range.offset);
  std::size_t layer = static_cast<std::size_t>(it - layer_offsets_.begin());
  std::size_t b = options_.overlap ? bucket_of_layer_[layer] : 0;
  std::lock_guard<std::mutex> lock(mu_);
  --buckets_[b].pending;
  // Launch in bucket order only: a later bucket that completes first waits for its turn.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Launch(next_launch_++);
  }
}

void GradReducer::Launch(std::size_t bucket) {
  queue_.push_back(bucket);
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
    const Bucket& bucket = buckets_[b];
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
  if (comm_->size() == 1) return Status::Ok();
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, options_.finish_timeout, [&] { return done_ == buckets_.size(); })) {
    comm_->Abort();
    return DeadlineExceeded("gradient buckets not reduced within " +
                            std::to_string(options_.finish_timeout.count()) + " ms");
  }
  Status s = error_;
  done_ = 0;
  next_launch_ = 0;
  for (auto& b : buckets_) b.pending = b.layers;
  return s;
}

}  // namespace ringtrain::train
