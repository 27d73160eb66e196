// DistributedSampler semantics (torch.utils.data.distributed): each epoch a permutation of the
// whole dataset seeded by seed+epoch, padded by wrapping to a multiple of the world size, rank r
// taking every world-th index from r. Shards are disjoint and equal in length on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringtrain::data {

class DistributedSampler {
 public:
  DistributedSampler(std::size_t dataset_size, int rank, int world_size, std::uint64_t seed,
                     bool shuffle = true);

  // Fills `out` with this rank's indices for `epoch` (reuses its capacity).
  void Indices(int epoch, std::vector<std::size_t>& out) const;
  // Samples per rank per epoch: ceil(dataset_size / world_size).
  std::size_t num_samples() const { return num_samples_; }
  // Steps per epoch for a per-rank batch: the same on every rank, the last batch may be short.
  std::int64_t steps_per_epoch(int batch_size) const;

 private:
  std::size_t dataset_size_;
  int rank_;
  int world_size_;
  std::uint64_t seed_;
  bool shuffle_;
  std::size_t num_samples_;
};

}  // namespace ringtrain::data
