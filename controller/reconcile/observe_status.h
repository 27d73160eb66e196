// Turns one read of rank 0's /status into the planner's ObservedProgress: shared by the
// operator and `ringtrain run` so that both judge a failed read the same way (see planner.h).
#pragma once

#include <algorithm>

#include "common/runner_status.h"
#include "controller/reconcile/planner.h"

namespace ringtrain::reconcile {

inline ObservedProgress ObserveRunnerStatus(const StatusOr<contract::RunnerStatus>& read) {
  ObservedProgress p;
  if (!read.ok()) {
    p.reachable = false;
    p.error = read.status().message();
    return p;
  }
  p.step = read->step;
  p.epoch = read->epoch;
  p.samples_per_second = read->samples_per_second;
  p.loss = read->loss;
  p.test_accuracy = read->test_accuracy;
  p.test_mse = read->test_mse;
  // Before it trains, a runner knows neither where it starts nor what its gang recovered.
  // "stalled" trains without progress (its samples/s reads 0): not idle, so the progress
  // deadline judges it.
  p.training = !read->state.empty() && read->state != "starting";
  p.idle = read->state == "starting" || read->state == "recovering";
  p.state = read->state;
  p.start_step = read->start_step;
  p.recoveries = read->recoveries;
  p.recovery_steps_lost = read->recovery_steps_lost;
  p.recovery_seconds = std::max(0.0, read->recovery_seconds);
  p.last_recovery_step = read->last_recovery_step;
  if (p.state == "recovering") {
    p.recovery_cause = read->recovery_cause;
    // Bounded (a year): a hostile or broken reply's age is turned into a time point.
    p.recovering_seconds = std::min(read->recovering_seconds, 365.0 * 24 * 3600);
  }
  return p;
}

}  // namespace ringtrain::reconcile
