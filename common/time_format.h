// RFC 3339 timestamps as Kubernetes writes them ("2026-11-21T15:04:05Z"), to and from
// WallTime. Second resolution, UTC only, like metav1.Time.
#pragma once

#include <optional>
#include <string>

#include "common/clock.h"

namespace ringtrain {

std::string FormatRfc3339(WallTime t);
std::optional<WallTime> ParseRfc3339(const std::string& s);

}  // namespace ringtrain
