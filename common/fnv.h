// FNV-1a (64 bits): a stable hash of text, the same on every platform, build and process, for
// what is compared across processes or stored (pod stamps, gang fingerprints, checkpoint
// records). Not for anything an adversary chooses to collide.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace ringtrain {

inline constexpr std::uint64_t kFnv1aOffset = 14695981039346656037ULL;

// Folds `text` into `hash` (start from kFnv1aOffset; fold several texts in turn).
inline std::uint64_t Fnv1a(std::string_view text, std::uint64_t hash = kFnv1aOffset) {
  for (const char ch : text) {
    hash ^= static_cast<unsigned char>(ch);
    hash *= 1099511628211ULL;
  }
  return hash;
}

// Fnv1a(text) as 16 lower-case hex digits.
inline std::string Fnv1aHex(std::string_view text) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(Fnv1a(text)));
  return buf;
}

}  // namespace ringtrain
