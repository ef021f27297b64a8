#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tools/bench/driver.h"
#include "tools/bench/process_cpu.h"
#include "tools/bench/run_result.h"
#include "tools/bench/run_spec.h"

namespace tandem::bench {

// What every run of a tandem-bench invocation shares (its flags).
struct RunnerOptions {
  DriverOptions driver;
  int channels = 1;                                  // gRPC channels per address
  int warmup_requests = 50;                          // before each series, not measured
  absl::Duration ready_timeout = absl::Seconds(20);  // of WaitReady
  std::vector<WatchedProcess> cpu_processes;         // CPU time read around every run
};

// Runs specs: once, in interleaved rounds, or as a warm-up.
class Runner {
 public:
  explicit Runner(const RunnerOptions& options) : options_(options) {}

  RunResult RunOnce(const RunSpec& spec) const;

  // Runs the specs in `rounds` alternating rounds of 1/rounds of their length each (so drift on a
  // shared machine hits every spec alike) and returns one merged result per spec.
  std::vector<RunResult> Interleaved(const std::vector<RunSpec>& specs, int rounds) const;

  // Closed-loop requests (at most 4 in flight) before a series, not measured.
  void Warmup(RunSpec spec) const;

  // channels.h's WaitReady with --ready_timeout.
  absl::Status WaitReady(Target target, const std::string& address,
                         const std::string& model = "") const;

 private:
  const RunnerOptions options_;
};

}  // namespace tandem::bench
