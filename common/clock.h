// Time as an injected dependency: a Clock interface (wall time for timestamps, monotonic time for
// intervals, timeouts and backoff), the real one, and deadline helpers. Tests use
// tests/fakes/fake_clock.h, which moves both only when told to; nothing here sleeps.
#pragma once

#include <chrono>
#include <string>

namespace ringtrain {

using SteadyTime = std::chrono::steady_clock::time_point;
using WallTime = std::chrono::system_clock::time_point;
using Duration = std::chrono::milliseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual WallTime Now() const = 0;
  // Monotonic: what every interval, expiry and backoff is measured on.
  virtual SteadyTime SteadyNow() const = 0;
};

class RealClock final : public Clock {
 public:
  WallTime Now() const override { return std::chrono::system_clock::now(); }
  SteadyTime SteadyNow() const override { return std::chrono::steady_clock::now(); }
};

// The process's real clock, for components given no other.
inline const Clock& SystemClock() {
  static const RealClock clock;
  return clock;
}

inline SteadyTime DeadlineAfter(Duration d) { return std::chrono::steady_clock::now() + d; }

// Milliseconds left until `deadline`, never negative, for poll(2).
inline int MillisLeft(SteadyTime deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  if (left.count() > 1'000'000'000) return 1'000'000'000;
  return static_cast<int>(left.count());
}

// "30s", "250ms", "1.5s": durations in error messages.
inline std::string FormatDuration(Duration d) {
  auto ms = d.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  if (ms < 1000) return std::to_string(ms) + "ms";
  std::string s = std::to_string(static_cast<double>(ms) / 1000.0);
  s.erase(s.find_last_not_of('0') + 1);
  return s + "s";
}

inline double SecondsSince(SteadyTime start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace ringtrain
