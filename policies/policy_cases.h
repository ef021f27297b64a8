#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "router/policy.h"

namespace tandem::policies {

// Table tests of a policy: requests described in YAML and the decisions expected for them
// (format: policies/README.md, "Testing a policy").
struct CaseResult {
  std::string name;
  bool passed = false;
  // What was expected and what was decided, for the report.
  std::string detail;
};

// Runs every case of `cases_path` against `policy`. INVALID_ARGUMENT (listing every problem as
// FILE:LINE:COL) when the cases file itself is malformed.
absl::StatusOr<std::vector<CaseResult>> RunPolicyCases(const router::Policy& policy,
                                                       const std::string& cases_path);

}  // namespace tandem::policies
