#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/intake/reload_loop.h"
#include "gateway/intake/token_bucket.h"
#include "gateway/metrics/gateway_metrics.h"
#include "policies/tenant_config.h"

namespace tandem::gateway {

// One tenant's live quota state: its request and token buckets and its requests in flight. It
// survives reloads of the tenants file (same name: same state, new limits), so an edit never
// hands a tenant a fresh burst. Thread-safe.
class TenantState {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  TenantState(std::string name, GatewayMetrics::Tenant metrics)
      : name_(std::move(name)), metrics_(metrics) {}

  const std::string& name() const { return name_; }
  GatewayMetrics::Tenant& metrics() { return metrics_; }
  std::shared_ptr<const policies::TenantSpec> spec() const ABSL_LOCKS_EXCLUDED(mu_);
  void SetSpec(std::shared_ptr<const policies::TenantSpec> spec, TimePoint now)
      ABSL_LOCKS_EXCLUDED(mu_);

  struct Refusal {
    // "concurrency", "requests" or "tokens": the throttled metric's reason label.
    const char* reason;
    std::string message;
    double retry_after_seconds;
  };
  // Admits a request that reserves `tokens` (prompt estimate + max_tokens), or says which limit
  // refused it and when to retry. On admission the request counts as in flight until Release.
  std::optional<Refusal> TryAdmit(int64_t tokens, TimePoint now) ABSL_LOCKS_EXCLUDED(mu_);
  // The admitted request ended; `unused_tokens` of its reservation go back to the bucket.
  void Release(int64_t unused_tokens) ABSL_LOCKS_EXCLUDED(mu_);
  int inflight() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string name_;
  GatewayMetrics::Tenant metrics_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const policies::TenantSpec> spec_ ABSL_GUARDED_BY(mu_);
  TokenBucket requests_ ABSL_GUARDED_BY(mu_);
  TokenBucket tokens_ ABSL_GUARDED_BY(mu_);
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
};

struct TenantRegistryOptions {
  // Requests without a key are served (as tenant "anonymous": the file's entry of that name
  // when it has one, else unlimited). Unknown keys are refused regardless.
  bool allow_unauthenticated = false;
  // Distinct tenant label values on metrics over the process's life; tenants beyond it share
  // the label "other".
  int max_tenant_labels = 64;
  // Models the gateway serves, for validating the file's `models:`.
  std::set<std::string> models;
  // What the file may hold (--max_tenants_bytes, ...); a reload of a file over them is refused.
  policies::TenantsFileLimits file_limits;
};

// The names of the tenants with admin: true, comma-separated; empty when none has it.
std::string AdminNames(const policies::TenantConfig& config);

// The rights a tenants file may hand out, beyond what it may say (ParseTenantConfig), for `path`
// to replace `live` (null at start-up). INVALID_ARGUMENT when `anonymous` has admin: true (under
// --allow_unauthenticated every keyless caller would be an admin); FAILED_PRECONDITION when
// `live` has an admin and `next` none, which would lock tandem.v1.Admin out with no way back but
// a restart. A gateway started with no admin may reload files with none (run without the API).
absl::Status CheckTenantRights(const policies::TenantConfig& next,
                               const policies::TenantConfig* live, const std::string& path);

// API keys -> tenants, from the tenants file (policies/tenant_config.h), reloaded when the file
// changes and on SIGHUP. Lookups take an immutable snapshot swapped atomically and never wait
// for a reload. An invalid file never replaces the live configuration: its errors are logged,
// returned and counted (tandem_gateway_tenants_reloads_total{result="error"}); so is a file over
// options.file_limits, read no further than the limit, and one CheckTenantRights refuses (Load
// and reloads alike).
class TenantRegistry {
 public:
  TenantRegistry(TenantRegistryOptions options, GatewayMetrics* metrics);
  ~TenantRegistry();

  // Loads `path` and applies it (start-up); later reloads read the same path.
  absl::Status Load(const std::string& path);
  // Applies a parsed configuration (null: no file, which needs allow_unauthenticated).
  void Apply(std::shared_ptr<const policies::TenantConfig> config) ABSL_LOCKS_EXCLUDED(mu_);
  // Re-reads the file and applies it if valid, on the calling thread. `trigger` is for the log.
  absl::Status Reload(const std::string& trigger) ABSL_LOCKS_EXCLUDED(reload_mu_);
  // Starts the reload thread (after Load): it re-reads the file every `interval`, applying it
  // when its content changed, and serves ReloadAsync.
  void Watch(absl::Duration interval) { loop_.Start(interval); }
  // Queues a reload on the reload thread; `done` (may be empty) gets its result there.
  void ReloadAsync(std::string trigger, std::function<void(absl::Status)> done) {
    loop_.Enqueue(std::move(trigger), std::move(done));
  }
  void Stop() { loop_.Stop(); }
  // What the reload thread does every interval: re-reads the file and applies it when its content
  // changed; a file that fails is reported once per change. Public for tests, which call it
  // instead of waiting for the thread.
  void CheckFile() ABSL_LOCKS_EXCLUDED(reload_mu_);

  struct Caller {
    std::shared_ptr<TenantState> tenant;
    std::shared_ptr<const policies::TenantSpec> spec;
  };
  // The tenant of an API key (empty: no key given). UNAUTHENTICATED for a missing key (unless
  // allowed) and for a key no tenant has.
  absl::StatusOr<Caller> Authenticate(const std::string& api_key) const;

  // Whether a tenants file is in force.
  bool enabled() const;

  // The live configuration, for the admin API.
  struct TenantInfo {
    std::shared_ptr<const policies::TenantSpec> spec;
    int keys = 0;
    int inflight = 0;
  };
  struct Live {
    std::string path;                 // empty without a file
    std::string sha256;               // of the live file
    std::vector<TenantInfo> tenants;  // the file's order, then anonymous when allowed
    bool allow_unauthenticated = false;
  };
  Live Describe() const;

 private:
  struct Snapshot {
    std::shared_ptr<const policies::TenantConfig> config;
    std::vector<std::shared_ptr<TenantState>> states;  // parallel to config->tenants
    std::vector<std::shared_ptr<const policies::TenantSpec>> specs;
    std::shared_ptr<TenantState> anonymous;
    std::shared_ptr<const policies::TenantSpec> anonymous_spec;
  };
  std::shared_ptr<TenantState> StateFor(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parses `text` (the file's bytes as read once) and applies it if valid.
  absl::Status ReloadText(const std::string& text, const std::string& trigger)
      ABSL_LOCKS_EXCLUDED(reload_mu_);

  const TenantRegistryOptions options_;
  GatewayMetrics* const metrics_;
  std::atomic<std::shared_ptr<const Snapshot>> snapshot_;
  absl::Mutex mu_;  // serialises Apply
  std::map<std::string, std::shared_ptr<TenantState>> states_ ABSL_GUARDED_BY(mu_);
  absl::Mutex reload_mu_;  // serialises reloads; held through file I/O and parsing
  std::string path_;       // set by Load, before the reload thread starts
  // Reported once per change.
  std::string last_failed_sha_ ABSL_GUARDED_BY(reload_mu_);
  // The FileStamp of the last file over the limit.
  std::string last_over_limit_ ABSL_GUARDED_BY(reload_mu_);
  ReloadLoop loop_;  // last: its thread uses the members above
};

}  // namespace tandem::gateway
