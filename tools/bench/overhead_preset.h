#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/bench/output_files.h"
#include "tools/bench/rss_sampler.h"
#include "tools/bench/run_result.h"
#include "tools/bench/run_spec.h"
#include "tools/bench/runner.h"

namespace tandem::bench {

struct OverheadOptions {
  std::string worker_address;     // the worker called directly
  std::string gateway_address;    // a gateway in front of that same worker
  int gateway_pid = 0;            // for the gateway's RSS; <= 0: not measured
  int streams = 512;              // concurrent gateway streams checked for lost chunks
  int throughput_inflight = 128;  // closed-loop calls in flight of the throughput comparison
  std::string rates;              // --rates of the sweep; "" for the default rates
  bool sweep_past_failure = false;
  double p99_bound_ms = 1.0;  // added p99 bound of the rate sweep
};

// --preset=overhead: the same worker directly and through the gateway. Concurrency 1 (direct,
// gateway unary, gateway stream, and a stream four times as long, interleaved), throughput with
// many calls in flight (direct against gateway unary), concurrent streams through the gateway
// with none lost, then a rate sweep of direct against gateway unary until a rate is not
// sustained; with the gateway's RSS throughout and, when the runner watches processes labelled
// "gateway" and "worker" (--cpu_pids), their CPU time per request. Prints the summary against
// the targets and every run; writes the files.
class OverheadPreset {
 public:
  OverheadPreset(const Runner& runner, const RunSpec& base, const OverheadOptions& options);

  absl::Status Run(const OutputFiles& out);

 private:
  // Waits for both targets and learns the worker's model; the idle RSS.
  absl::Status Prepare();
  // The three concurrency-1 series.
  void MakeSpecs();
  // Closed loop at options_.throughput_inflight: direct and gateway unary, interleaved.
  void RunThroughput();
  // The concurrent streams, and whether every one ended OK with all its tokens.
  void RunStreams();
  // The rate sweep; stops after the first rate not sustained unless --sweep_past_failure.
  absl::Status Sweep();
  // One rate of the sweep: appends its rows and runs; returns whether it was sustained.
  bool SweepRate(double rate);
  std::string Summary() const;
  // The CPU rows of the summary (empty without watched processes).
  std::string CpuSummary() const;
  // Gateway CPU microseconds per relayed stream chunk: the slope between the short and the long
  // stream; -1 when not measured or when both carried about as many chunks.
  double GatewayCpuPerChunk() const;
  std::string ExtraJson() const;

  const Runner& runner_;
  RunSpec base_;
  const OverheadOptions options_;
  std::string model_;  // the worker's, pinned on the gateway
  RunSpec direct_, gw_unary_, gw_stream_, gw_stream_long_;

  // Direct, gateway unary, gateway stream, gateway long stream at concurrency 1.
  std::vector<RunResult> c1_;
  std::vector<RunResult> throughput_;  // direct and gateway unary, many in flight
  RunResult streams_;
  bool streams_clean_ = false;
  std::vector<RunResult> sweep_;  // direct and gateway unary per rate
  double best_rate_ = 0;          // highest sustained rate within the p99 bound
  std::string sweep_table_;
  std::vector<std::string> json_sweep_;
  int64_t rss_idle_kb_ = 0, rss_load_kb_ = 0, rss_sweep_kb_ = 0, rss_after_kb_ = 0;
};

}  // namespace tandem::bench
