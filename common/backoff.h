// Exponential backoff with full jitter, used by every retry loop (rendezvous connect, DNS,
// the Kubernetes client). Owns no clock: the caller sleeps for what Next() returns.
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

class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}, std::uint64_t seed = std::random_device{}());
  // The next wait: uniform in [cap/2, cap], cap doubling from `initial` up to `max`.
  Duration Next();
  void Reset() { attempt_ = 0; }
  int attempts() const { return attempt_; }

 private:
  BackoffOptions options_;
  std::mt19937_64 rng_;
  int attempt_ = 0;
};

}  // namespace ringtrain
