#include "gateway/signals/trigger.h"

namespace tandem::gateway {

bool Trigger::Holds(const router::Threshold& t, double value) {
  switch (t.op) {
    case router::Op::kGt:
      return value > t.value;
    case router::Op::kGe:
      return value >= t.value;
    case router::Op::kLt:
      return value < t.value;
    case router::Op::kLe:
      return value <= t.value;
    default:
      return false;
  }
}

bool Trigger::Update(Input input, double value, TimePoint now) {
  bool want = on_;
  if (input == Input::kForcedOn) {
    want = true;
  } else if (input == Input::kForcedOff) {
    want = false;
  } else {
    const auto dwell = std::chrono::duration<double>(now - since_).count();
    if (dwell < spec_.min_dwell_seconds) return false;
    if (input == Input::kNoData) {
      want = false;
    } else if (!on_ && Holds(spec_.enter, value)) {
      want = true;
    } else if (on_ && Holds(spec_.exit, value)) {
      want = false;
    }
  }
  if (want == on_) return false;
  on_ = want;
  since_ = now;
  return true;
}

}  // namespace tandem::gateway
