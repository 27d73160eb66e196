// Reading rank 0's /status (see runner_contract.h): the one parser that the operator and
// `ringtrain run` share. A rank's reply is untrusted input: parsing never throws and never
// trusts sizes; must not know about the planner or Kubernetes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"

namespace ringtrain::contract {

struct RunnerStatus {
  std::int64_t step = 0;  // global optimizer steps
  int epoch = 0;
  double samples_per_second = 0;
  double loss = 0;
  // The last evaluation's test accuracy (0-1, classification) and test MSE (regression); -1
  // before the first evaluation and for the other kind of model.
  double test_accuracy = -1;
  double test_mse = -1;
  // starting | running | stalled | recovering | evaluating | succeeded | failed; "" if absent.
  // "recovering": rank 0 lost a peer and waits, keeping its state, for the gang to train again
  // in place; its samples/s reads 0 until then and its step is the last one it reported.
  // "stalled": rank 0 trains but completed no step for longer than its stall threshold (a hung
  // peer, a starved input); its samples/s reads 0 and its step is the last one it reported.
  std::string state;
  std::string resume_warning;    // "" unless rank 0 could resume from none of its checkpoints
  std::int64_t start_step = -1;  // where this run started (contract::kStatusStartStep); -1 absent
  // The attempt's in-place recoveries, the gang's totals (contract::kStatusRecoveries...).
  int recoveries = 0;
  std::int64_t recovery_steps_lost = 0;
  double recovery_seconds = 0;
  std::int64_t last_recovery_step = -1;
  // While "recovering": the loss rank 0 recovers from (contract::kStatusRecoveryCause); "" if
  // absent.
  std::string recovery_cause;
  // While "recovering": seconds since the outage began (contract::kStatusRecoveringSeconds);
  // -1 absent.
  double recovering_seconds = -1;
};

// Largest /status body read; the runner's is a few hundred bytes.
inline constexpr std::size_t kMaxStatusBytes = 64 * 1024;

// Lenient where it is harmless: unknown fields are ignored, and a missing or null field keeps
// its default. Strict where it is not: a body that is not one JSON object, or a known field of
// the wrong type or out of range, is an InvalidArgument naming the field. samples/s is read
// from "samplesPerSecond" or the older "samples_per_second".
StatusOr<RunnerStatus> ParseRunnerStatus(std::string_view body);

// GET http://host:port/status and parse it: Unavailable when it cannot be read (refused, timed
// out, not 200, over kMaxStatusBytes), InvalidArgument when the reply is malformed.
StatusOr<RunnerStatus> FetchRunnerStatus(const std::string& host, int port, Duration timeout);

}  // namespace ringtrain::contract
