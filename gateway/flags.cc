// The flags of tandem-gateway and the GatewayConfig they make. Compiled into the binary only, so
// that libraries and tests do not carry these flags.
#include "gateway/flags.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file.h"
#include "common/limit_flags.h"
#include "common/server_tls_flags.h"
#include "common/status_macros.h"
#include "policies/limit_flags.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC address; port 0 picks a free port.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0",
          "Prometheus /metrics address; port 0 picks a free port.");
ABSL_FLAG(std::vector<std::string>, workers, {},
          "Worker endpoints as MODEL=HOST:PORT, comma-separated; repeat a model for replicas.");
ABSL_FLAG(std::string, policy, "",
          "Routing policy YAML (policies/README.md); empty uses the built-in rules below. "
          "Reloaded on SIGHUP and when the file changes.");
ABSL_FLAG(absl::Duration, policy_watch_interval, absl::Seconds(1),
          "How often the policy file and the --tenants file are checked for changes (10ms-24h).");
ABSL_FLAG(std::string, decision_log, "",
          "Append every routing decision's inputs (features and hints, not prompt text) to this "
          "JSON-lines file, for tandemctl policy replay.");
ABSL_FLAG(bool, decision_log_text, false, "Include the prompt text in --decision_log records.");
ABSL_FLAG(int64_t, decision_log_queue, 10000,
          "Records the decision-log writer may fall behind before new ones are dropped.");
ABSL_FLAG(absl::Duration, shadow_timeout, absl::Seconds(60),
          "Deadline of shadow copies (a policy's `shadow` action).");
ABSL_FLAG(std::string, default_model, "qwen", "Model for requests no rule claims.");
ABSL_FLAG(std::string, accuracy_model, "qwen", "Model for objective ACCURACY.");
ABSL_FLAG(std::string, latency_model, "nemotron", "Model for objective LATENCY.");
ABSL_FLAG(std::string, vision_model, "qwen", "Model for requests with images.");
ABSL_FLAG(std::string, long_context_model, "nemotron", "Model for prompts over the threshold.");
ABSL_FLAG(int64_t, long_context_tokens, 32768,
          "Prompts estimated above this many tokens go to --long_context_model.");
ABSL_FLAG(int32_t, default_max_tokens, 1024,
          "max_tokens for requests that set none (capped at the model's limit).");
ABSL_FLAG(int64_t, max_request_bytes, 32ll << 20,
          "Largest request accepted, in serialized bytes on gRPC and body bytes on the HTTP front "
          "(images there are base64, 4/3 larger); larger ones get INVALID_ARGUMENT (HTTP 413).");
ABSL_FLAG(int64_t, grpc_receive_headroom_bytes, 32ll << 20,
          "gRPC reads messages up to --max_request_bytes plus this, so that an oversized request "
          "gets INVALID_ARGUMENT naming --max_request_bytes; beyond it gRPC itself refuses with "
          "RESOURCE_EXHAUSTED before holding the bytes.");
ABSL_FLAG(int64_t, max_prompt_tokens, 1 << 20,
          "Largest prompt accepted, in estimated tokens (0: only the model's context limit).");
ABSL_FLAG(int32_t, max_tokens_limit, 0,
          "Largest sampling.max_tokens accepted (0: only the model's limit).");
ABSL_FLAG(bool, shared_prefix_cache, false,
          "Workers' prefix caches match a prompt against every tenant's earlier prompts (else only "
          "its own tenant's, so no tenant can learn from a faster answer that another's prompt is "
          "cached). Share only among tenants that trust each other.");
ABSL_FLAG(absl::Duration, max_connection_age, absl::Minutes(10),
          "Clients' connections are closed gracefully (GOAWAY) after this age, so they reconnect "
          "and re-resolve: a round_robin client behind a headless Service reaches replicas added "
          "since. Calls in flight may run on for --max_stream_duration. 0 disables it.");
ABSL_FLAG(absl::Duration, stall_timeout_min, absl::Seconds(5),
          "A stream whose worker sends no token for this long (or --stall_timeout_multiple times "
          "its mean time per token, when longer) fails over mid-answer and counts against the "
          "worker, which is ejected like one whose calls fail. Keep it above the longest pause a "
          "healthy worker makes (a long prompt's prefill runs between decode steps). 0 turns "
          "stall detection off.");
ABSL_FLAG(double, stall_timeout_multiple, 20,
          "See --stall_timeout_min: the stall timeout in units of the stream's mean time per "
          "token so far.");
ABSL_FLAG(bool, expose_worker_addresses, false,
          "Show worker addresses (RouteInfo.worker, Recovery) to every tenant; without it only "
          "admin tenants see them (every caller does when there are no tenants).");
ABSL_FLAG(absl::Duration, max_stream_duration, absl::Hours(1),
          "Longest a generation (unary or stream) may run, whatever deadline the caller set.");
ABSL_FLAG(int64_t, grpc_memory_limit, 2ll << 30,
          "Bytes gRPC may hold for client connections and calls; past it, gRPC stops reading "
          "from clients rather than grow (0: gRPC's default, unbounded).");
ABSL_FLAG(std::string, worker_tls_ca, "",
          "PEM roots that sign the workers' certificates (mutual TLS to the workers).");
ABSL_FLAG(std::string, worker_tls_cert, "",
          "PEM client certificate the gateway presents to workers.");
ABSL_FLAG(std::string, worker_tls_key, "", "PEM private key of --worker_tls_cert.");
ABSL_FLAG(std::string, worker_tls_server_name, "",
          "Name the workers' certificates carry, when not the host in their address.");
ABSL_FLAG(bool, worker_plaintext, false,
          "Call workers without TLS (loopback development and tests only).");
ABSL_FLAG(std::string, tenants, "",
          "Tenants file (API key hashes, models, quotas, priorities); reloaded on SIGHUP and when "
          "it changes.");
ABSL_FLAG(std::string, tokenizer, "",
          "A model's tokenizer.json: prompts whose estimated size is near a threshold (a policy's "
          "prompt_tokens condition, --max_prompt_tokens, a tenant's burst_tokens) are counted "
          "exactly with it. Empty: sizes are estimated (about 15% error, up to 150%).");
ABSL_FLAG(double, exact_token_band, 0.5,
          "With --tokenizer: an estimate within this fraction of a threshold T (|estimate - T| <= "
          "band x T) is counted exactly (0-10].");
ABSL_FLAG(absl::Duration, session_ttl, absl::Minutes(30),
          "A session not seen for this long is forgotten; also the lifetime of its route token "
          "(1s-720h).");
ABSL_FLAG(int64_t, max_sessions, 100000,
          "Sessions this replica remembers (least recently used forgotten first; about 160 bytes "
          "plus the id's bytes each). 0: no table, only route tokens keep sessions.");
ABSL_FLAG(std::string, session_key_file, "",
          "File holding the secret (>= 32 bytes) that signs session route tokens. Give every "
          "replica the same file so that any of them honours a session; without one each replica "
          "signs with its own random key.");
ABSL_FLAG(bool, allow_unauthenticated, false,
          "Serve requests without an API key as tenant 'anonymous' (unlimited unless the tenants "
          "file defines it). Without --tenants this is required and everyone is anonymous.");
ABSL_FLAG(int32_t, max_labels, tandem::RequestLimits{}.max_labels,
          "Most labels on one request (>= 0).");
ABSL_FLAG(int32_t, max_label_bytes, tandem::RequestLimits{}.max_label_bytes,
          "Longest label key or value, in bytes (>= 1).");
ABSL_FLAG(int32_t, max_tenant_labels, 64,
          "Distinct tenant label values on metrics; further tenants share 'other'.");
ABSL_FLAG(int32_t, max_inflight, 1024,
          "Generations dispatched to one model's workers at once, at most (lowered to what its "
          "usable workers take, see --dispatch_headroom); the rest wait, shared fairly by "
          "tenant priority (0: no limit, no queue).");
ABSL_FLAG(int32_t, dispatch_headroom, 2,
          "Requests dispatched to a worker beyond its batch (max_batch_size, from GetInfo): the "
          "rest wait in the gateway's fair queue, where tenants take turns, so a flooding tenant's "
          "backlog never sits in a worker's FIFO in front of other tenants. -1: the worker's own "
          "max_queue (tenants take turns only once the worker's queue is full). Policies see "
          "the gateway's queue as `gateway` signals (policies/README.md).");
ABSL_FLAG(int32_t, max_queued, 256, "Requests one tenant may have waiting for a dispatch slot.");
ABSL_FLAG(absl::Duration, max_queue_wait, absl::Seconds(10),
          "Longest wait for a dispatch slot before RESOURCE_EXHAUSTED.");
ABSL_FLAG(absl::Duration, worker_probe_interval, absl::Milliseconds(100),
          "How often every worker endpoint gets an active health probe (grpc.health.v1 Check, "
          "then GetInfo).");
ABSL_FLAG(absl::Duration, worker_probe_timeout, absl::Seconds(1),
          "Deadline of each probe RPC. A worker that refuses connections is not ready at once; "
          "one whose probes only time out stays ready until --worker_probe_timeouts in a row.");
ABSL_FLAG(int32_t, worker_probe_timeouts, 3,
          "Probe timeouts in a row that make a ready worker not ready.");
ABSL_FLAG(absl::Duration, dns_interval, absl::Seconds(5),
          "How often dns:///HOST:PORT worker endpoints are re-resolved.");
ABSL_FLAG(std::string, endpoint_pick, "least_outstanding",
          "How a model's worker is chosen: least_outstanding (fewest calls in flight from this "
          "gateway), power_of_two (two at random, the less loaded by scraped queue depth), "
          "round_robin (each in turn; a baseline) or prefix (the one this gateway last sent the "
          "prompt's longest prefix to, so its prefix "
          "cache holds it, unless that one is more than --prefix_pick_max_imbalance busier than "
          "the least loaded). Per model: MODEL=RULE entries, comma-separated, after a default "
          "(\"least_outstanding,qwen=prefix\").");
ABSL_FLAG(int64_t, prefix_pick_max_imbalance, 4,
          "--endpoint_pick=prefix: a worker with more than this many requests (its scraped queue "
          "plus this gateway's calls in flight) beyond the least loaded is passed over whatever "
          "its cache holds.");
ABSL_FLAG(int64_t, prefix_pick_min_tokens, 32,
          "--endpoint_pick=prefix: a smaller expected prefix hit (estimated tokens) is no reason "
          "to prefer a worker; the least loaded is picked.");
ABSL_FLAG(int64_t, prefix_index_entries, 1 << 18,
          "--endpoint_pick=prefix: (prefix, worker) pairs each model's pool remembers (about 100 "
          "bytes each); the least recently sent go first.");
ABSL_FLAG(int32_t, eject_after_failures, 3,
          "Consecutive failed calls (UNAVAILABLE, transport errors, worker timeouts) that eject "
          "an endpoint.");
ABSL_FLAG(int32_t, eject_after_stalls, 2,
          "Consecutive stalled streams (no token within the stall timeout, --stall_timeout_min) "
          "that eject an endpoint.");
ABSL_FLAG(int32_t, eject_after_internal_errors, 5,
          "Consecutive INTERNAL errors that eject an endpoint.");
ABSL_FLAG(absl::Duration, base_ejection, absl::Milliseconds(200),
          "First ejection time; doubled on each re-ejection from half-open, up to --max_ejection.");
ABSL_FLAG(absl::Duration, max_ejection, absl::Milliseconds(800), "Longest ejection time.");
ABSL_FLAG(absl::Duration, scrape_interval, absl::Milliseconds(250),
          "How often every worker's /metrics is scraped for routing signals (>= 100ms).");
ABSL_FLAG(absl::Duration, scrape_timeout, absl::Milliseconds(500), "Timeout of one scrape.");
ABSL_FLAG(std::string, prometheus_url, "",
          "Prometheus server whose HTTP API PromQL signals query, e.g. http://127.0.0.1:9090.");
ABSL_FLAG(absl::Duration, promql_timeout, absl::Seconds(1), "Timeout of one PromQL query.");
ABSL_FLAG(absl::Duration, default_deadline, absl::Seconds(300),
          "Deadline of worker calls for requests that carry none.");
ABSL_FLAG(absl::Duration, worker_deadline_offset, absl::Milliseconds(20),
          "Workers are told to stop this long before a request's deadline, so that their end of "
          "stream (usage, finish reason) reaches the caller before the deadline passes there; "
          "more than the gateway-to-caller latency.");
ABSL_FLAG(absl::Duration, deadline_cancel_window, absl::Milliseconds(100),
          "A caller's cancel that reaches the gateway within this long of the caller's deadline "
          "is counted (metrics, logs) as DEADLINE_EXCEEDED, as the caller saw it: more than the "
          "caller-to-gateway latency when the call starts.");
ABSL_FLAG(int32_t, max_attempts, 3,
          "Attempts per request, the first included (retries, mid-stream failovers, hedges).");
ABSL_FLAG(double, retry_budget_ratio, 0.2,
          "Retries over any 10 s at most this fraction of the requests started in them, and "
          "hedges in flight at most this fraction of active requests (0-1)...");
ABSL_FLAG(int32_t, retry_budget_min, 3, "...or this many, whichever is larger.");
ABSL_FLAG(absl::Duration, drain_quiet_period, absl::Milliseconds(200),
          "After the drain, the gateway keeps answering new calls UNAVAILABLE until none came for "
          "this long (within --drain_timeout), then stops; a call that arrives as it stops gets "
          "CANCELLED from gRPC instead.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM/SIGINT, how long in-flight requests may take to finish.");
ABSL_FLAG(std::string, http_listen, "",
          "HOST:PORT of the OpenAI-compatible HTTP front (POST /v1/chat/completions, GET "
          "/v1/models); empty: off. HTTPS with the gRPC port's --tls_cert/--tls_key (and, with "
          "--tls_client_ca, client certificates required) unless --plaintext.");
ABSL_FLAG(std::vector<std::string>, http_cors_origins, {},
          "Comma-separated web origins (scheme://host[:port], or * for any) whose browser pages "
          "may call the HTTP front: CORS preflights are answered and answers carry "
          "Access-Control-Allow-Origin for them. Empty: CORS off.");
ABSL_FLAG(int32_t, http_threads, 2, "Threads running the HTTP front's connections (1-64).");
ABSL_FLAG(int32_t, http_max_connections, 1024,
          "HTTP connections open at once (tandem_gateway_http_connections); one beyond it closes "
          "a connection lingering after its last answer, else the one idle the longest (kept "
          "alive between requests), or with none idle is answered 503 and closed "
          "(tandem_gateway_http_connections_refused_total).");
ABSL_FLAG(int32_t, http_max_header_bytes, 16 << 10,
          "Bytes of one HTTP request's line and headers (431 beyond); its body is bounded by "
          "--max_request_bytes (413 beyond).");
ABSL_FLAG(absl::Duration, http_read_timeout, absl::Seconds(30),
          "The most an HTTP client may take to deliver a whole request, from the connection's "
          "accept (TLS handshake included) or a later request's first byte; one that stalls "
          "mid-request is answered 408 and closed.");
ABSL_FLAG(absl::Duration, http_idle_timeout, absl::Seconds(60),
          "The most a kept-alive HTTP connection may wait for the first byte of its next "
          "request after an answer; it is closed then.");
ABSL_FLAG(absl::Duration, http_write_timeout, absl::Seconds(30),
          "The most one write to an HTTP client may take; a client that stopped reading is cut "
          "off and its request cancelled.");

namespace tandem::gateway {
namespace {

absl::StatusOr<PickStrategy> ParsePickRule(absl::string_view rule) {
  absl::StatusOr<PickStrategy> s = ParsePickStrategy(rule);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--endpoint_pick: ", s.status().message()));
  }
  return s;
}

// "RULE" or "RULE,MODEL=RULE,...".
absl::Status ParseEndpointPick(absl::string_view flag, WorkerPoolsOptions* p) {
  bool first = true;
  for (absl::string_view entry : absl::StrSplit(flag, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t eq = entry.find('=');
    if (first && eq == absl::string_view::npos) {
      ASSIGN_OR_RETURN(p->pick, ParsePickRule(entry));
    } else if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--endpoint_pick: '", entry,
                       "' is not MODEL=RULE (only the first entry may be a "
                       "bare rule)"));
    } else {
      ASSIGN_OR_RETURN(p->pick_per_model[std::string(entry.substr(0, eq))],
                       ParsePickRule(entry.substr(eq + 1)));
    }
    first = false;
  }
  return absl::OkStatus();
}

absl::Status ReadHttp(GatewayConfig& c) {
  c.http_listen = absl::GetFlag(FLAGS_http_listen);
  c.http_cors_origins = absl::GetFlag(FLAGS_http_cors_origins);
  c.http.threads = absl::GetFlag(FLAGS_http_threads);
  c.http.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  c.http.max_header_bytes = absl::GetFlag(FLAGS_http_max_header_bytes);
  c.http.read_timeout = absl::GetFlag(FLAGS_http_read_timeout);
  c.http.idle_timeout = absl::GetFlag(FLAGS_http_idle_timeout);
  c.http.write_timeout = absl::GetFlag(FLAGS_http_write_timeout);
  c.http.tls = ServerTlsFilesFromFlags();
  return absl::OkStatus();
}

absl::Status ReadTransport(GatewayConfig& c) {
  c.listen = absl::GetFlag(FLAGS_listen);
  ASSIGN_OR_RETURN(c.server_credentials, ServerCredentialsFromFlags("tandem-gateway", false));
  c.server_transport = ServerTransportFromFlags();
  c.grpc_memory_limit = absl::GetFlag(FLAGS_grpc_memory_limit);
  c.grpc_receive_headroom_bytes = absl::GetFlag(FLAGS_grpc_receive_headroom_bytes);
  c.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  c.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  ASSIGN_OR_RETURN(c.metrics_server, MetricsServerOptionsFromFlags());
  c.metrics_transport = MetricsTransportFromFlags();
  return ReadHttp(c);
}

absl::Status ReadWorkers(GatewayConfig& c) {
  c.workers = absl::GetFlag(FLAGS_workers);
  c.worker_tls.ca = absl::GetFlag(FLAGS_worker_tls_ca);
  c.worker_tls.cert = absl::GetFlag(FLAGS_worker_tls_cert);
  c.worker_tls.key = absl::GetFlag(FLAGS_worker_tls_key);
  c.worker_tls.refresh = TlsRefreshIntervalFromFlags();
  c.worker_tls_server_name = absl::GetFlag(FLAGS_worker_tls_server_name);
  c.worker_plaintext = absl::GetFlag(FLAGS_worker_plaintext);

  WorkerPoolsOptions& p = c.pools;
  p.probe_interval = absl::GetFlag(FLAGS_worker_probe_interval);
  p.probe_timeout = absl::GetFlag(FLAGS_worker_probe_timeout);
  p.probe_timeouts = absl::GetFlag(FLAGS_worker_probe_timeouts);
  p.dns_interval = absl::GetFlag(FLAGS_dns_interval);
  p.endpoint.failure_threshold = absl::GetFlag(FLAGS_eject_after_failures);
  p.endpoint.internal_error_threshold = absl::GetFlag(FLAGS_eject_after_internal_errors);
  p.endpoint.stall_threshold = absl::GetFlag(FLAGS_eject_after_stalls);
  p.endpoint.base_ejection = absl::GetFlag(FLAGS_base_ejection);
  p.endpoint.max_ejection = absl::GetFlag(FLAGS_max_ejection);
  if (absl::Status s = ParseEndpointPick(absl::GetFlag(FLAGS_endpoint_pick), &p); !s.ok()) {
    return s;
  }
  p.prefix_pick.max_imbalance = absl::GetFlag(FLAGS_prefix_pick_max_imbalance);
  p.prefix_pick.min_hit_tokens = absl::GetFlag(FLAGS_prefix_pick_min_tokens);
  p.prefix_pick.index_entries = absl::GetFlag(FLAGS_prefix_index_entries);
  if (p.prefix_pick.max_imbalance < 0 || p.prefix_pick.min_hit_tokens < 0 ||
      p.prefix_pick.index_entries < 1) {
    return absl::InvalidArgumentError(
        "--prefix_pick_max_imbalance and --prefix_pick_min_tokens must be >= 0, "
        "--prefix_index_entries >= 1");
  }
  c.dispatch_headroom = absl::GetFlag(FLAGS_dispatch_headroom);
  c.queue.max_inflight = absl::GetFlag(FLAGS_max_inflight);
  c.queue.max_queued_per_tenant = absl::GetFlag(FLAGS_max_queued);

  SignalEngineOptions& s = c.signals;
  s.scrape_interval = absl::GetFlag(FLAGS_scrape_interval);
  s.scrape_timeout = absl::GetFlag(FLAGS_scrape_timeout);
  s.prometheus_url = absl::GetFlag(FLAGS_prometheus_url);
  while (!s.prometheus_url.empty() && s.prometheus_url.back() == '/') s.prometheus_url.pop_back();
  s.promql_timeout = absl::GetFlag(FLAGS_promql_timeout);
  s.scrape_tls = c.worker_tls;  // workers with --metrics_tls: the same identity and trust
  s.scrape_tls_server_name = c.worker_tls_server_name;
  return absl::OkStatus();
}

absl::Status ReadRouting(GatewayConfig& c) {
  c.policy_path = absl::GetFlag(FLAGS_policy);
  ASSIGN_OR_RETURN(c.policy_limits, policies::PolicyLimitsFromFlags());
  c.policy_watch_interval = absl::GetFlag(FLAGS_policy_watch_interval);
  router::BuiltinRouterConfig& r = c.builtin_router;
  r.default_model = absl::GetFlag(FLAGS_default_model);
  r.accuracy_model = absl::GetFlag(FLAGS_accuracy_model);
  r.latency_model = absl::GetFlag(FLAGS_latency_model);
  r.vision_model = absl::GetFlag(FLAGS_vision_model);
  r.long_context_model = absl::GetFlag(FLAGS_long_context_model);
  r.long_context_tokens = absl::GetFlag(FLAGS_long_context_tokens);
  c.decision_log_path = absl::GetFlag(FLAGS_decision_log);
  c.decision_log_queue = absl::GetFlag(FLAGS_decision_log_queue);
  c.dispatch.log_prompt_text = absl::GetFlag(FLAGS_decision_log_text);
  c.dispatch.shadow_timeout = absl::GetFlag(FLAGS_shadow_timeout);
  return absl::OkStatus();
}

absl::Status ReadRequests(GatewayConfig& c) {
  IntakeOptions& i = c.intake;
  ASSIGN_OR_RETURN(i.limits, RequestLimitsFromFlags());
  i.limits.max_labels = absl::GetFlag(FLAGS_max_labels);
  i.limits.max_label_bytes = absl::GetFlag(FLAGS_max_label_bytes);
  i.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  i.default_max_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  i.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  i.max_tokens_limit = absl::GetFlag(FLAGS_max_tokens_limit);
  i.shared_prefix_cache = absl::GetFlag(FLAGS_shared_prefix_cache);

  DispatchOptions& s = c.dispatch;
  s.default_deadline = absl::GetFlag(FLAGS_default_deadline);
  s.worker_deadline_offset = absl::GetFlag(FLAGS_worker_deadline_offset);
  s.deadline_cancel_window = absl::GetFlag(FLAGS_deadline_cancel_window);
  s.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  s.retry_budget_ratio = absl::GetFlag(FLAGS_retry_budget_ratio);
  s.retry_budget_min = absl::GetFlag(FLAGS_retry_budget_min);
  s.max_queue_wait = absl::GetFlag(FLAGS_max_queue_wait);
  s.max_stream_duration = absl::GetFlag(FLAGS_max_stream_duration);
  s.rejected_log_per_second = i.limits.rejected_log_per_second;
  s.expose_worker_addresses = absl::GetFlag(FLAGS_expose_worker_addresses);
  s.stall_timeout_min = absl::GetFlag(FLAGS_stall_timeout_min);
  s.stall_timeout_multiple = absl::GetFlag(FLAGS_stall_timeout_multiple);
  return absl::OkStatus();
}

absl::Status ReadTenancy(GatewayConfig& c) {
  c.tenants_path = absl::GetFlag(FLAGS_tenants);
  c.sessions.ttl = absl::ToChronoSeconds(absl::GetFlag(FLAGS_session_ttl));
  c.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  c.exact_token_band = absl::GetFlag(FLAGS_exact_token_band);
  c.sessions.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  if (const std::string key_file = absl::GetFlag(FLAGS_session_key_file); !key_file.empty()) {
    // A secret: bounded like any file read at start-up; trailing newlines are not part of it.
    absl::StatusOr<std::string> key = ReadFileToString(key_file, 4096, "--session_key_file");
    if (!key.ok()) return key.status();
    c.session_key = std::string(absl::StripTrailingAsciiWhitespace(*key));
    if (c.session_key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--session_key_file ", key_file, " holds no key (it is empty)"));
    }
  }
  c.tenants.allow_unauthenticated = absl::GetFlag(FLAGS_allow_unauthenticated);
  c.tenants.max_tenant_labels = absl::GetFlag(FLAGS_max_tenant_labels);
  ASSIGN_OR_RETURN(c.tenants.file_limits, policies::TenantsFileLimitsFromFlags());
  c.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  c.drain_quiet_period = absl::GetFlag(FLAGS_drain_quiet_period);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GatewayConfig> GatewayConfigFromFlags() {
  GatewayConfig c;
  // Transport first: a mistake there fails at once, before any worker or policy work.
  for (auto* read : {&ReadTransport, &ReadWorkers, &ReadRouting, &ReadRequests, &ReadTenancy}) {
    if (absl::Status s = read(c); !s.ok()) return s;
  }
  return c;
}

}  // namespace tandem::gateway
