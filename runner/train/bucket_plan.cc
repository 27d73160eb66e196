#include "runner/train/bucket_plan.h"

#include <algorithm>
#include <string>

#include "common/saturating.h"

namespace ringtrain::train {

StatusOr<BucketPlan> BucketPlan::Create(const std::vector<model::ParamRange>& ranges,
                                        std::size_t cap_floats, bool overlap) {
  if (ranges.empty()) return InvalidArgument("model has no parameters to reduce");
  BucketPlan plan;
  // Exactly one entry per range (BytesFor's count), not push_back's doubling.
  plan.offsets_.reserve(ranges.size());
  plan.counts_.reserve(ranges.size());
  std::size_t next = 0;
  for (const auto& r : ranges) {
    if (r.offset != next || r.count == 0) {
      return InvalidArgument("gradient ranges must tile the buffer: range at " +
                             std::to_string(r.offset) + " (" + std::to_string(r.count) +
                             " floats) where " + std::to_string(next) + " was expected");
    }
    plan.offsets_.push_back(r.offset);
    plan.counts_.push_back(r.count);
    next += r.count;
  }
  plan.total_ = next;
  plan.bucket_of_.resize(ranges.size());
  const std::size_t cap = std::max<std::size_t>(cap_floats, 1);
  if (!overlap) {
    plan.buckets_.push_back({0, plan.total_, static_cast<int>(ranges.size())});
  } else {
    for (std::size_t i = ranges.size(); i-- > 0;) {
      if (plan.buckets_.empty() || plan.buckets_.back().count + ranges[i].count > cap) {
        plan.buckets_.push_back({});
      }
      GradBucket& b = plan.buckets_.back();
      // Walking backwards, each range extends the bucket towards the start of the buffer.
      b.offset = ranges[i].offset;
      b.count += ranges[i].count;
      ++b.ranges;
      plan.bucket_of_[i] = plan.buckets_.size() - 1;
    }
  }
  plan.reported_.assign(ranges.size(), 0);
  plan.pending_.resize(plan.buckets_.size());
  plan.Reset();
  return plan;
}

std::uint64_t BucketPlan::BytesFor(std::uint64_t ranges, std::uint64_t buckets) {
  constexpr std::uint64_t kPerRange =
      sizeof(decltype(offsets_)::value_type) + sizeof(decltype(counts_)::value_type) +
      sizeof(decltype(bucket_of_)::value_type) + sizeof(decltype(reported_)::value_type);
  constexpr std::uint64_t kPerBucket =
      sizeof(decltype(buckets_)::value_type) + sizeof(decltype(pending_)::value_type);
  return SaturatingAdd(SaturatingMul(ranges, kPerRange), SaturatingMul(buckets, kPerBucket));
}

void BucketPlan::Reset() {
  std::fill(reported_.begin(), reported_.end(), 0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].ranges;
  next_launch_ = 0;
}

StatusOr<std::pair<std::size_t, std::size_t>> BucketPlan::MarkReady(
    const model::ParamRange& range) {
  auto it = std::lower_bound(offsets_.begin(), offsets_.end(), range.offset);
  const auto i = static_cast<std::size_t>(it - offsets_.begin());
  if (it == offsets_.end() || *it != range.offset || counts_[i] != range.count) {
    return Internal("gradient ready for an unknown range [" + std::to_string(range.offset) + ", " +
                    std::to_string(range.offset + range.count) + ")");
  }
  if (reported_[i] != 0) {
    return Internal("gradient range at " + std::to_string(range.offset) +
                    " reported twice in one step");
  }
  reported_[i] = 1;
  --pending_[bucket_of_[i]];
  const std::size_t first = next_launch_;
  // Launch in bucket order only: a later bucket that completes first waits for its turn.
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) ++next_launch_;
  return std::pair<std::size_t, std::size_t>{first, next_launch_};
}

}  // namespace ringtrain::train
