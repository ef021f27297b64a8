#pragma once

#include "absl/status/statusor.h"
#include "gateway/config.h"

namespace tandem::gateway {

// The gateway's configuration from its command-line flags (defined in gateway_flags.cc, listed
// in docs/configuration.md) and the shared ones (--tls_*, --metrics_*, limits of requests, the
// policy and tenants files). Errors reading files (TLS) or parsing flag values come back here;
// range checks are GatewayConfig::Validate's.
absl::StatusOr<GatewayConfig> GatewayConfigFromFlags();

}  // namespace tandem::gateway
