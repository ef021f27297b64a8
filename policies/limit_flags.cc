#include "policies/limit_flags.h"

#include <initializer_list>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

// Defaults come from the structs so that the flags and the library cannot disagree.
ABSL_FLAG(int64_t, max_policy_bytes, tandem::policies::PolicyLimits{}.max_file_bytes,
          "Largest policy file (--policy), in bytes; a larger one is refused (a reload keeps the "
          "live policy).");
ABSL_FLAG(int64_t, max_policy_yaml_nodes, tandem::policies::PolicyLimits{}.max_yaml_nodes,
          "Most YAML nodes in a policy file, each alias counted as the nodes it names (nested "
          "anchors can make a small file stand for a huge tree).");
ABSL_FLAG(int32_t, max_policy_rules, tandem::policies::PolicyLimits{}.max_rules,
          "Most entries in a policy's rules, and in its classify list.");
ABSL_FLAG(int32_t, max_rule_conditions, tandem::policies::PolicyLimits{}.max_conditions,
          "Most tests in one rule's (or classify entry's) `when`: fields, operators and the "
          "fields of every `any` alternative.");
ABSL_FLAG(int64_t, max_classifier_bytes, tandem::policies::PolicyLimits{}.max_classifier_bytes,
          "Largest classifier model file a policy may name (classifier.model), in bytes.");
ABSL_FLAG(int64_t, max_tenants_bytes, tandem::policies::TenantsFileLimits{}.max_file_bytes,
          "Largest tenants file (--tenants), in bytes; a larger one is refused (a reload keeps "
          "the live tenants).");
ABSL_FLAG(int64_t, max_tenants_yaml_nodes, tandem::policies::TenantsFileLimits{}.max_yaml_nodes,
          "Most YAML nodes in the tenants file, each alias counted as the nodes it names.");
ABSL_FLAG(int32_t, max_tenants, tandem::policies::TenantsFileLimits{}.max_tenants,
          "Most tenants in the tenants file.");

namespace tandem::policies {
namespace {

absl::Status AllPositive(std::initializer_list<std::pair<const char*, int64_t>> checks) {
  for (const auto& [flag, value] : checks) {
    if (value < 1) return absl::InvalidArgumentError(absl::StrCat(flag, " must be >= 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PolicyLimits> PolicyLimitsFromFlags() {
  PolicyLimits l;
  l.max_file_bytes = absl::GetFlag(FLAGS_max_policy_bytes);
  l.max_yaml_nodes = absl::GetFlag(FLAGS_max_policy_yaml_nodes);
  l.max_rules = absl::GetFlag(FLAGS_max_policy_rules);
  l.max_conditions = absl::GetFlag(FLAGS_max_rule_conditions);
  l.max_classifier_bytes = absl::GetFlag(FLAGS_max_classifier_bytes);
  if (absl::Status s = AllPositive({{"--max_policy_bytes", l.max_file_bytes},
                                    {"--max_policy_yaml_nodes", l.max_yaml_nodes},
                                    {"--max_policy_rules", l.max_rules},
                                    {"--max_rule_conditions", l.max_conditions},
                                    {"--max_classifier_bytes", l.max_classifier_bytes}});
      !s.ok()) {
    return s;
  }
  return l;
}

absl::StatusOr<TenantsFileLimits> TenantsFileLimitsFromFlags() {
  TenantsFileLimits l;
  l.max_file_bytes = absl::GetFlag(FLAGS_max_tenants_bytes);
  l.max_yaml_nodes = absl::GetFlag(FLAGS_max_tenants_yaml_nodes);
  l.max_tenants = absl::GetFlag(FLAGS_max_tenants);
  if (absl::Status s = AllPositive({{"--max_tenants_bytes", l.max_file_bytes},
                                    {"--max_tenants_yaml_nodes", l.max_yaml_nodes},
                                    {"--max_tenants", l.max_tenants}});
      !s.ok()) {
    return s;
  }
  return l;
}

}  // namespace tandem::policies
