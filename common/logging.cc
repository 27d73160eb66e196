#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/env.h"

namespace ringtrain {

void InitLogging(const std::string& component, const std::string& level) {
  auto logger = spdlog::stderr_color_mt(component);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [" + component + "] %v");
  spdlog::set_default_logger(logger);
  std::string lvl = GetEnv("RINGTRAIN_LOG_LEVEL").value_or(level);
  spdlog::set_level(spdlog::level::from_str(lvl));
}

}  // namespace ringtrain
