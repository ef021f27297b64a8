#pragma once

#include <chrono>
#include <optional>

#include "router/policy.h"

namespace tandem::gateway {

// The state of one policy trigger: hysteresis (separate enter and exit thresholds) plus a
// minimum dwell in each state, so a signal hovering near a threshold cannot make rules flap.
// Not thread-safe; the signal engine owns it.
class Trigger {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // What the signal engine knows about the trigger's signal at an update.
  enum class Input {
    kValue,      // a usable value (fresh, or stale but within its hold)
    kNoData,     // refreshed, but no data (no observations, empty query): no evidence of load,
                 // so it counts as the exit side holding
    kForcedOff,  // stale past its hold, failing open
    kForcedOn,   // stale past its hold, failing closed
  };

  Trigger(router::TriggerSpec spec, TimePoint now, bool on = false)
      : spec_(std::move(spec)), on_(on), since_(now) {}

  // Advances the state; returns true when it changed. Forced states apply at once (staleness is
  // a safety decision, not noise to be smoothed).
  bool Update(Input input, double value, TimePoint now);

  bool on() const { return on_; }
  TimePoint since() const { return since_; }
  const router::TriggerSpec& spec() const { return spec_; }

  // Whether `value` passes a threshold.
  static bool Holds(const router::Threshold& t, double value);

 private:
  const router::TriggerSpec spec_;
  bool on_;
  TimePoint since_;
};

}  // namespace tandem::gateway
