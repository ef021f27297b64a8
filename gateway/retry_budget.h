#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace tandem::gateway {

// Bounds the extra load that recovery puts on the workers, so that when they are failing, retries
// cannot multiply the load that made them fail (a retry storm), while one worker dying still has
// its requests moved elsewhere.
//
// Retries and mid-stream failovers run after their request's previous attempt has ended: they
// replace load, they do not add concurrency, but a failing fleet would see each request up to
// --max_attempts times. So they are bounded by rate: over any `window`, at most
// max(min, ratio x requests started in it). A worker's death needs one failover per request it
// had in flight, a small share of the window's requests, so it fits; a fleet failing everything
// gets at most 1 + ratio attempts per request.
//
// Hedges run alongside their request's first attempt: real extra concurrency. At most
// max(min, ratio x active requests) are in flight.
class RetryBudget {
 public:
  using Clock = std::chrono::steady_clock;

  RetryBudget(double ratio, int64_t min, Clock::duration window = std::chrono::seconds(10))
      : ratio_(ratio), min_(min), slot_(window / kSlots) {}

  void RequestStarted(Clock::time_point now);
  void RequestEnded() { active_.fetch_sub(1, std::memory_order_relaxed); }

  // Spends one retry or failover; false when the window's budget is spent.
  bool TryRetry(Clock::time_point now);

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
  // The slot of `now`, reset if it last counted an older interval. mu_ held.
  Slot& Current(Clock::time_point now);

  const double ratio_;
  const int64_t min_;
  const Clock::duration slot_;
  std::mutex mu_;
  std::array<Slot, kSlots> slots_;  // guarded by mu_; a ring over the window
  std::atomic<int64_t> active_{0};
  std::atomic<int64_t> hedges_{0};
};

}  // namespace tandem::gateway
