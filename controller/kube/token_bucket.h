// Client-side rate limiting for writes (client-go's token bucket): `burst` tokens, refilled at
// `qps` per second. Reserve takes a token now, possibly going into debt, and says how long the
// caller must wait until it is really its own (FIFO-fair); the caller does the waiting, so the
// rule is tested on a fake clock without sleeping.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace ringtrain::kube {

class TokenBucket {
 public:
  // qps ≤ 0: no limit. `clock` must outlive the bucket.
  TokenBucket(double qps, int burst, const Clock* clock = &SystemClock())
      : qps_(qps),
        burst_(std::max(1, burst)),
        clock_(clock),
        tokens_(burst_),
        last_(clock->SteadyNow()) {}

  // The wait before the reserved token may be used (zero when one is free now). A wait longer
  // than `max_wait` takes no token and is DeadlineExceeded.
  StatusOr<Duration> Reserve(Duration max_wait) {
    if (qps_ <= 0) return Duration(0);
    std::lock_guard<std::mutex> lock(mu_);
    const SteadyTime now = clock_->SteadyNow();
    tokens_ = std::min<double>(burst_,
                               tokens_ + qps_ * std::chrono::duration<double>(now - last_).count());
    last_ = now;
    tokens_ -= 1;
    if (tokens_ >= 0) return Duration(0);
    const auto wait = std::chrono::ceil<Duration>(std::chrono::duration<double>(-tokens_ / qps_));
    if (wait > max_wait) {
      tokens_ += 1;
      return DeadlineExceeded("client-side rate limit: a write would wait " + FormatDuration(wait) +
                              " (more than " + FormatDuration(max_wait) + ")");
    }
    return wait;
  }

 private:
  const double qps_;
  const int burst_;
  const Clock* clock_;
  std::mutex mu_;
  double tokens_;
  SteadyTime last_;
};

}  // namespace ringtrain::kube
