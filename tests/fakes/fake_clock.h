// A clock that moves only when a test says so, wall and monotonic time together, so tests of
// backoff, expiry, rate limits and grace periods assert exact outcomes without sleeping.
// Thread-safe: components read it from their own threads.
#pragma once

#include <mutex>

#include "common/clock.h"

namespace ringtrain::testing {

class FakeClock final : public Clock {
 public:
  FakeClock() = default;
  explicit FakeClock(WallTime wall) : wall_(wall) {}

  WallTime Now() const override {
    std::lock_guard lock(mu_);
    return wall_;
  }
  SteadyTime SteadyNow() const override {
    std::lock_guard lock(mu_);
    return steady_;
  }
  void Advance(Duration d) {
    std::lock_guard lock(mu_);
    wall_ += d;
    steady_ += d;
  }
  // Sets the wall time only, as an NTP step or a test's "now is this date" does: monotonic
  // time does not move.
  void SetWall(WallTime wall) {
    std::lock_guard lock(mu_);
    wall_ = wall;
  }

 private:
  mutable std::mutex mu_;
  // A fixed, recognizable start: 2026-01-01T00:00:00Z; monotonic time starts an hour in.
  WallTime wall_ = WallTime(std::chrono::seconds(1767225600));
  SteadyTime steady_ = SteadyTime(std::chrono::hours(1));
};

}  // namespace ringtrain::testing
