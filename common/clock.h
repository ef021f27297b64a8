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

// A steady-clock span in seconds, for metrics and logs (one definition: copies in anonymous
// namespaces collide when a unity build puts two of them in one batch).
inline double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace tandem
