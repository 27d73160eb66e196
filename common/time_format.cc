#include "common/time_format.h"

#include <ctime>

namespace ringtrain {

std::string FormatRfc3339(WallTime t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<WallTime> ParseRfc3339(const std::string& s) {
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return std::nullopt;
  if (*end == '.') {  // fractional seconds are accepted and dropped
    ++end;
    while (*end >= '0' && *end <= '9') ++end;
  }
  if (*end != 'Z' || end[1] != '\0') return std::nullopt;
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

}  // namespace ringtrain
