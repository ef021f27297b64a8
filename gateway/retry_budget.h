#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace tandem::gateway {

// Bounds the extra load retries, failovers and hedges put on the workers: at any moment at most
// max(min_concurrent, ratio x active requests) of them may be in flight. When the workers are
// failing, retries then cannot multiply the load that made them fail. Lock-free.
class RetryBudget {
 public:
  RetryBudget(double ratio, int64_t min_concurrent) : ratio_(ratio), min_(min_concurrent) {}

  void RequestStarted() { active_.fetch_add(1, std::memory_order_relaxed); }
  void RequestEnded() { active_.fetch_sub(1, std::memory_order_relaxed); }

  // Takes one unit for an extra attempt; false when the budget is spent.
  bool TryAcquire() {
    const int64_t limit = std::max<int64_t>(
        min_, static_cast<int64_t>(ratio_ * active_.load(std::memory_order_relaxed)));
    int64_t cur = extra_.load(std::memory_order_relaxed);
    while (cur < limit) {
      if (extra_.compare_exchange_weak(cur, cur + 1, std::memory_order_relaxed)) return true;
    }
    return false;
  }
  // Returns the unit when the extra attempt ends.
  void Release() { extra_.fetch_sub(1, std::memory_order_relaxed); }

  int64_t extra_in_flight() const { return extra_.load(std::memory_order_relaxed); }

 private:
  const double ratio_;
  const int64_t min_;
  std::atomic<int64_t> active_{0};
  std::atomic<int64_t> extra_{0};
};

}  // namespace tandem::gateway
