#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::gateway {

// Bounds the extra load that recovery puts on the workers, so that when they are failing, retries
// cannot multiply the load that made them fail (a retry storm), while one worker dying still has
// its requests moved elsewhere.
//
// Retries (nothing streamed yet) run after their request's previous attempt has ended: they
// replace load rather than add concurrency, but a fleet failing fast would see each request up
// to --max_attempts times. So they are bounded by rate: over any `window`, at most
// max(min, ratio x requests started in it); a fleet failing everything gets at most 1 + ratio
// attempts per request on average over the window (a quiet window's budget can be spent in one
// burst). Mid-stream failovers are not budgeted (the gateway's call site says why).
//
// Hedges run alongside their request's first attempt: real extra concurrency. At most
// max(min, ratio x active requests) are in flight.
class RetryBudget {
 public:
  using Clock = std::chrono::steady_clock;

  RetryBudget(double ratio, int64_t min, Clock::duration window = std::chrono::seconds(10))
      : ratio_(ratio),
        min_(min),
        slot_(std::max<Clock::duration>(window / kSlots, std::chrono::milliseconds(1))) {}

  void RequestStarted(Clock::time_point now) ABSL_LOCKS_EXCLUDED(mu_);
  void RequestEnded() { active_.fetch_sub(1, std::memory_order_relaxed); }

  // Spends one retry; false when the window's budget is spent.
  bool TryRetry(Clock::time_point now) ABSL_LOCKS_EXCLUDED(mu_);

  // Takes one hedge slot, given back with ReleaseHedge when the hedge ends; false when spent.
  bool TryHedge();
  void ReleaseHedge() { hedges_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  static constexpr int kSlots = 10;
  struct Slot {
    int64_t epoch = -1;  // which slot_-long interval since the clock's epoch it counts
    int64_t requests = 0;
    int64_t retries = 0;
  };
  // The slot of `now`, reset if it last counted an older interval.
  Slot& Current(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const double ratio_;
  const int64_t min_;
  const Clock::duration slot_;
  absl::Mutex mu_;
  std::array<Slot, kSlots> slots_ ABSL_GUARDED_BY(mu_);  // a ring over the window
  std::atomic<int64_t> active_{0};
  std::atomic<int64_t> hedges_{0};
};

}  // namespace tandem::gateway
