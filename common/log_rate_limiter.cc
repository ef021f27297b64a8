#include "common/log_rate_limiter.h"

#include <algorithm>

namespace tandem {

LogRateLimiter::LogRateLimiter(double per_second, double burst)
    : per_second_(per_second), burst_(std::max(1.0, burst)), level_(burst_), last_() {}

bool LogRateLimiter::Allow(TimePoint now, int64_t* suppressed) {
  if (per_second_ <= 0) {
    *suppressed = 0;
    return true;
  }
  absl::MutexLock l(&mu_);
  if (now > last_) {
    const double elapsed = std::chrono::duration<double>(now - last_).count();
    // The first call finds last_ at the epoch: the bucket is full then anyway.
    level_ = std::min(burst_, level_ + elapsed * per_second_);
    last_ = now;
  }
  if (level_ < 1) {
    ++suppressed_;
    return false;
  }
  level_ -= 1;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace tandem
