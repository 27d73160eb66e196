#include "common/backoff.h"

#include <algorithm>
#include <cmath>

namespace ringtrain {

Backoff::Backoff(BackoffOptions options, std::uint64_t seed) : options_(options), rng_(seed) {}

Duration Backoff::Next() {
  double cap = static_cast<double>(options_.initial.count()) *
               std::pow(options_.multiplier, std::min(attempt_, 30));
  cap = std::min(cap, static_cast<double>(options_.max.count()));
  ++attempt_;
  std::uniform_real_distribution<double> dist(cap / 2, cap);
  return Duration(static_cast<std::int64_t>(dist(rng_)));
}

}  // namespace ringtrain
