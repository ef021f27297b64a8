#pragma once

#include <chrono>

namespace tandem {

// Time source seam: the engine loop and the simulator read time and sleep only through this, so
// tests can substitute a clock that never waits.
class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  virtual void SleepUntil(TimePoint t) = 0;

  // The process-wide steady clock.
  static Clock* Real();
};

}  // namespace tandem
