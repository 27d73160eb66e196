#include "common/backoff.h"

#include <algorithm>
#include <cmath>

namespace ringtrain {

Backoff::Backoff(BackoffOptions options, std::uint64_t seed) : options_(options), rng_(seed) {}

Duration BackoffDelay(const BackoffOptions& options, int attempt) {
  double cap = static_cast<double>(options.initial.count()) *
               std::pow(options.multiplier, std::clamp(attempt, 0, 30));
  cap = std::min(cap, static_cast<double>(options.max.count()));
  return Duration(static_cast<Duration::rep>(std::max(cap, 0.0)));
}

Duration Backoff::Next() {
  const auto cap = static_cast<double>(BackoffDelay(options_, attempt_).count());
  ++attempt_;
  std::uniform_real_distribution<double> dist(cap / 2, cap);
  return Duration(static_cast<std::int64_t>(dist(rng_)));
}

}  // namespace ringtrain
