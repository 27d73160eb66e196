// The gang-failure protocol, written once for every backend (TCP ring, NCCL) and the runner: the
// first failure of a gang attempt is agreed through the store under one key, and the first rank
// to write it is the root cause every other rank reports. Owns the key, the record's format and
// the protocol's timeouts; must not know how failures are detected (communicators, the trainer)
// or how they are shown.
#pragma once

#include <optional>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "runner/rendezvous/store.h"

namespace ringtrain::rendezvous {

// The key under which the first failure of the attempt is recorded.
inline constexpr const char* kFailureKey = "abort";
// Failure reporting must never be what delays the exit: bounded, best-effort store calls.
inline constexpr Duration kFailureReportTimeout{std::chrono::seconds(2)};
// How long a rank whose failure may be second-hand (a stalled upstream peer, an asynchronous
// NCCL error) waits for the rank that saw it first to record the root cause.
inline constexpr Duration kRootCauseGrace{std::chrono::seconds(1)};

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

// One rank's side of the protocol over the attempt's (prefixed) store. Every call is bounded
// and ignores a stop request: the report is the cause peers give for their own exit.
class GangFailure {
 public:
  GangFailure(Store& store, int rank) : store_(store), rank_(rank) {}

  // Waits up to kRootCauseGrace for another rank to record a failure (the cause seen here may
  // be a consequence of it).
  void AwaitRootCause() const;
  // Records `cause` as this rank's failure (no exit code: a communicator saw it) unless another
  // rank was first, and returns the record now under the key: this rank's own when it was first
  // (a record another process wrote in an unknown format comes back with rank -1 and the raw
  // text as cause). An error when the store cannot be reached within kFailureReportTimeout.
  StatusOr<FailureRecord> Publish(const Status& cause) const;
  // The failure another rank recorded, without waiting; nullopt when none. Unavailable when the
  // store (hosted by rank 0) fails twice in a row: a client reconnects once after an I/O error.
  StatusOr<std::optional<FailureRecord>> Probe() const;
  // "cause (rank R)", or the raw text of a record in an unknown format.
  static std::string Describe(const FailureRecord& record);

  int rank() const { return rank_; }

 private:
  Store& store_;
  int rank_;
};

// Publishes this rank's failure unless another was first, and decides what this rank reports.
// `own` is this rank's error and `own_exit_code` its exit code. A rank whose error is only a
// consequence of another's (lost peer, abort, timeout: the retryable codes) reports
// "caused by rank R: <cause>" with R's exit code (138 when unknown); a rank that failed on its
// own (any other code, a stop by signal included) reports its own error. Works after SIGTERM:
// the store calls ignore the stop request and are bounded by kFailureReportTimeout.
FailureReport ResolveFailure(Store& store, int rank, const Status& own, int own_exit_code);

}  // namespace ringtrain::rendezvous
