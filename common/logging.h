// Logging setup: one spdlog logger per process, a pattern that names the component and rank.
// Call InitLogging once in main; everything else uses spdlog's free functions.
#pragma once

#include <string>

namespace ringtrain {

// `level` is one of trace, debug, info, warn, error; RINGTRAIN_LOG_LEVEL overrides it.
void InitLogging(const std::string& component, const std::string& level = "info");

}  // namespace ringtrain
