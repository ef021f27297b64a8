// tandem-gateway: the gRPC front that routes every LLM request to a model's workers.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_server.h"
#include "common/limit_flags.h"
#include "common/metrics_server.h"
#include "common/process.h"
#include "common/server_tls_flags.h"
#include "common/tls.h"
#include "gateway/admin_service.h"
#include "gateway/decision_log.h"
#include "gateway/fair_queue.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_service.h"
#include "gateway/intake.h"
#include "gateway/policy_reloader.h"
#include "gateway/router_holder.h"
#include "gateway/signal_engine.h"
#include "gateway/tenants.h"
#include "gateway/worker_pool.h"
#include "policies/limit_flags.h"
#include "policies/policy_loader.h"
#include "router/builtin_router.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC address; port 0 picks a free port.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0",
          "Prometheus /metrics address; port 0 picks a free port.");
ABSL_FLAG(std::vector<std::string>, workers, {},
          "Worker endpoints as MODEL=HOST:PORT, comma-separated; repeat a model for replicas.");
ABSL_FLAG(std::string, policy, "",
          "Routing policy YAML (policies/README.md); empty uses the built-in rules below. "
          "Reloaded on SIGHUP and when the file changes.");
ABSL_FLAG(std::string, validate_policy, "",
          "Check this policy file, print every error, and exit (0 valid, 1 invalid).");
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
ABSL_FLAG(int64_t, max_request_bytes, 8ll << 20,
          "Largest request accepted, in serialized bytes; larger ones get INVALID_ARGUMENT.");
ABSL_FLAG(int64_t, max_prompt_tokens, 1 << 20,
          "Largest prompt accepted, in estimated tokens (0: only the model's context limit).");
ABSL_FLAG(int32_t, max_tokens_limit, 0,
          "Largest sampling.max_tokens accepted (0: only the model's limit).");
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
          "gateway) or power_of_two (two at random, the less loaded by scraped queue depth).");
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
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error.");

namespace tandem::gateway {
namespace {

constexpr char kVersion[] = "0.1.0";

int ValidatePolicy(const std::string& path) {
  auto limits = policies::PolicyLimitsFromFlags();
  if (!limits.ok()) Fatal(std::string(limits.status().message()));
  std::vector<policies::PolicyError> errors;
  auto policy = policies::LoadPolicyFile(path, &errors, *limits);
  if (!policy.ok()) {
    std::fprintf(stderr, "%s\n", std::string(policy.status().message()).c_str());
    return 1;
  }
  std::printf("%s: valid (version %s, sha256 %s, %zu rules)\n", path.c_str(),
              (*policy)->version.c_str(), (*policy)->sha256.c_str(), (*policy)->rules.size());
  return 0;
}

// The gateway's files for the workers (--worker_tls_*): its gRPC channels to them and its
// scrapes of HTTPS /metrics use the same identity and trust.
TlsFiles WorkerTlsFiles() {
  TlsFiles files;
  files.ca = absl::GetFlag(FLAGS_worker_tls_ca);
  files.cert = absl::GetFlag(FLAGS_worker_tls_cert);
  files.key = absl::GetFlag(FLAGS_worker_tls_key);
  files.refresh = TlsRefreshIntervalFromFlags();
  return files;
}

// The workers' transport from --worker_tls_* / --worker_plaintext; fatal when neither is given.
std::shared_ptr<grpc::ChannelCredentials> WorkerCredentials() {
  const TlsFiles files = WorkerTlsFiles();
  const bool any_tls = !files.ca.empty() || !files.cert.empty() || !files.key.empty();
  if (absl::GetFlag(FLAGS_worker_plaintext)) {
    if (any_tls) Fatal("--worker_plaintext and --worker_tls_* contradict each other; choose one");
    spdlog::warn(
        "PLAINTEXT: the gateway calls workers without TLS (--worker_plaintext): prompts and "
        "answers cross the network readable, and workers are not authenticated.");
    return grpc::InsecureChannelCredentials();
  }
  if (files.ca.empty() || files.cert.empty() || files.key.empty()) {
    Fatal(
        "workers are called over mutual TLS: give --worker_tls_ca, --worker_tls_cert and "
        "--worker_tls_key, or an explicit --worker_plaintext");
  }
  auto creds = MakeChannelCredentials(files, "--worker_tls_ca/--worker_tls_cert/--worker_tls_key");
  if (!creds.ok()) Fatal(std::string(creds.status().message()));
  return *creds;
}

int Run() {
  if (const std::string v = absl::GetFlag(FLAGS_validate_policy); !v.empty()) {
    return ValidatePolicy(v);
  }
  // Transport, identity and limits first: a mistake there fails at once, before any worker or
  // policy work.
  auto server_credentials = ServerCredentialsFromFlags("tandem-gateway", false);
  if (!server_credentials.ok()) Fatal(std::string(server_credentials.status().message()));
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials = WorkerCredentials();
  auto metrics_options = MetricsServerOptionsFromFlags();
  if (!metrics_options.ok()) Fatal(std::string(metrics_options.status().message()));
  auto limits = RequestLimitsFromFlags();
  if (!limits.ok()) Fatal(std::string(limits.status().message()));
  limits->max_labels = absl::GetFlag(FLAGS_max_labels);
  limits->max_label_bytes = absl::GetFlag(FLAGS_max_label_bytes);
  if (limits->max_labels < 0 || limits->max_label_bytes < 1) {
    Fatal("--max_labels must be >= 0 and --max_label_bytes >= 1");
  }
  // What the policy and tenants files may hold (--max_policy_bytes, --max_tenants, ...).
  auto policy_limits = policies::PolicyLimitsFromFlags();
  if (!policy_limits.ok()) Fatal(std::string(policy_limits.status().message()));
  auto tenants_file_limits = policies::TenantsFileLimitsFromFlags();
  if (!tenants_file_limits.ok()) Fatal(std::string(tenants_file_limits.status().message()));
  const std::string tenants_path = absl::GetFlag(FLAGS_tenants);
  if (tenants_path.empty() && !absl::GetFlag(FLAGS_allow_unauthenticated)) {
    Fatal(
        "give --tenants=FILE (API keys and quotas), or --allow_unauthenticated to serve "
        "everyone without a key");
  }
  if (tenants_path.empty()) {
    spdlog::warn(
        "UNAUTHENTICATED: no --tenants file; every caller is tenant 'anonymous', without quotas, "
        "and may use tandem.v1.Admin.");
  }
  router::BuiltinRouterConfig router_config;
  router_config.default_model = absl::GetFlag(FLAGS_default_model);
  router_config.accuracy_model = absl::GetFlag(FLAGS_accuracy_model);
  router_config.latency_model = absl::GetFlag(FLAGS_latency_model);
  router_config.vision_model = absl::GetFlag(FLAGS_vision_model);
  router_config.long_context_model = absl::GetFlag(FLAGS_long_context_model);
  router_config.long_context_tokens = absl::GetFlag(FLAGS_long_context_tokens);

  // Health is written by probe callbacks (gRPC threads) and by the drain; the mutex keeps a
  // late probe result from turning a model SERVING again once draining began.
  std::mutex health_mu;
  HealthService* health_server = nullptr;  // guarded by health_mu; null until serving, and draining
  std::unique_ptr<WorkerPools> pools_holder;
  GatewayMetrics* metrics_ptr = nullptr;
  // Each model's dispatch slots (filled before the pools start).
  std::map<std::string, std::unique_ptr<FairQueue>> queues;
  const int max_inflight = absl::GetFlag(FLAGS_max_inflight);
  const int headroom = absl::GetFlag(FLAGS_dispatch_headroom);
  // Readiness changes update per-model health ("model/NAME"), the ready-worker gauges and the
  // model's dispatch slots: what its usable workers take at once, at most --max_inflight.
  auto on_change = [&] {
    std::lock_guard<std::mutex> l(health_mu);
    for (const auto& [name, pool] : pools_holder->pools()) {
      if (auto it = queues.find(name); it != queues.end()) {
        const int capacity = pool->DispatchCapacity(headroom);
        it->second->SetCapacity(capacity > 0 ? std::min(capacity, max_inflight) : max_inflight);
      }
      const int ready = pool->ReadyCount();
      if (health_server != nullptr) {
        health_server->SetServingStatus("model/" + name, ready > 0);
      }
      if (auto* m = metrics_ptr->ForModel(name)) {
        m->ready_workers->Set(ready);
        m->workers->Set(static_cast<double>(pool->endpoints()->size()));
      }
    }
  };
  // Endpoints come from --workers and from the policy's models.NAME.endpoints (read here, at
  // start-up; a reload that changes them says so and waits for a restart).
  std::vector<std::string> worker_entries = absl::GetFlag(FLAGS_workers);
  if (const std::string path = absl::GetFlag(FLAGS_policy); !path.empty()) {
    std::vector<policies::PolicyError> errors;
    auto policy = policies::LoadPolicyFile(path, &errors, *policy_limits);
    if (!policy.ok()) Fatal(std::string(policy.status().message()));
    for (const auto& [name, spec] : (*policy)->models) {
      for (const std::string& ep : spec.endpoints) {
        const std::string entry = name + "=" + ep;
        if (std::find(worker_entries.begin(), worker_entries.end(), entry) ==
            worker_entries.end()) {
          worker_entries.push_back(entry);
        }
      }
    }
  }
  std::vector<std::string> models;
  for (const std::string& e : worker_entries) {
    const std::string m = e.substr(0, e.find('='));
    if (!m.empty() && std::find(models.begin(), models.end(), m) == models.end()) {
      models.push_back(m);
    }
  }
  std::sort(models.begin(), models.end());
  auto registry = std::make_shared<prometheus::Registry>();
  GatewayMetrics metrics(*registry, models,
                         {"accuracy_critical", "latency_critical", "long_context", "pinned"},
                         kVersion);
  metrics_ptr = &metrics;

  WorkerPoolsOptions pool_options;
  pool_options.probe_interval = absl::GetFlag(FLAGS_worker_probe_interval);
  pool_options.dns_interval = absl::GetFlag(FLAGS_dns_interval);
  pool_options.probe_timeout = absl::GetFlag(FLAGS_worker_probe_timeout);
  pool_options.probe_timeouts = absl::GetFlag(FLAGS_worker_probe_timeouts);
  if (pool_options.probe_timeout <= absl::ZeroDuration() || pool_options.probe_timeouts < 1) {
    Fatal("--worker_probe_timeout must be > 0 and --worker_probe_timeouts >= 1");
  }
  pool_options.endpoint.failure_threshold = absl::GetFlag(FLAGS_eject_after_failures);
  pool_options.endpoint.internal_error_threshold = absl::GetFlag(FLAGS_eject_after_internal_errors);
  pool_options.endpoint.stall_threshold = absl::GetFlag(FLAGS_eject_after_stalls);
  pool_options.endpoint.base_ejection = absl::GetFlag(FLAGS_base_ejection);
  pool_options.endpoint.max_ejection = absl::GetFlag(FLAGS_max_ejection);
  const std::string pick = absl::GetFlag(FLAGS_endpoint_pick);
  if (pick == "power_of_two") {
    pool_options.pick = PickStrategy::kPowerOfTwo;
  } else if (pick != "least_outstanding") {
    Fatal("--endpoint_pick must be least_outstanding or power_of_two, not '" + pick + "'");
  }
  if (pool_options.probe_interval <= absl::ZeroDuration()) {
    Fatal("--worker_probe_interval must be > 0");
  }
  if (pool_options.dns_interval < absl::Milliseconds(100)) Fatal("--dns_interval must be >= 100ms");
  if (pool_options.endpoint.failure_threshold < 1 ||
      pool_options.endpoint.internal_error_threshold < 1 ||
      pool_options.endpoint.stall_threshold < 1) {
    Fatal(
        "--eject_after_failures, --eject_after_internal_errors and --eject_after_stalls must be "
        ">= 1");
  }
  if (pool_options.endpoint.base_ejection <= absl::ZeroDuration() ||
      pool_options.endpoint.max_ejection < pool_options.endpoint.base_ejection) {
    Fatal("--base_ejection must be > 0 and <= --max_ejection");
  }
  pool_options.credentials = worker_credentials;
  pool_options.tls_server_name = absl::GetFlag(FLAGS_worker_tls_server_name);
  pools_holder = std::make_unique<WorkerPools>(pool_options, on_change, &metrics);
  WorkerPools& pools = *pools_holder;
  if (absl::Status s = pools.Configure(worker_entries); !s.ok()) {
    Fatal(std::string(s.message()));
  }
  router_config.models.clear();
  for (const auto& [name, pool] : pools.pools()) router_config.models.insert(name);
  const std::string policy_path = absl::GetFlag(FLAGS_policy);
  if (policy_path.empty()) {
    for (const std::string& m :
         {router_config.default_model, router_config.accuracy_model, router_config.latency_model,
          router_config.vision_model, router_config.long_context_model}) {
      if (!router_config.models.contains(m)) {
        Fatal(absl::StrCat("routing names model '", m,
                           "' but --workers configures only: ", absl::StrJoin(models, ", ")));
      }
    }
  }
  RouterHolder router(std::make_shared<router::BuiltinRouter>(router_config));

  SignalEngineOptions signal_options;
  signal_options.scrape_interval = absl::GetFlag(FLAGS_scrape_interval);
  signal_options.scrape_timeout = absl::GetFlag(FLAGS_scrape_timeout);
  signal_options.prometheus_url = absl::GetFlag(FLAGS_prometheus_url);
  signal_options.promql_timeout = absl::GetFlag(FLAGS_promql_timeout);
  signal_options.scrape_tls = WorkerTlsFiles();  // for workers with --metrics_tls
  signal_options.scrape_tls_server_name = absl::GetFlag(FLAGS_worker_tls_server_name);
  while (!signal_options.prometheus_url.empty() && signal_options.prometheus_url.back() == '/') {
    signal_options.prometheus_url.pop_back();
  }
  if (signal_options.scrape_interval < absl::Milliseconds(100)) {
    Fatal("--scrape_interval must be >= 100ms");
  }
  if (signal_options.scrape_timeout <= absl::ZeroDuration() ||
      signal_options.promql_timeout <= absl::ZeroDuration()) {
    Fatal("--scrape_timeout and --promql_timeout must be > 0");
  }
  if (const absl::Duration watch = absl::GetFlag(FLAGS_policy_watch_interval);
      watch < absl::Milliseconds(10) || watch > absl::Hours(24)) {
    Fatal("--policy_watch_interval must be between 10ms and 24h");
  }
  signal_options.local_load = [&](const std::string& model) -> std::optional<ModelLoad> {
    const ModelPool* pool = pools.Find(model);
    if (pool == nullptr) return std::nullopt;
    ModelLoad load;
    for (const auto& e : *pool->endpoints()) {
      load.inflight += e->outstanding();
      load.usable_workers += e->usable() ? 1 : 0;
    }
    if (auto q = queues.find(model); q != queues.end()) load.queued = q->second->queued();
    return load;
  };
  SignalEngine signals(&pools, &metrics, signal_options);
  std::unique_ptr<PolicyReloader> reloader;
  if (!policy_path.empty()) {
    reloader = std::make_unique<PolicyReloader>(policy_path, &pools, &router, &metrics, &signals,
                                                *policy_limits);
    if (absl::Status s = reloader->Reload("start"); !s.ok()) Fatal(std::string(s.message()));
  } else {
    metrics.SetLivePolicy("builtin", "");
  }

  IntakeOptions intake_options;
  intake_options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  intake_options.default_max_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  intake_options.limits = *limits;
  intake_options.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  intake_options.max_tokens_limit = absl::GetFlag(FLAGS_max_tokens_limit);
  if (intake_options.max_prompt_tokens < 0 || intake_options.max_tokens_limit < 0) {
    Fatal("--max_prompt_tokens and --max_tokens_limit must be >= 0");
  }
  if (intake_options.max_request_bytes < 1024) Fatal("--max_request_bytes must be >= 1024");
  if (intake_options.default_max_tokens < 1) Fatal("--default_max_tokens must be >= 1");
  Intake intake(&router, &pools, intake_options, &signals);
  std::unique_ptr<DecisionLog> decision_log;
  if (const std::string path = absl::GetFlag(FLAGS_decision_log); !path.empty()) {
    if (absl::GetFlag(FLAGS_decision_log_queue) < 1) Fatal("--decision_log_queue must be >= 1");
    auto log = DecisionLog::Open(path, static_cast<size_t>(absl::GetFlag(FLAGS_decision_log_queue)),
                                 &metrics.decision_log_written(), &metrics.decision_log_dropped());
    if (!log.ok()) Fatal(std::string(log.status().message()));
    decision_log = std::move(*log);
  }
  if (absl::GetFlag(FLAGS_shadow_timeout) <= absl::ZeroDuration()) {
    Fatal("--shadow_timeout must be > 0");
  }
  GatewayServiceOptions service_options;
  service_options.decision_log = decision_log.get();
  service_options.log_prompt_text = absl::GetFlag(FLAGS_decision_log_text);
  service_options.shadow_timeout = absl::GetFlag(FLAGS_shadow_timeout);
  service_options.default_deadline = absl::GetFlag(FLAGS_default_deadline);
  service_options.worker_deadline_offset = absl::GetFlag(FLAGS_worker_deadline_offset);
  if (service_options.worker_deadline_offset < absl::ZeroDuration()) {
    Fatal("--worker_deadline_offset must be >= 0");
  }
  service_options.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  service_options.retry_budget_ratio = absl::GetFlag(FLAGS_retry_budget_ratio);
  service_options.retry_budget_min = absl::GetFlag(FLAGS_retry_budget_min);
  if (service_options.default_deadline <= absl::ZeroDuration()) {
    Fatal("--default_deadline must be > 0");
  }
  if (service_options.max_attempts < 1) Fatal("--max_attempts must be >= 1");
  if (!(service_options.retry_budget_ratio >= 0 && service_options.retry_budget_ratio <= 1) ||
      service_options.retry_budget_min < 0) {
    Fatal("--retry_budget_ratio must be in [0, 1] and --retry_budget_min >= 0");
  }
  TenantRegistryOptions tenant_options;
  tenant_options.allow_unauthenticated = absl::GetFlag(FLAGS_allow_unauthenticated);
  tenant_options.max_tenant_labels = absl::GetFlag(FLAGS_max_tenant_labels);
  tenant_options.models = router_config.models;
  tenant_options.file_limits = *tenants_file_limits;
  if (tenant_options.max_tenant_labels < 1) Fatal("--max_tenant_labels must be >= 1");
  TenantRegistry tenants(tenant_options, &metrics);
  if (!tenants_path.empty()) {
    if (absl::Status s = tenants.Load(tenants_path); !s.ok()) Fatal(std::string(s.message()));
  }
  FairQueue::Options queue_options;
  queue_options.max_inflight = max_inflight;
  queue_options.max_queued_per_tenant = absl::GetFlag(FLAGS_max_queued);
  if (queue_options.max_inflight < 0 || queue_options.max_queued_per_tenant < 0) {
    Fatal("--max_inflight and --max_queued must be >= 0");
  }
  if (max_inflight > 0) {
    for (const auto& [name, pool] : pools.pools()) {
      queues.emplace(name, std::make_unique<FairQueue>(queue_options));
    }
  }
  service_options.tenants = &tenants;
  service_options.queues = &queues;
  service_options.max_queue_wait = absl::GetFlag(FLAGS_max_queue_wait);
  service_options.max_stream_duration = absl::GetFlag(FLAGS_max_stream_duration);
  service_options.rejected_log_per_second = limits->rejected_log_per_second;
  service_options.expose_worker_addresses = absl::GetFlag(FLAGS_expose_worker_addresses);
  service_options.stall_timeout_min = absl::GetFlag(FLAGS_stall_timeout_min);
  service_options.stall_timeout_multiple = absl::GetFlag(FLAGS_stall_timeout_multiple);
  if (service_options.stall_timeout_min < absl::ZeroDuration() ||
      !(service_options.stall_timeout_multiple >= 1)) {
    Fatal("--stall_timeout_min must be >= 0 and --stall_timeout_multiple >= 1");
  }
  if (service_options.max_queue_wait <= absl::ZeroDuration() ||
      service_options.max_stream_duration <= absl::ZeroDuration()) {
    Fatal("--max_queue_wait and --max_stream_duration must be > 0");
  }
  GatewayService service(&intake, &pools, &metrics, service_options);
  AdminService admin(reloader.get(), &pools, &signals, &tenants, &metrics);

  auto metrics_server =
      MetricsServer::Start(absl::GetFlag(FLAGS_metrics_listen), registry, *metrics_options);
  if (!metrics_server.ok()) Fatal(std::string(metrics_server.status().message()));

  GrpcServerOptions server_options;
  server_options.listen = absl::GetFlag(FLAGS_listen);
  server_options.credentials = *server_credentials;
  server_options.max_memory_bytes = absl::GetFlag(FLAGS_grpc_memory_limit);
  if (server_options.max_memory_bytes < 0) Fatal("--grpc_memory_limit must be >= 0");
  HealthService health;
  health.SetServingStatus("", false);
  for (const std::string& m : models) health.SetServingStatus("model/" + m, false);
  server_options.services = {&service, &admin};
  server_options.health = &health;
  // gRPC's own limit sits above ours so that oversized requests get our INVALID_ARGUMENT
  // naming the flag; only requests beyond twice the limit meet gRPC's RESOURCE_EXHAUSTED.
  server_options.max_receive_message_bytes =
      static_cast<int>(std::min<int64_t>(2 * intake_options.max_request_bytes, INT32_MAX));
  // Clients reconnect (and re-resolve DNS) after this age, so a round_robin client spreads over
  // replicas added since it connected; streams in flight may finish (--max_stream_duration).
  const absl::Duration connection_age = absl::GetFlag(FLAGS_max_connection_age);
  if (connection_age < absl::ZeroDuration()) Fatal("--max_connection_age must be >= 0");
  server_options.max_connection_age_ms =
      static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(connection_age), INT32_MAX));
  server_options.max_connection_age_grace_ms = static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(service_options.max_stream_duration), INT32_MAX));
  auto grpc_server = StartGrpcServer(server_options);
  if (!grpc_server.ok()) Fatal(std::string(grpc_server.status().message()));
  grpc::Server* server = grpc_server->server.get();
  const std::string& grpc_address = grpc_server->address;
  {
    std::lock_guard<std::mutex> l(health_mu);
    health.SetServingStatus("", true);
    health.SetServingStatus("tandem.v1.Gateway", true);
    health_server = &health;
  }
  pools.Start();
  signals.Start();

  spdlog::info(
      "serving grpc={} transport={} workers_transport={} tenants={} metrics={} "
      "metrics_transport={} models={} version={}",
      grpc_address, ServerTransportFromFlags(),
      absl::GetFlag(FLAGS_worker_plaintext) ? "plaintext" : "mtls",
      tenants_path.empty() ? "none (anonymous)" : tenants_path, (*metrics_server)->Address(),
      MetricsTransportFromFlags(), absl::StrJoin(models, ","), kVersion);
  AnnounceListening("tandem-gateway", grpc_address, (*metrics_server)->Address());

  if (reloader) reloader->Start(absl::GetFlag(FLAGS_policy_watch_interval));
  if (!tenants_path.empty()) tenants.Watch(absl::GetFlag(FLAGS_policy_watch_interval));
  const int sig = WaitForTerminationSignal([&] {
    // Errors are logged and counted; each file's live version stays if its new one is invalid.
    if (reloader) reloader->ReloadAsync("SIGHUP", nullptr);
    if (!tenants_path.empty()) tenants.ReloadAsync("SIGHUP", nullptr);
    if (!reloader && tenants_path.empty()) spdlog::info("SIGHUP: no --policy or --tenants file");
  });
  if (reloader) reloader->Stop();
  tenants.Stop();
  spdlog::info("signal {}: draining (health NOT_SERVING, up to {})", sig,
               absl::FormatDuration(absl::GetFlag(FLAGS_drain_timeout)));
  {
    std::lock_guard<std::mutex> l(health_mu);
    health_server = nullptr;
    health.SetAllServingStatus(false);
  }
  service.StartDraining();
  const auto deadline = std::chrono::steady_clock::now() +
                        absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_drain_timeout));
  if (!service.WaitIdle(deadline)) {
    spdlog::warn("drain timed out with {} requests in flight", service.inflight());
  }
  service.WaitQuiet(absl::ToChronoNanoseconds(absl::GetFlag(FLAGS_drain_quiet_period)), deadline);
  StopGrpcServer(server, &health, /*grace_seconds=*/5);
  // Client-side calls (cancelled shadows) must end before what they use is destroyed.
  service.WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  signals.Stop();
  pools.Stop();
  // The worker channels stay open until the process exits: gRPC 1.51 can free its callback
  // completion queue twice when the last channel using it is destroyed while its threads still
  // poll (an ASan double-free in grpc_cq_internal_unref at shutdown, seen in CI). Stopped above,
  // the pools do nothing more; a static keeps them reachable, so leak checkers stay quiet.
  static WorkerPools* const kept_until_exit = pools_holder.release();
  (void)kept_until_exit;
  spdlog::info("stopped");
  MetricsServer::KeepUntilExit(std::move(*metrics_server));
  return 0;
}

}  // namespace
}  // namespace tandem::gateway

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tandem-gateway --workers=qwen=HOST:PORT,nemotron=HOST:PORT");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles (~2% of the gateway's
  // CPU in perf); lock-order bugs are for a ThreadSanitizer build to find.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  tandem::BlockTerminationSignals();
  tandem::InitLogging("tandem-gateway", absl::GetFlag(FLAGS_log_level));
  return tandem::gateway::Run();
}
