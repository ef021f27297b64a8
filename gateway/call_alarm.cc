#include "gateway/call_alarm.h"

#include <utility>

namespace tandem::gateway {

bool CallAlarm::Arm(std::chrono::system_clock::time_point deadline, Callback callback) {
  absl::MutexLock l(&mu_);
  if (cancelled_ || alarm_ != nullptr) return false;
  SetLocked(deadline, std::move(callback));
  return true;
}

bool CallAlarm::Rearm(std::chrono::system_clock::time_point deadline, Callback callback) {
  absl::MutexLock l(&mu_);
  if (cancelled_) return false;
  SetLocked(deadline, std::move(callback));
  return true;
}

void CallAlarm::Cancel() {
  absl::MutexLock l(&mu_);
  cancelled_ = true;
  if (alarm_ != nullptr) alarm_->Cancel();
}

void CallAlarm::SetLocked(std::chrono::system_clock::time_point deadline, Callback callback) {
  // Replacing an alarm from inside its own callback is fine: gRPC keeps the fired one alive until
  // its callback returns.
  alarm_ = std::make_unique<grpc::Alarm>();
  alarm_->Set(deadline, std::move(callback));
}

}  // namespace tandem::gateway
