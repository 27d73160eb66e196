#include "common/version.h"

// Defined for this file alone (common/CMakeLists.txt): a version bump recompiles one file.
#ifndef RINGTRAIN_VERSION
#error "RINGTRAIN_VERSION must be defined (CMake's project VERSION)"
#endif

namespace ringtrain {

std::string_view BuildVersion() { return RINGTRAIN_VERSION; }

}  // namespace ringtrain
