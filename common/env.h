// Tunables read from the environment, each declared once with its variable and default
// (NCCL's NCCL_PARAM idea). Parse errors name the variable; nothing here exits.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace ringtrain {

std::optional<std::string> GetEnv(const char* name);
// Unset or empty → default; set but not an integer in [min, max] → InvalidArgument naming it.
StatusOr<std::int64_t> GetEnvInt(const char* name, std::int64_t def, std::int64_t min = INT64_MIN,
                                 std::int64_t max = INT64_MAX);
StatusOr<std::string> GetEnvRequired(const char* name);

// Parses a whole string as a base-10 integer; `what` names the field in the error.
StatusOr<std::int64_t> ParseInt(const std::string& text, const std::string& what);
StatusOr<double> ParseDouble(const std::string& text, const std::string& what);

}  // namespace ringtrain
