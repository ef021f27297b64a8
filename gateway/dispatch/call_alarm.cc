#include "gateway/dispatch/call_alarm.h"

#include <utility>

namespace tandem::gateway {

bool CallAlarm::Arm(std::chrono::steady_clock::duration after, Callback callback) {
  absl::MutexLock l(&mu_);
  if (cancelled_ || armed_) return false;
  SetLocked(after, std::move(callback));
  return true;
}

bool CallAlarm::Rearm(std::chrono::steady_clock::duration after, Callback callback) {
  absl::MutexLock l(&mu_);
  if (cancelled_) return false;
  SetLocked(after, std::move(callback));
  return true;
}

void CallAlarm::Cancel() {
  Callback callback;
  {
    absl::MutexLock l(&mu_);
    cancelled_ = true;
    // False when the timer already fired: the queue's thread runs (or ran) it with ok=true.
    if (!timers_->Cancel(pending_)) return;
    pending_ = {};
    callback = std::move(callback_);
  }
  callback(false);
}

void CallAlarm::SetLocked(std::chrono::steady_clock::duration after, Callback callback) {
  armed_ = true;
  callback_ = std::move(callback);
  pending_ = timers_->Schedule(std::chrono::steady_clock::now() + after, [this] {
    Callback fired;
    {
      absl::MutexLock l(&mu_);
      pending_ = {};
      fired = std::move(callback_);
    }
    fired(true);  // may Rearm
  });
}

}  // namespace tandem::gateway
