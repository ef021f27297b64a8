#pragma once

#include <grpcpp/alarm.h>

#include <chrono>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::gateway {

// A timer of one call (its queue wait, hedge delay or stall watch) that any thread may cancel
// while another sets it. A grpc::Alarm must not be cancelled while it is being set, and one set
// after the call gave it up would hold the call (and a drain waiting for it) until it fires for
// nothing: here Cancel is ordered after any Set in progress, and nothing is set once cancelled.
//
// The callback runs on a gRPC thread, with ok=false when cancelled; never inside Set or Cancel,
// so either may be called with a lock held that the callback takes.
class CallAlarm {
 public:
  using Callback = std::function<void(bool ok)>;

  // Sets the timer unless it was set before or cancelled; false when nothing was set (the
  // callback then never runs).
  bool Arm(std::chrono::system_clock::time_point deadline, Callback callback)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sets it again, for a timer that fired (e.g. from its own callback): a new grpc::Alarm each
  // time, as one must not be set again from its own callback. False once cancelled.
  bool Rearm(std::chrono::system_clock::time_point deadline, Callback callback)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels a pending timer (its callback runs with ok=false) and every later Arm or Rearm.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void SetLocked(std::chrono::system_clock::time_point deadline, Callback callback)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);  // null until first set
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::gateway
