#include "tools/bench/runner.h"

#include <algorithm>

#include "tools/bench/channels.h"

namespace tandem::bench {

RunResult Runner::RunOnce(const RunSpec& spec) const {
  Driver driver(spec, MakeChannels(spec.target, spec.address, options_.channels), options_.driver);
  std::vector<double> before;
  for (const WatchedProcess& p : options_.cpu_processes) {
    before.push_back(ProcessCpuSeconds(p.pid).value_or(-1));
  }
  RunResult result = driver.Run();
  for (size_t i = 0; i < options_.cpu_processes.size(); ++i) {
    const absl::StatusOr<double> after = ProcessCpuSeconds(options_.cpu_processes[i].pid);
    // A process that went away mid-run has no figure rather than a wrong one.
    if (after.ok() && before[i] >= 0) {
      result.cpu_seconds[options_.cpu_processes[i].label] = *after - before[i];
    }
  }
  return result;
}

std::vector<RunResult> Runner::Interleaved(const std::vector<RunSpec>& specs, int rounds) const {
  std::vector<std::vector<RunResult>> parts(specs.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < specs.size(); ++i) {
      RunSpec s = specs[i];
      s.duration = specs[i].duration / rounds;
      if (specs[i].requests > 0) s.requests = std::max(1, specs[i].requests / rounds);
      s.seed = specs[i].seed + round;
      parts[i].push_back(RunOnce(s));
    }
  }
  std::vector<RunResult> merged;
  for (const auto& p : parts) merged.push_back(Merge(p));
  return merged;
}

void Runner::Warmup(RunSpec spec) const {
  const int n = options_.warmup_requests;
  if (n <= 0) return;
  spec.rate = 0;
  spec.concurrency = std::min(4, n);
  spec.requests = n;
  RunOnce(spec);
}

absl::Status Runner::WaitReady(Target target, const std::string& address,
                               const std::string& model) const {
  return tandem::bench::WaitReady(target, address, model, options_.ready_timeout);
}

}  // namespace tandem::bench
