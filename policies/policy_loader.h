#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "policies/yaml_reader.h"
#include "router/policy.h"

namespace tandem::policies {

// Parses and validates a policy (schema: policies/README.md). Every error found is appended to
// `errors`, not just the first; on any error the result is INVALID_ARGUMENT whose message lists
// them all, one per line. `file` only labels the errors.
absl::StatusOr<std::shared_ptr<const router::Policy>> ParsePolicy(const std::string& text,
                                                                  const std::string& file,
                                                                  std::vector<PolicyError>* errors);

// Reads `path` and parses it; when the file cannot be read, the status of ReadFileToString
// (common/file.h: NOT_FOUND, PERMISSION_DENIED, ... with the system's reason).
absl::StatusOr<std::shared_ptr<const router::Policy>> LoadPolicyFile(
    const std::string& path, std::vector<PolicyError>* errors);

}  // namespace tandem::policies
