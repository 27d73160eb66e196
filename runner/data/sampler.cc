#include "runner/data/sampler.h"

#include <numeric>
#include <random>

namespace ringtrain::data {

DistributedSampler::DistributedSampler(std::size_t dataset_size, int rank, int world_size,
                                       std::uint64_t seed, bool shuffle)
    : dataset_size_(dataset_size),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      shuffle_(shuffle) {}

std::size_t DistributedSampler::num_samples(std::size_t offset) const {
  const std::size_t left = offset < dataset_size_ ? dataset_size_ - offset : 0;
  const auto world = static_cast<std::size_t>(world_size_);
  return (left + world - 1) / world;
}

void DistributedSampler::Indices(int epoch, std::vector<std::size_t>& out,
                                 std::size_t offset) const {
  std::vector<std::size_t> perm(dataset_size_);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  if (shuffle_) {
    // A portable Fisher-Yates (std::shuffle's algorithm is implementation-defined), so every
    // rank, on any standard library, draws the same permutation.
    std::mt19937_64 rng(seed_ + static_cast<std::uint64_t>(epoch));
    for (std::size_t i = perm.size(); i > 1; --i) {
      std::size_t j = static_cast<std::size_t>(rng() % i);
      std::swap(perm[i - 1], perm[j]);
    }
  }
  out.clear();
  const std::size_t end = offset + num_samples(offset) * static_cast<std::size_t>(world_size_);
  for (std::size_t i = offset + static_cast<std::size_t>(rank_); i < end;
       i += static_cast<std::size_t>(world_size_)) {
    out.push_back(perm.empty() ? 0 : perm[i % perm.size()]);
  }
}

std::int64_t DistributedSampler::steps_per_epoch(int batch_size, std::size_t offset) const {
  return static_cast<std::int64_t>(
      (num_samples(offset) + static_cast<std::size_t>(batch_size) - 1) /
      static_cast<std::size_t>(batch_size));
}

}  // namespace ringtrain::data
