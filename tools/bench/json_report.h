#pragma once

#include <string>
#include <vector>

#include "tools/bench/run_result.h"

namespace tandem::bench {

// A JSON number with six significant digits; null when not finite.
std::string JsonNumber(double v);

// The runs as a JSON array, one object per run (spec, counts, rates and percentiles).
std::string JsonRuns(const std::vector<RunResult>& results);

}  // namespace tandem::bench
