#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::bench {

// A process whose CPU time every run reports, e.g. the gateway and the worker under test.
struct WatchedProcess {
  std::string label;  // "gateway", "worker", ...
  int pid = 0;
};

// CPU time process `pid` has used so far, user plus system, all its threads, in seconds
// (utime + stime of /proc/PID/stat; the kernel counts in clock ticks, 10 ms on Linux, so runs
// should use seconds of CPU for a precise per-request figure).
absl::StatusOr<double> ProcessCpuSeconds(int pid);

// "gateway=123,worker=456" (--cpu_pids): labels unique, pids positive and alive.
absl::StatusOr<std::vector<WatchedProcess>> ParseWatchedProcesses(absl::string_view text);

}  // namespace tandem::bench
