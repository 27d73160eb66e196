// Unsigned sums and products that stop at the type's maximum instead of wrapping: sizes computed
// from what a user or a file gave, compared against a limit, where a wrapped sum would pass.
#pragma once

#include <cstdint>
#include <limits>

namespace ringtrain {

inline std::uint64_t SaturatingAdd(std::uint64_t a, std::uint64_t b) {
  std::uint64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? std::numeric_limits<std::uint64_t>::max() : out;
}

inline std::uint64_t SaturatingMul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<std::uint64_t>::max() : out;
}

}  // namespace ringtrain
