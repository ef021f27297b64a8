#pragma once

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem {

// One wait on `cv` (with `mu` held) that ends by `deadline` on the steady clock; absl::CondVar's
// own deadlines are on the wall clock, which can jump. Returns false, without waiting, once the
// deadline has passed. A wakeup says nothing by itself, so callers loop on their condition (as
// the standard library's wait_until(lock, deadline, pred) does):
//
//   while (!stop_ && WaitUntil(cv_, mu_, deadline)) {
//   }
inline bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu,
                      std::chrono::steady_clock::time_point deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= left.zero()) return false;
  cv.WaitWithTimeout(&mu, absl::FromChrono(left));
  return true;
}

}  // namespace tandem
