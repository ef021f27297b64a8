#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tools/bench/run_spec.h"

namespace tandem::bench {

// Summary of samples (milliseconds).
struct Percentiles {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
};

// Nearest-rank percentiles of `v`.
Percentiles Summarize(std::vector<double> v);

// What one run of a RunSpec measured.
struct RunResult {
  RunSpec spec;
  double wall_seconds = 0;
  int64_t issued = 0;
  int64_t ok = 0;
  int64_t completion_tokens = 0;
  std::map<std::string, int64_t> codes;  // gRPC code name (or CLIENT_OVERLOAD) -> calls
  Percentiles e2e_ms, ttft_ms, tpot_ms, gap_ms;
  std::vector<std::string> errors;  // first few distinct messages
  struct Samples {
    std::vector<double> e2e, ttft, tpot, gaps;  // milliseconds
  };
  std::shared_ptr<const Samples> samples;  // raw, for merging rounds
  // CPU seconds each watched process (--cpu_pids, by label) used during the run.
  std::map<std::string, double> cpu_seconds;

  // Seconds the rates are over. A timed open-loop run issues its last request before --duration
  // ends and may finish early; its rates are over the whole offered window.
  double Window() const;
  double RequestsPerSecond() const { return Window() > 0 ? ok / Window() : 0; }
  double TokensPerSecond() const { return Window() > 0 ? completion_tokens / Window() : 0; }
  // CPU microseconds the process `label` used per OK request; -1 when not watched or none was OK.
  double CpuMicrosPerRequest(const std::string& label) const;
  // The x of plots: requests per second (open loop) or calls in flight (closed loop).
  double Load() const { return spec.rate > 0 ? spec.rate : spec.concurrency; }
};

// One result from rounds of the same spec (samples pooled, counts added, windows summed).
RunResult Merge(const std::vector<RunResult>& parts);

// Whether every call of `r` ended OK (and there was one).
bool Clean(const RunResult& r);

}  // namespace tandem::bench
