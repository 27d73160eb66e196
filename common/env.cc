#include "common/env.h"

#include <cerrno>
#include <cstdlib>

namespace ringtrain {

std::optional<std::string> GetEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

StatusOr<std::int64_t> ParseInt(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE) {
    return InvalidArgument(what + ": expected an integer, got '" + text + "'");
  }
  return static_cast<std::int64_t>(v);
}

StatusOr<double> ParseDouble(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || errno == ERANGE) {
    return InvalidArgument(what + ": expected a number, got '" + text + "'");
  }
  return v;
}

StatusOr<std::int64_t> GetEnvInt(const char* name, std::int64_t def, std::int64_t min,
                                 std::int64_t max) {
  auto v = GetEnv(name);
  if (!v) return def;
  ASSIGN_OR_RETURN(std::int64_t n, ParseInt(*v, name));
  if (n < min || n > max) {
    return InvalidArgument(std::string(name) + ": " + std::to_string(n) + " is out of range [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return n;
}

StatusOr<std::string> GetEnvRequired(const char* name) {
  auto v = GetEnv(name);
  if (!v) return InvalidArgument(std::string(name) + ": required environment variable is not set");
  return *v;
}

}  // namespace ringtrain
