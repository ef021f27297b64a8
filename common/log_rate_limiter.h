#pragma once

#include <chrono>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem {

// Bounds how many lines of one kind a process logs (e.g. one per rejected request), so a caller
// sending invalid requests, which are refused before any quota applies, cannot flood the log.
// A token bucket: `per_second` lines a second on average, bursts of `burst`. Thread-safe.
class LogRateLimiter {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // per_second <= 0: every line is logged.
  LogRateLimiter(double per_second, double burst);

  // Whether to log a line now. When it is, `*suppressed` is how many lines were dropped since the
  // last one logged (say so in the line); otherwise it is left alone.
  bool Allow(TimePoint now, int64_t* suppressed);
  bool Allow(int64_t* suppressed) { return Allow(std::chrono::steady_clock::now(), suppressed); }

 private:
  const double per_second_;
  const double burst_;
  absl::Mutex mu_;
  double level_ ABSL_GUARDED_BY(mu_);
  TimePoint last_ ABSL_GUARDED_BY(mu_);
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem
