// The gang gate: before a rank starts its rendezvous clock it waits until its supervisor says
// the whole gang is placed and running (the operator, through a downward-API file of a pod
// annotation). Owns only that wait; must not know who opens the gate or talk to any peer.
#pragma once

#include <functional>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace ringtrain::rendezvous {

// How often the gate file is read: the kubelet rewrites it within about a second of the
// annotation, so a tenth of that adds nothing a person would notice.
inline constexpr Duration kGangGatePoll{std::chrono::milliseconds(100)};

// Returns once the file at `path` holds anything but whitespace. A file that is missing or
// empty means "not yet". Cancelled on SIGTERM/SIGINT; DeadlineExceeded after `timeout`, naming
// the file ("the gang was not placed within 600s (gate /etc/ringtrain/gang/placed still
// closed)"). A file that exists but cannot be read is an error at once. `sleep` waits between
// reads and returns false when a stop was requested (SleepOrStop; tests move a fake clock).
using GateSleep = std::function<bool(Duration)>;
Status WaitForGangGate(const std::string& path, Duration timeout, const Clock& clock,
                       const GateSleep& sleep, Duration poll = kGangGatePoll);
// The same on the real clock, sleeping with SleepOrStop.
Status WaitForGangGate(const std::string& path, Duration timeout);

}  // namespace ringtrain::rendezvous
