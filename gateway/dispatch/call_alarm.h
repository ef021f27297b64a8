#pragma once

#include <chrono>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gateway/dispatch/timer_queue.h"

namespace tandem::gateway {

// A timer of one call (its queue wait, hedge delay or stall watch) that any thread may cancel
// while another sets it, on the gateway's TimerQueue. Cancel is ordered after any Arm in
// progress, and nothing is armed once cancelled: a timer set after the call gave it up would
// hold the call (and a drain waiting for it) until it fired, for nothing.
//
// The callback runs exactly once per successful Arm or Rearm: with ok=true on the queue's thread
// at the deadline, or with ok=false inside Cancel when the timer was still pending (then on the
// cancelling thread, with no lock of this class held: the caller must not hold a lock the
// callback takes).
class CallAlarm {
 public:
  using Callback = std::function<void(bool ok)>;

  explicit CallAlarm(TimerQueue* timers) : timers_(timers) {}
  CallAlarm(const CallAlarm&) = delete;
  CallAlarm& operator=(const CallAlarm&) = delete;

  // Sets the timer `after` from now unless it was set before or cancelled; false when nothing
  // was set (the callback then never runs).
  bool Arm(std::chrono::steady_clock::duration after, Callback callback) ABSL_LOCKS_EXCLUDED(mu_);
  // Sets it again, for a timer that fired (e.g. from its own callback). False once cancelled.
  bool Rearm(std::chrono::steady_clock::duration after, Callback callback) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels a pending timer (its callback runs now with ok=false) and every later Arm or Rearm.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void SetLocked(std::chrono::steady_clock::duration after, Callback callback)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  TimerQueue* const timers_;
  absl::Mutex mu_;
  bool armed_ ABSL_GUARDED_BY(mu_) = false;  // set at least once
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  TimerQueue::Handle pending_ ABSL_GUARDED_BY(mu_);
  // The pending timer's callback, taken back by Cancel; the queue runs a wrapper that takes it.
  Callback callback_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway
