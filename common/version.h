// What this build of ringtrain is, for a gang to compare (runner/rendezvous/fingerprint.h):
// the gang protocol it speaks and the release it was built as. Owns those two constants; must
// not depend on anything else in the tree.
#pragma once

#include <string_view>

namespace ringtrain {

// The gang's wire protocol. Bump it when ranks of two builds can no longer train together: a
// rendezvous or failure key, or the format of its value, changes (rounds, abort, fingerprint);
// the store's wire codec or handshake changes; the TCP ring's framing or handshake changes; or
// the collectives a step issues change in order, count or layout (bucket plan, gradient
// slicing, the start/recovery broadcasts, the drain vote). Ranks refuse to train beside a rank
// of another protocol.
inline constexpr int kGangProtocolVersion = 1;

// The release this binary was built as: CMake's project VERSION (e.g. "0.1.0"). Fixed at
// configure time, never a git describe or a timestamp, so that rebuilds hit the compiler cache.
std::string_view BuildVersion();

}  // namespace ringtrain
