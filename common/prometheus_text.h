#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem {

// One sample of the Prometheus text exposition format (version 0.0.4): a metric name, its
// labels and a value. Histograms appear as their _bucket (with le), _sum and _count samples.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses a whole /metrics body. Comments and # HELP / # TYPE lines are skipped; timestamps are
// accepted and ignored. INVALID_ARGUMENT names the line and column of the first malformed sample.
absl::StatusOr<std::vector<Sample>> ParsePrometheusText(std::string_view text);

// True when every label in `want` is present in `labels` with the same value.
bool LabelsMatch(const std::map<std::string, std::string>& labels,
                 const std::map<std::string, std::string>& want);

}  // namespace tandem
