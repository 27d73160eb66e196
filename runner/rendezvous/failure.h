// The first failure of a gang attempt, agreed through the store under one key: the first rank
// to write it is the root cause every other rank reports. Owns the record's format; must not
// know how failures are detected (communicators, the trainer) or how they are shown.
#pragma once

#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::rendezvous {

// The key, shared with the communicators (TCP and NCCL), which write "<cause> (detected by
// rank R)" when they see a peer fail first.
inline constexpr const char* kFailureKey = "abort";
// Failure reporting must never be what delays the exit: bounded, best-effort store calls.
inline constexpr Duration kFailureReportTimeout{std::chrono::seconds(2)};

struct FailureRecord {
  int rank = -1;
  std::string cause;             // "PERMISSION_DENIED: checkpoint dir /ckpt: Permission denied"
  std::optional<int> exit_code;  // absent when a communicator wrote it: a peer was lost
};

// "<cause> (detected by rank R)" or "<cause> (detected by rank R, exit code C)".
std::string EncodeFailure(const FailureRecord& record);
// nullopt for a value without the suffix (then the cause is unknown, not malformed input).
std::optional<FailureRecord> ParseFailure(const std::string& value);

// What a failing rank reports: its termination message and exit code.
struct FailureReport {
  std::string message;
  int exit_code = kExitRetryable;
};

// Publishes this rank's failure unless another was first, and decides what this rank reports.
// `own` is this rank's error and `own_exit_code` its exit code. A rank whose error is only a
// consequence of another's (lost peer, abort, timeout: the retryable codes) reports
// "caused by rank R: <cause>" with R's exit code (138 when unknown); a rank that failed on its
// own (any other code, a stop by signal included) reports its own error. Works after SIGTERM:
// the store calls ignore the stop request and are bounded by kFailureReportTimeout.
FailureReport ResolveFailure(Store& store, int rank, const Status& own, int own_exit_code);

}  // namespace ringtrain::rendezvous
