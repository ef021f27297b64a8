#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::policies {

// Rates are per second and 0 means unlimited. Bursts are bucket sizes; 0 picks one second of
// the rate (at least 1 request).
struct TenantLimits {
  double requests_per_second = 0;
  double burst_requests = 0;
  // Tokens are the prompt (estimated at admission) plus max_tokens, reserved when a request is
  // admitted; what the request did not use is given back when it ends.
  double tokens_per_second = 0;
  double burst_tokens = 0;
  // Requests in flight or queued at the gateway at once.
  int32_t max_concurrency = 0;
  // Thinking tokens per request, whatever the caller or the policy asks (0: no cap). A request
  // with thinking off stays off.
  int32_t max_thinking_tokens = 0;
};

struct TenantSpec {
  // [a-z0-9_-], 1-64 characters; also the tenant label on metrics.
  std::string name;
  // SHA-256 of each API key, 64 lowercase hex digits: the keys themselves are never stored.
  std::vector<std::string> key_sha256;
  // Models this tenant may use; empty means all.
  std::set<std::string> models;
  // May call tandem.v1.Admin (policy and tenants reloads and listings, endpoints, signals).
  bool admin = false;
  // Share of the gateway's dispatch slots when they are contended, relative to other tenants
  // (1-100): a tenant with priority 4 is served four requests for every one of a tenant with 1.
  int32_t priority = 1;
  TenantLimits limits;
};

// A tenants file, parsed and validated. Immutable once built; reloads build a new one.
struct TenantConfig {
  std::vector<TenantSpec> tenants;
  // SHA-256 hex of a key -> index into `tenants`.
  std::map<std::string, size_t> by_key;
  // SHA-256 of the file's bytes, for logs and reload detection.
  std::string sha256;

  // The tenant named "anonymous", which takes requests without a key under
  // --allow_unauthenticated; null when the file defines none.
  const TenantSpec* Anonymous() const;
};

// What a tenants file may hold, so that it (or a file swapped in under its path) cannot take a
// reload's time and memory without bound. The defaults are the gateway's and tandemctl's flags'
// (policies/limit_flags.h), far above real use; errors name the flag.
struct TenantsFileLimits {
  // Bytes of the file (--max_tenants_bytes).
  int64_t max_file_bytes = int64_t{16} << 20;
  // YAML nodes, an alias counted again at each use (--max_tenants_yaml_nodes); see LoadYaml.
  int64_t max_yaml_nodes = 1000000;
  // Entries of `tenants` (--max_tenants).
  int32_t max_tenants = 10000;
};

// Parses the YAML of a tenants file:
//   tenants:
//     - name: search
//       keys: [sha256:<64 hex>]       # `tandemctl hash-key` prints it
//       models: [qwen, nemotron]      # optional; all when absent
//       admin: false                  # optional
//       priority: 2                   # optional, 1-100
//       limits: {requests_per_second: 50, burst_requests: 100, tokens_per_second: 20000,
//                burst_tokens: 40000, max_concurrency: 16}
// Every mistake is an error naming FILE:LINE: unknown keys, duplicate names or keys, bad hashes,
// out-of-range numbers, models not in `known_models` (when it is not empty), and a file over
// `limits`.
absl::StatusOr<std::shared_ptr<const TenantConfig>> ParseTenantConfig(
    const std::string& text, const std::string& path, const std::set<std::string>& known_models,
    const TenantsFileLimits& limits = TenantsFileLimits());
// Reads `path` (at most limits.max_file_bytes: RESOURCE_EXHAUSTED past it, common/file.h) and
// parses it.
absl::StatusOr<std::shared_ptr<const TenantConfig>> LoadTenantFile(
    const std::string& path, const std::set<std::string>& known_models,
    const TenantsFileLimits& limits = TenantsFileLimits());

// INVALID_ARGUMENT (prefixed "PATH: ") when `anonymous` has admin: true: under
// --allow_unauthenticated every caller without a key would be an admin. The gateway applies it
// at start-up and on every reload, `tandemctl tenants lint` offline.
absl::Status CheckAnonymousIsNotAdmin(const TenantConfig& config, const std::string& path);

// An API key as a tenants file lists it: "sha256:" and the key's SHA-256 in hex.
std::string TenantKeyEntry(const std::string& api_key);

}  // namespace tandem::policies
