#pragma once

#include "absl/status/statusor.h"
#include "policies/policy_loader.h"
#include "policies/tenant_config.h"

namespace tandem::policies {

// PolicyLimits from --max_policy_bytes, --max_policy_yaml_nodes, --max_policy_rules,
// --max_rule_conditions and --max_classifier_bytes; an error names a flag out of range. The
// gateway and tandemctl share the flags, so that `tandemctl policy lint` judges a file as the
// gateway will.
absl::StatusOr<PolicyLimits> PolicyLimitsFromFlags();

// TenantsFileLimits from --max_tenants_bytes, --max_tenants_yaml_nodes and --max_tenants.
absl::StatusOr<TenantsFileLimits> TenantsFileLimitsFromFlags();

}  // namespace tandem::policies
