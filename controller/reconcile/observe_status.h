// Turns one read of rank 0's /status into the planner's ObservedProgress: shared by the
// operator and `ringtrain run` so that both judge a failed read the same way (see planner.h).
#pragma once

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
  return p;
}

}  // namespace ringtrain::reconcile
