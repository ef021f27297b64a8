#pragma once

#include <algorithm>
#include <chrono>

namespace tandem::gateway {

// A token bucket refilled continuously at `rate` per second up to `burst`. Not thread-safe: the
// owner locks. Time is passed in, so tests drive it without a clock.
class TokenBucket {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // rate <= 0 means unlimited; burst <= 0 picks one second of the rate (at least 1).
  void Configure(double rate, double burst, TimePoint now) {
    Refill(now);
    rate_ = rate;
    burst_ = burst > 0 ? burst : std::max(1.0, rate);
    if (!configured_) level_ = burst_;  // a new bucket starts full
    level_ = std::min(level_, burst_);
    configured_ = true;
    last_ = now;
  }
  bool unlimited() const { return rate_ <= 0; }

  // Whether `need` is available now (need <= 0 means "the bucket is not in debt"); 0 when it is,
  // else the seconds until it will be.
  double WaitFor(double need, TimePoint now) {
    if (unlimited()) return 0;
    Refill(now);
    const double target = need > 0 ? std::min(need, burst_) : 1e-9;
    return level_ >= target ? 0 : (target - level_) / rate_;
  }
  // Takes `amount`; the level may go below zero (a request larger than the burst borrows from
  // the future, and the next waits until the debt is repaid).
  void Take(double amount) {
    if (!unlimited()) level_ -= amount;
  }
  void Give(double amount) {
    if (!unlimited()) level_ = std::min(burst_, level_ + amount);
  }
  double level() const { return level_; }

 private:
  void Refill(TimePoint now) {
    if (configured_ && rate_ > 0 && now > last_) {
      level_ =
          std::min(burst_, level_ + rate_ * std::chrono::duration<double>(now - last_).count());
    }
    last_ = std::max(last_, now);
  }

  double rate_ = 0;
  double burst_ = 1;
  double level_ = 0;
  bool configured_ = false;
  TimePoint last_{};
};

}  // namespace tandem::gateway
