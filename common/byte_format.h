// Byte counts for people: "625.2 MB", "69.6 GB" (decimal units, as memory limits are read).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace ringtrain {

inline std::string FormatMegabytes(std::uint64_t bytes) {
  char out[32];
  const auto b = static_cast<double>(bytes);
  if (b >= 1e9) {
    std::snprintf(out, sizeof(out), "%.1f GB", b / 1e9);
  } else {
    std::snprintf(out, sizeof(out), "%.1f MB", b / 1e6);
  }
  return out;
}

}  // namespace ringtrain
