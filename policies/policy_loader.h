#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "policies/yaml_reader.h"
#include "router/policy.h"

namespace tandem::policies {

// What a policy may hold, so that a policy file (or a file swapped in under its path) cannot
// take a reload's time and memory without bound. The defaults are the gateway's and tandemctl's
// flags' (policies/limit_flags.h), far above what real policies use; errors name the flag.
struct PolicyLimits {
  // Bytes of the policy file (--max_policy_bytes).
  int64_t max_file_bytes = int64_t{4} << 20;
  // YAML nodes, an alias counted again at each use (--max_policy_yaml_nodes); see LoadYaml.
  int64_t max_yaml_nodes = 100000;
  // Entries of `rules`, and of `classify` (--max_policy_rules).
  int32_t max_rules = 1000;
  // Tests in one rule's or classify entry's `when`: fields, each operator of a field, and the
  // fields of every `any` alternative (--max_rule_conditions).
  int32_t max_conditions = 64;
  // Bytes of the classifier model file (--max_classifier_bytes).
  int64_t max_classifier_bytes = int64_t{64} << 20;
};

// Parses and validates a policy (schema: policies/README.md). Every error found is appended to
// `errors`, not just the first; on any error the result is INVALID_ARGUMENT whose message lists
// them all, one per line. `file` only labels the errors. Every limit applies: `text` itself is
// held to max_file_bytes, and the classifier model the policy names is read with at most
// max_classifier_bytes.
absl::StatusOr<std::shared_ptr<const router::Policy>> ParsePolicy(
    const std::string& text, const std::string& file, std::vector<PolicyError>* errors,
    const PolicyLimits& limits = PolicyLimits());

// Reads `path` (at most limits.max_file_bytes) and parses it; when the file cannot be read, the
// status of ReadFileToString (common/file.h: NOT_FOUND, PERMISSION_DENIED, ... with the system's
// reason; RESOURCE_EXHAUSTED over the limit).
absl::StatusOr<std::shared_ptr<const router::Policy>> LoadPolicyFile(
    const std::string& path, std::vector<PolicyError>* errors,
    const PolicyLimits& limits = PolicyLimits());

}  // namespace tandem::policies
