#pragma once

#include "absl/status/statusor.h"
#include "workers/worker_config.h"

namespace tandem::workers {

// The worker's configuration from its command-line flags (defined in worker_flags.cc, listed in
// docs/configuration.md) and the shared ones (--tls_*, --metrics_*, request limits). Errors in
// reading files (TLS) or naming the engine come back here; range checks are
// WorkerConfig::Validate's.
absl::StatusOr<WorkerConfig> WorkerConfigFromFlags();

}  // namespace tandem::workers
