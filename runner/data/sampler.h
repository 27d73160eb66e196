// DistributedSampler semantics (torch.utils.data.distributed): each epoch a permutation of the
// whole dataset seeded by seed+epoch, padded by wrapping to a multiple of the world size, rank r
// taking every world-th index from r. Shards are disjoint and equal in length on every rank.
// An epoch can also be continued from a global position (samples of its permutation already
// consumed by a gang of any size): the rest of the permutation is sharded the same way over
// this world, so a job resized by restart sees every sample of the epoch once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringtrain::data {

class DistributedSampler {
 public:
  DistributedSampler(std::size_t dataset_size, int rank, int world_size, std::uint64_t seed,
                     bool shuffle = true);

  // Fills `out` with this rank's indices for `epoch` (reuses its capacity), from the epoch's
  // global position `offset` (< dataset size) on: positions offset + r, offset + r + world, ...
  // of the permutation, padded by wrapping to a multiple of the world size.
  void Indices(int epoch, std::vector<std::size_t>& out, std::size_t offset = 0) const;
  // Samples per rank for the rest of an epoch: ceil((dataset_size - offset) / world_size).
  std::size_t num_samples(std::size_t offset = 0) const;
  // Steps for the rest of an epoch for a per-rank batch: the same on every rank, the last
  // batch may be short.
  std::int64_t steps_per_epoch(int batch_size, std::size_t offset = 0) const;

 private:
  std::size_t dataset_size_;
  int rank_;
  int world_size_;
  std::uint64_t seed_;
  bool shuffle_;
};

}  // namespace ringtrain::data
