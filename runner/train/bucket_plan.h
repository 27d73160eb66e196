// Which gradient ranges form which all-reduce bucket, and when a bucket may be launched: the one
// plan both step engines use (the CPU reducer thread and the CUDA comm stream). Pure bookkeeping,
// no communication and no threads, so its rules are unit-tested apart from any engine.
//
// Backward reports its gradients as ranges of the flat gradient buffer (Model::grad_ranges():
// whole small layers, and big weight matrices in slices of rows so that communication starts
// while the rest of the layer is still being differentiated). Buckets group consecutive ranges
// from the end of the buffer (backward's order) up to the cap; a range bigger than the cap is a
// bucket of its own. Buckets are launched strictly in order, so every rank issues the same
// sequence of collectives whatever order its ranges become ready in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runner/model/model.h"

namespace ringtrain::train {

// Backward slices big weight gradients into pieces of a quarter bucket, so that a bucket fills
// (and its all-reduce starts) after a fraction of the layer's backward, and the last bucket,
// whose all-reduce nothing can hide, is small. 0 (no slicing) when buckets do not overlap.
constexpr std::size_t kSlicesPerBucket = 4;
inline std::size_t GradSliceFloats(std::size_t bucket_cap_bytes, bool overlap) {
  if (!overlap) return 0;
  const std::size_t slice = bucket_cap_bytes / sizeof(float) / kSlicesPerBucket;
  return slice > 0 ? slice : 1;
}

struct GradBucket {
  std::size_t offset = 0;  // [offset, offset+count) of the flat gradient buffer
  std::size_t count = 0;
  int ranges = 0;  // reported ranges it is made of
};

class BucketPlan {
 public:
  // `ranges` must tile [0, total) in offset order without gaps or overlap. cap_floats ≥ 1.
  // overlap=false: one bucket of everything, launched when backward has reported every range.
  static StatusOr<BucketPlan> Create(const std::vector<model::ParamRange>& ranges,
                                     std::size_t cap_floats, bool overlap);

  const std::vector<GradBucket>& buckets() const { return buckets_; }
  std::size_t total() const { return total_; }

  // Marks one reported range final for this step. An unknown range (not one of `ranges`) or one
  // reported twice in a step is an error and changes nothing. On success returns the buckets
  // that became launchable, [first, last), in bucket order (often empty).
  StatusOr<std::pair<std::size_t, std::size_t>> MarkReady(const model::ParamRange& range);
  // Buckets handed out by MarkReady this step.
  std::size_t launched() const { return next_launch_; }
  bool complete() const { return next_launch_ == buckets_.size(); }
  // Starts a new step.
  void Reset();

  // The bytes a plan of `ranges` ranges in `buckets` buckets holds (its per-range and per-bucket
  // bookkeeping; a bucket is a span of the gradient buffer, not a copy), saturating.
  static std::uint64_t BytesFor(std::uint64_t ranges, std::uint64_t buckets);

 private:
  std::vector<GradBucket> buckets_;
  std::vector<std::size_t> offsets_;    // of each range, ascending
  std::vector<std::size_t> counts_;     // of each range
  std::vector<std::size_t> bucket_of_;  // of each range
  std::vector<char> reported_;          // this step, per range
  std::vector<int> pending_;            // per bucket, this step
  std::size_t next_launch_ = 0;
  std::size_t total_ = 0;
};

}  // namespace ringtrain::train
