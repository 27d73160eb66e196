// Exponential backoff, the one in the tree: with jitter (Backoff) for every retry loop that
// sleeps (rendezvous connect, DNS, the Kubernetes client), and its deterministic cap
// (BackoffDelay) for retries scheduled on an injected clock (the work queue's per-key backoff,
// the planner's create-retry gate). Owns no clock: the caller waits for what it returns.
#pragma once

#include <cstdint>
#include <random>

#include "common/clock.h"

namespace ringtrain {

struct BackoffOptions {
  Duration initial{50};
  Duration max{2000};
  double multiplier = 2.0;
};

// The wait before retry `attempt` (0 for the first), without jitter: initial * multiplier^attempt,
// capped at max (the exponent stops growing at 30); never negative, whatever `attempt` is. Pure:
// the same attempt always gets the same wait.
Duration BackoffDelay(const BackoffOptions& options, int attempt);

class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}, std::uint64_t seed = std::random_device{}());
  // The next wait: uniform in [cap/2, cap], cap = BackoffDelay(options, attempts()).
  Duration Next();
  void Reset() { attempt_ = 0; }
  int attempts() const { return attempt_; }

 private:
  BackoffOptions options_;
  std::mt19937_64 rng_;
  int attempt_ = 0;
};

}  // namespace ringtrain
