#include "gateway/config.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gateway/http_front/cors_policy.h"

namespace tandem::gateway {
namespace {

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

absl::Status ValidateTransport(const GatewayConfig& c) {
  if (c.server_credentials == nullptr)
    return Invalid("no server credentials (--tls_* or --plaintext)");
  if (c.grpc_memory_limit < 0) return Invalid("--grpc_memory_limit must be >= 0");
  if (c.grpc_receive_headroom_bytes < 0) {
    return Invalid("--grpc_receive_headroom_bytes must be >= 0");
  }
  if (c.max_connection_age < absl::ZeroDuration()) {
    return Invalid("--max_connection_age must be >= 0");
  }
  const HttpServerOptions& h = c.http;
  if (h.threads < 1 || h.threads > 64) return Invalid("--http_threads must be in [1, 64]");
  if (absl::Status s = CorsPolicy::Create(c.http_cors_origins).status(); !s.ok()) return s;
  if (h.max_connections < 1 || h.max_connections > 1000000) {
    return Invalid("--http_max_connections must be in [1, 1000000]");
  }
  if (h.max_header_bytes < 1024 || h.max_header_bytes > (1 << 20)) {
    return Invalid("--http_max_header_bytes must be in [1024, 1048576]");
  }
  if (h.read_timeout < absl::Milliseconds(100) || h.write_timeout < absl::Milliseconds(100) ||
      h.idle_timeout < absl::Milliseconds(100)) {
    return Invalid(
        "--http_read_timeout, --http_idle_timeout and --http_write_timeout must be >= 100ms");
  }
  const TlsFiles& t = c.worker_tls;
  const bool any_tls = !t.ca.empty() || !t.cert.empty() || !t.key.empty();
  if (c.worker_plaintext && any_tls) {
    return Invalid("--worker_plaintext and --worker_tls_* contradict each other; choose one");
  }
  if (!c.worker_plaintext && (t.ca.empty() || t.cert.empty() || t.key.empty())) {
    return Invalid(
        "workers are called over mutual TLS: give --worker_tls_ca, --worker_tls_cert and "
        "--worker_tls_key, or an explicit --worker_plaintext");
  }
  return absl::OkStatus();
}

absl::Status ValidatePools(const WorkerPoolsOptions& p) {
  if (p.probe_interval <= absl::ZeroDuration())
    return Invalid("--worker_probe_interval must be > 0");
  if (p.probe_timeout <= absl::ZeroDuration() || p.probe_timeouts < 1) {
    return Invalid("--worker_probe_timeout must be > 0 and --worker_probe_timeouts >= 1");
  }
  if (p.dns_interval < absl::Milliseconds(100)) return Invalid("--dns_interval must be >= 100ms");
  const EndpointOptions& e = p.endpoint;
  if (e.failure_threshold < 1 || e.internal_error_threshold < 1 || e.stall_threshold < 1) {
    return Invalid(
        "--eject_after_failures, --eject_after_internal_errors and --eject_after_stalls must be "
        ">= 1");
  }
  if (e.base_ejection <= absl::ZeroDuration() || e.max_ejection < e.base_ejection) {
    return Invalid("--base_ejection must be > 0 and <= --max_ejection");
  }
  return absl::OkStatus();
}

absl::Status ValidateSignals(const SignalEngineOptions& s, absl::Duration watch) {
  if (s.scrape_interval < absl::Milliseconds(100))
    return Invalid("--scrape_interval must be >= 100ms");
  if (s.scrape_timeout <= absl::ZeroDuration() || s.promql_timeout <= absl::ZeroDuration()) {
    return Invalid("--scrape_timeout and --promql_timeout must be > 0");
  }
  if (watch < absl::Milliseconds(10) || watch > absl::Hours(24)) {
    return Invalid("--policy_watch_interval must be between 10ms and 24h");
  }
  return absl::OkStatus();
}

absl::Status ValidateRequests(const IntakeOptions& i, const DispatchOptions& s) {
  if (i.limits.max_labels < 0 || i.limits.max_label_bytes < 1) {
    return Invalid("--max_labels must be >= 0 and --max_label_bytes >= 1");
  }
  if (i.max_prompt_tokens < 0 || i.max_tokens_limit < 0) {
    return Invalid("--max_prompt_tokens and --max_tokens_limit must be >= 0");
  }
  if (i.max_request_bytes < 1024) return Invalid("--max_request_bytes must be >= 1024");
  if (i.default_max_tokens < 1) return Invalid("--default_max_tokens must be >= 1");
  if (s.shadow_timeout <= absl::ZeroDuration()) return Invalid("--shadow_timeout must be > 0");
  if (s.worker_deadline_offset < absl::ZeroDuration()) {
    return Invalid("--worker_deadline_offset must be >= 0");
  }
  if (s.deadline_cancel_window < absl::ZeroDuration()) {
    return Invalid("--deadline_cancel_window must be >= 0");
  }
  if (s.default_deadline <= absl::ZeroDuration()) return Invalid("--default_deadline must be > 0");
  if (s.max_attempts < 1) return Invalid("--max_attempts must be >= 1");
  if (!(s.retry_budget_ratio >= 0 && s.retry_budget_ratio <= 1) || s.retry_budget_min < 0) {
    return Invalid("--retry_budget_ratio must be in [0, 1] and --retry_budget_min >= 0");
  }
  if (s.stall_timeout_min < absl::ZeroDuration() || !(s.stall_timeout_multiple >= 1)) {
    return Invalid("--stall_timeout_min must be >= 0 and --stall_timeout_multiple >= 1");
  }
  if (s.max_queue_wait <= absl::ZeroDuration() || s.max_stream_duration <= absl::ZeroDuration()) {
    return Invalid("--max_queue_wait and --max_stream_duration must be > 0");
  }
  return absl::OkStatus();
}

absl::Status ValidateTenancy(const GatewayConfig& c) {
  if (c.tenants_path.empty() && !c.tenants.allow_unauthenticated) {
    return Invalid(
        "give --tenants=FILE (API keys and quotas), or --allow_unauthenticated to serve "
        "everyone without a key");
  }
  if (c.tenants.max_tenant_labels < 1) return Invalid("--max_tenant_labels must be >= 1");
  if (c.queue.max_inflight < 0 || c.queue.max_queued_per_tenant < 0) {
    return Invalid("--max_inflight and --max_queued must be >= 0");
  }
  if (c.dispatch_headroom < -1) return Invalid("--dispatch_headroom must be >= -1");
  if (!c.decision_log_path.empty() && c.decision_log_queue < 1) {
    return Invalid("--decision_log_queue must be >= 1");
  }
  if (c.drain_timeout < absl::ZeroDuration() || c.drain_quiet_period < absl::ZeroDuration()) {
    return Invalid("--drain_timeout and --drain_quiet_period must be >= 0");
  }
  if (c.sessions.ttl < std::chrono::seconds(1) || c.sessions.ttl > std::chrono::hours(24 * 30)) {
    return Invalid("--session_ttl must be between 1s and 720h");
  }
  if (c.sessions.max_sessions < 0) return Invalid("--max_sessions must be >= 0");
  if (!(c.exact_token_band > 0 && c.exact_token_band <= 10)) {
    return Invalid("--exact_token_band must be in (0, 10]");
  }
  if (!c.session_key.empty() && c.session_key.size() < SessionToken::kMinKeyBytes) {
    return Invalid(absl::StrCat("--session_key_file must hold at least ",
                                SessionToken::kMinKeyBytes, " bytes of secret"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GatewayConfig::Validate() const {
  for (const absl::Status& s : {ValidateTransport(*this), ValidatePools(pools),
                                ValidateSignals(signals, policy_watch_interval),
                                ValidateRequests(intake, dispatch), ValidateTenancy(*this)}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<std::string> GatewayConfig::LimitWarnings() const {
  std::vector<std::string> out;
  const int64_t request = intake.max_request_bytes;
  const int64_t image = intake.limits.max_image_bytes;
  if (image > request) {
    out.push_back(absl::StrCat("--max_image_bytes (", image, ") exceeds --max_request_bytes (",
                               request, "): no request can carry an image that large"));
  } else if (!http_listen.empty() && 4 * ((image + 2) / 3) > request) {
    // An HTTP body carries images as base64 data: URLs, 4 bytes for every 3.
    out.push_back(absl::StrCat("--max_image_bytes (", image, ") is ", 4 * ((image + 2) / 3),
                               " bytes as base64, over --max_request_bytes (", request,
                               "): the HTTP front cannot carry an image that large"));
  }
  return out;
}

int GatewayConfig::GrpcReceiveLimit() const {
  return static_cast<int>(std::min<int64_t>(intake.max_request_bytes + grpc_receive_headroom_bytes,
                                            std::numeric_limits<int>::max()));
}

}  // namespace tandem::gateway
