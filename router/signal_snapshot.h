#pragma once

#include <map>
#include <string>

namespace tandem::router {

// The live signal values and trigger states at one moment, published by the gateway's signal
// engine and read by the router. Immutable once published.
struct SignalSnapshot {
  // A live signal missing here has no usable value (never seen, or stale past its hold), so
  // conditions on it do not hold. Static signals come from the policy and are not listed.
  std::map<std::string, double> values;
  // Trigger states; a trigger missing here is off.
  std::map<std::string, bool> triggers;
};

}  // namespace tandem::router
