// The device input's sampling rules as plain functions, shared by the CUDA kernels and the host
// (so tests can recompute on the CPU exactly what the device does): the per-epoch shuffle keys
// (a permutation is the stable sort of the indices by key) and DistributedSampler's sharding
// (the permutation padded by wrapping to a multiple of the world size, rank r taking positions
// r, r + world, ...; batches of `batch` consecutive shard positions, the last one possibly short).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#if defined(__CUDACC__)
#define RT_HOST_DEVICE __host__ __device__
#else
#define RT_HOST_DEVICE
#endif

namespace ringtrain::gpu {

// splitmix64's finalizer (Steele, Lea, Flood 2014): a bijection with full avalanche.
RT_HOST_DEVICE inline std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The sort key of sample `index` in `epoch`'s permutation; the same on every rank and build.
RT_HOST_DEVICE inline std::uint64_t ShuffleKey(std::uint64_t seed, int epoch, std::uint64_t index) {
  const std::uint64_t epoch_key =
      SplitMix64(SplitMix64(seed) ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(epoch)));
  return SplitMix64(epoch_key + index);
}

struct ShardPlan {
  std::int64_t count = 0;  // dataset size
  std::int64_t rank = 0;
  std::int64_t world = 1;
  std::int64_t batch = 1;  // per-rank batch size

  // Samples per rank per epoch: ceil(count / world), like DistributedSampler::num_samples().
  RT_HOST_DEVICE std::int64_t num_samples() const { return (count + world - 1) / world; }
  RT_HOST_DEVICE std::int64_t steps_per_epoch() const {
    return (num_samples() + batch - 1) / batch;
  }
  // batch except possibly the last step; 0 outside [0, steps_per_epoch).
  RT_HOST_DEVICE std::int64_t batch_samples(std::int64_t step) const {
    if (step < 0 || step >= steps_per_epoch()) return 0;
    const std::int64_t left = num_samples() - step * batch;
    return left < batch ? left : batch;
  }
  // Index into the permutation of sample i of batch `step` on this rank.
  RT_HOST_DEVICE std::int64_t PermPosition(std::int64_t step, std::int64_t i) const {
    return (rank + (step * batch + i) * world) % count;
  }
};

// The permutation DeviceDataset::Shuffle(epoch) computes, on the host (for tests).
inline std::vector<std::uint32_t> HostShufflePermutation(std::int64_t count, std::uint64_t seed,
                                                         int epoch) {
  std::vector<std::uint32_t> perm(static_cast<std::size_t>(count));
  std::iota(perm.begin(), perm.end(), 0u);
  std::vector<std::uint64_t> keys(perm.size());
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = ShuffleKey(seed, epoch, i);
  // The device's radix sort is stable, and its values start in index order.
  std::stable_sort(perm.begin(), perm.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return keys[a] < keys[b]; });
  return perm;
}

}  // namespace ringtrain::gpu
