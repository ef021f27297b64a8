#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "absl/status/statusor.h"

namespace tandem::bench {

// Resident set size of process `pid` in KiB (VmRSS of /proc/PID/status).
absl::StatusOr<int64_t> RssKb(int pid);

// Samples a process's RSS every 20 ms on a thread of its own, from construction to Stop(), and
// keeps the maximum. Does nothing for pid <= 0.
class RssSampler {
 public:
  explicit RssSampler(int pid);
  ~RssSampler() { Stop(); }
  RssSampler(const RssSampler&) = delete;
  RssSampler& operator=(const RssSampler&) = delete;

  void Stop();
  int64_t max_kb() const { return max_kb_; }

 private:
  void Loop();

  const int pid_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> max_kb_{0};
  std::thread thread_;
};

}  // namespace tandem::bench
