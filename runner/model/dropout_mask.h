// The dropout mask as a counter-based hash: element `index` of the `call`-th training forward
// since the layer was seeded is dropped when DropoutUniform(seed, call, index) < rate. Each
// element is computed on its own (no sequential stream), so the CPU layer and the CUDA kernel
// draw bit-identical masks in any thread order, and the masks of a step depend only on the seed
// (train::DropoutSeed of job seed, rank and position) and the call. Header-only, host and device.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace ringtrain::model {

// One dropout layer's stream within a model: the model's seed plus (k + 1) strides for the k-th
// dropout layer in forward order (Model::SeedDropout and the GPU model agree on it).
inline constexpr std::uint64_t kDropoutStreamStride = 0x9E3779B97F4A7C15ULL;

// splitmix64's finaliser over seed, call and index: a uniform in [0, 1) with 53 random bits.
// Exact in double on both sides (a 53-bit integer times 2^-53), so a comparison with `rate`
// gives the same answer on the CPU and the GPU.
RINGTRAIN_HOST_DEVICE inline double DropoutUniform(std::uint64_t seed, std::uint64_t call,
                                                   std::uint64_t index) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (index + 1) + 0xD1B54A32D192ED03ULL * call;
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ULL;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace ringtrain::model
