#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "router/policy.h"

namespace tandem::policies {

// What changes when recorded traffic is re-decided by another policy.
struct ReplayReport {
  int64_t total = 0;
  int64_t changed = 0;  // model or class differs
  int64_t old_errors = 0;
  int64_t new_errors = 0;
  // Requests per model under each policy.
  std::map<std::string, int64_t> old_models;
  std::map<std::string, int64_t> new_models;
  // Changed decisions by (old model, new model) and by (old class, new class).
  std::map<std::pair<std::string, std::string>, int64_t> model_moves;
  std::map<std::pair<std::string, std::string>, int64_t> class_moves;

  // A human-readable table.
  std::string ToText(const std::string& old_version, const std::string& new_version) const;
};

// Re-decides every record of a decision log (JSON lines of tandem.v1.DecisionRecord) with both
// policies. INVALID_ARGUMENT naming FILE:LINE for a line that is not a record.
absl::StatusOr<ReplayReport> ReplayDecisionLog(const std::string& log_path,
                                               const router::Policy& old_policy,
                                               const router::Policy& new_policy);

}  // namespace tandem::policies
