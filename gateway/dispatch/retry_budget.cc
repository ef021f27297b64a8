#include "gateway/dispatch/retry_budget.h"

#include <algorithm>

namespace tandem::gateway {

RetryBudget::Slot& RetryBudget::Current(Clock::time_point now) {
  const int64_t epoch = now.time_since_epoch() / slot_;
  Slot& s = slots_[static_cast<size_t>(epoch % kSlots)];
  if (s.epoch != epoch) s = Slot{epoch, 0, 0};
  return s;
}

void RetryBudget::RequestStarted(Clock::time_point now) {
  active_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  ++Current(now).requests;
}

bool RetryBudget::TryRetry(Clock::time_point now) {
  absl::MutexLock l(&mu_);
  Slot& current = Current(now);
  // The window: this slot and the kSlots - 1 before it, skipping slots left from older rounds.
  int64_t requests = 0;
  int64_t retries = 0;
  for (const Slot& s : slots_) {
    if (s.epoch > current.epoch - kSlots) {
      requests += s.requests;
      retries += s.retries;
    }
  }
  const int64_t limit = std::max<int64_t>(min_, static_cast<int64_t>(ratio_ * requests));
  if (retries >= limit) return false;
  ++current.retries;
  return true;
}

bool RetryBudget::TryHedge() {
  const int64_t limit = std::max<int64_t>(
      min_, static_cast<int64_t>(ratio_ * active_.load(std::memory_order_relaxed)));
  int64_t cur = hedges_.load(std::memory_order_relaxed);
  while (cur < limit) {
    if (hedges_.compare_exchange_weak(cur, cur + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

}  // namespace tandem::gateway
