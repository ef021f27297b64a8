#pragma once

#include <string>
#include <vector>

#include "tools/bench/run_result.h"
#include "tools/bench/run_spec.h"

namespace tandem::bench {

// A number for tables: three significant digits or so ("0", "0.125", "1.25", "12.5", "125").
std::string Fmt(double v);

// "OK=10 UNAVAILABLE=2": the codes of a run, by name.
std::string CodesText(const RunResult& r);
// CPU microseconds per OK request of each watched process, "gateway 182, worker 131"; "-" when
// none is watched.
std::string CpuText(const RunResult& r);

// "100/s poisson" or "c=4": the load of a spec.
std::string LoadText(const RunSpec& s);

// One row per run: load, throughput, latency percentiles and codes.
std::string MarkdownTable(const std::vector<RunResult>& results);

}  // namespace tandem::bench
