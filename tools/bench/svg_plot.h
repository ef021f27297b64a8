#pragma once

#include <string>
#include <vector>

#include "tools/bench/run_result.h"

namespace tandem::bench {

// An SVG plot of end-to-end latency percentiles (log y, ms) against load (log x when it spans
// 10x): one colour per percentile, one dash pattern per series (RunSpec::label). Runs with no OK
// request are left out.
std::string LatencySvg(const std::vector<RunResult>& results, const std::string& title);

}  // namespace tandem::bench
