#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "router/policy.h"

namespace tandem::policies {

// One problem in a policy file, located by line, column (1-based) and key path.
struct PolicyError {
  std::string file;
  int line = 0;
  int column = 0;
  // e.g. "rules[2].action.split[0].weight".
  std::string path;
  std::string message;
  // "FILE:LINE:COL: PATH: MESSAGE"
  std::string ToString() const;
};

// Parses and validates a policy (schema: policies/README.md). Every error found is appended to
// `errors`, not just the first; on any error the result is INVALID_ARGUMENT whose message lists
// them all, one per line. `file` only labels the errors.
absl::StatusOr<std::shared_ptr<const router::Policy>> ParsePolicy(const std::string& text,
                                                                  const std::string& file,
                                                                  std::vector<PolicyError>* errors);

// Reads `path` and parses it; NOT_FOUND when the file cannot be read.
absl::StatusOr<std::shared_ptr<const router::Policy>> LoadPolicyFile(
    const std::string& path, std::vector<PolicyError>* errors);

}  // namespace tandem::policies
