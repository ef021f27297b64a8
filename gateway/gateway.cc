#include "gateway/gateway.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "router/builtin_router.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {
namespace {

// Endpoints come from --workers and from the policy's models.NAME.endpoints (read at start-up;
// a reload that changes them says so and waits for a restart).
absl::StatusOr<std::vector<std::string>> WorkerEntries(const GatewayConfig& config) {
  std::vector<std::string> entries = config.workers;
  if (config.policy_path.empty()) return entries;
  std::vector<policies::PolicyError> errors;
  ASSIGN_OR_RETURN(auto policy,
                   policies::LoadPolicyFile(config.policy_path, &errors, config.policy_limits));
  for (const auto& [name, spec] : policy->models) {
    for (const std::string& endpoint : spec.endpoints) {
      const std::string entry = name + "=" + endpoint;
      if (std::find(entries.begin(), entries.end(), entry) == entries.end()) {
        entries.push_back(entry);
      }
    }
  }
  return entries;
}

std::vector<std::string> ModelsOf(const std::vector<std::string>& entries) {
  std::vector<std::string> models;
  for (const std::string& e : entries) {
    const std::string m = e.substr(0, e.find('='));
    if (!m.empty() && std::find(models.begin(), models.end(), m) == models.end()) {
      models.push_back(m);
    }
  }
  std::sort(models.begin(), models.end());
  return models;
}

// The workers' transport: mutual TLS from --worker_tls_*, or plaintext when chosen.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> WorkerCredentials(
    const GatewayConfig& config) {
  if (config.worker_plaintext) {
    spdlog::warn(
        "PLAINTEXT: the gateway calls workers without TLS (--worker_plaintext): prompts and "
        "answers cross the network readable, and workers are not authenticated.");
    return grpc::InsecureChannelCredentials();
  }
  return MakeChannelCredentials(config.worker_tls,
                                "--worker_tls_ca/--worker_tls_cert/--worker_tls_key");
}

int ClampToInt(int64_t v) { return static_cast<int>(std::min<int64_t>(v, INT32_MAX)); }

}  // namespace

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Start(GatewayConfig config) {
  std::unique_ptr<Gateway> gateway(new Gateway(std::move(config)));
  if (absl::Status s = gateway->Init(); !s.ok()) {
    // The process exits on this error. A half-built gateway is not torn down: gRPC 1.51 can
    // free its callback completion queue twice when a worker channel is destroyed while the
    // queue's threads still poll. A static keeps it reachable, so leak checkers stay quiet.
    static Gateway* const kept_until_exit = gateway.release();
    (void)kept_until_exit;
    return s;
  }
  return gateway;
}

Gateway::Gateway(GatewayConfig config) : config_(std::move(config)) {}

Gateway::~Gateway() = default;

absl::Status Gateway::Init() {
  if (config_.tenants_path.empty()) {
    spdlog::warn(
        "UNAUTHENTICATED: no --tenants file; every caller is tenant 'anonymous', without quotas, "
        "and may use tandem.v1.Admin.");
  }
  RETURN_IF_ERROR(ConfigurePools());
  RETURN_IF_ERROR(StartRouting());
  RETURN_IF_ERROR(StartTenancy());
  return StartServing();
}

absl::Status Gateway::ConfigurePools() {
  ASSIGN_OR_RETURN(std::vector<std::string> entries, WorkerEntries(config_));
  models_ = ModelsOf(entries);
  registry_ = std::make_shared<prometheus::Registry>();
  metrics_ = std::make_unique<GatewayMetrics>(
      *registry_, models_,
      std::vector<std::string>{"accuracy_critical", "latency_critical", "long_context", "pinned"},
      kVersion);
  WorkerPoolsOptions options = config_.pools;
  ASSIGN_OR_RETURN(options.credentials, WorkerCredentials(config_));
  options.tls_server_name = config_.worker_tls_server_name;
  pools_ = std::make_unique<WorkerPools>(
      options, [this] { OnPoolsChanged(); }, metrics_.get());
  RETURN_IF_ERROR(pools_->Configure(entries));
  if (config_.queue.max_inflight > 0) {
    for (const auto& [name, pool] : pools_->pools()) {
      queues_.emplace(name, std::make_unique<FairQueue>(config_.queue));
    }
  }
  return absl::OkStatus();
}

absl::Status Gateway::StartRouting() {
  router::BuiltinRouterConfig& builtin = config_.builtin_router;
  builtin.models.clear();
  for (const auto& [name, pool] : pools_->pools()) builtin.models.insert(name);
  if (config_.policy_path.empty()) {
    for (const std::string& m :
         {builtin.default_model, builtin.accuracy_model, builtin.latency_model,
          builtin.vision_model, builtin.long_context_model}) {
      if (!builtin.models.contains(m)) {
        return absl::InvalidArgumentError(
            absl::StrCat("routing names model '", m,
                         "' but --workers configures only: ", absl::StrJoin(models_, ", ")));
      }
    }
  }
  router_ = std::make_unique<RouterHolder>(std::make_shared<router::BuiltinRouter>(builtin));
  SignalEngineOptions signal_options = config_.signals;
  signal_options.local_load = [this](const std::string& model) { return LocalLoad(model); };
  signals_ = std::make_unique<SignalEngine>(pools_.get(), metrics_.get(), signal_options);
  if (config_.policy_path.empty()) {
    metrics_->SetLivePolicy("builtin", "");
  } else {
    reloader_ =
        std::make_unique<PolicyReloader>(config_.policy_path, pools_.get(), router_.get(),
                                         metrics_.get(), signals_.get(), config_.policy_limits);
    RETURN_IF_ERROR(reloader_->Reload("start"));
  }
  sessions_ =
      std::make_unique<Sessions>(config_.sessions,
                                 config_.session_key.empty() ? SessionToken::WithRandomKey()
                                                             : SessionToken(config_.session_key),
                                 metrics_.get());
  if (!config_.tokenizer_path.empty()) {
    ASSIGN_OR_RETURN(token_counter_,
                     PromptTokenCounter::Load(config_.tokenizer_path, config_.exact_token_band));
  }
  intake_ = std::make_unique<Intake>(router_.get(), pools_.get(), config_.intake, signals_.get(),
                                     sessions_.get(), token_counter_.get());
  if (!config_.decision_log_path.empty()) {
    ASSIGN_OR_RETURN(decision_log_,
                     DecisionLog::Open(
                         config_.decision_log_path, static_cast<size_t>(config_.decision_log_queue),
                         &metrics_->decision_log_written(), &metrics_->decision_log_dropped()));
  }
  return absl::OkStatus();
}

absl::Status Gateway::StartTenancy() {
  TenantRegistryOptions options = config_.tenants;
  options.models = config_.builtin_router.models;
  tenants_ = std::make_unique<TenantRegistry>(options, metrics_.get());
  if (!config_.tenants_path.empty()) RETURN_IF_ERROR(tenants_->Load(config_.tenants_path));
  DispatchOptions dispatch_options = config_.dispatch;
  dispatch_options.decision_log = decision_log_.get();
  dispatch_options.tenants = tenants_.get();
  dispatch_options.queues = &queues_;
  dispatcher_ =
      std::make_unique<Dispatcher>(intake_.get(), pools_.get(), metrics_.get(), dispatch_options);
  grpc_front_ = std::make_unique<GrpcFront>(dispatcher_.get());
  admin_ = std::make_unique<AdminService>(reloader_.get(), pools_.get(), signals_.get(),
                                          tenants_.get(), metrics_.get());
  return absl::OkStatus();
}

absl::Status Gateway::StartServing() {
  ASSIGN_OR_RETURN(metrics_server_,
                   MetricsServer::Start(config_.metrics_listen, registry_, config_.metrics_server));
  metrics_address_ = metrics_server_->Address();
  GrpcServerOptions options;
  options.listen = config_.listen;
  options.credentials = config_.server_credentials;
  options.max_memory_bytes = config_.grpc_memory_limit;
  health_.SetServingStatus("", false);
  for (const std::string& m : models_) health_.SetServingStatus("model/" + m, false);
  options.services = {grpc_front_.get(), admin_.get()};
  options.health = &health_;
  // gRPC's own limit sits above ours so that oversized requests get our INVALID_ARGUMENT
  // naming the flag (a size is never worth retrying); only requests beyond the headroom meet
  // gRPC's RESOURCE_EXHAUSTED, before their bytes are held.
  options.max_receive_message_bytes = config_.GrpcReceiveLimit();
  // Clients reconnect (and re-resolve DNS) after this age, so a round_robin client spreads over
  // replicas added since it connected; streams in flight may finish (--max_stream_duration).
  options.max_connection_age_ms = ClampToInt(absl::ToInt64Milliseconds(config_.max_connection_age));
  options.max_connection_age_grace_ms =
      ClampToInt(absl::ToInt64Milliseconds(config_.dispatch.max_stream_duration));
  ASSIGN_OR_RETURN(GrpcServer server, StartGrpcServer(options));
  server_ = std::move(server.server);
  grpc_address_ = server.address;
  {
    absl::MutexLock l(&health_mu_);
    health_.SetServingStatus("", true);
    health_.SetServingStatus("tandem.v1.Gateway", true);
    serving_health_ = &health_;
  }
  if (!config_.http_listen.empty()) {
    HttpServerOptions http = config_.http;
    http.max_body_bytes = config_.intake.max_request_bytes;
    http.on_connection_refused = [m = metrics_.get()] {
      m->http_connections_refused().Increment();
    };
    http.on_connections_changed = [m = metrics_.get()](int open, int idle) {
      m->http_connections().Set(open);
      m->http_idle_connections().Set(idle);
    };
    OpenAiFrontOptions front{.max_json_depth = config_.intake.limits.max_json_depth,
                             .cors_origins = config_.http_cors_origins};
    ASSIGN_OR_RETURN(openai_, OpenAiFront::Start(config_.http_listen, http, std::move(front),
                                                 dispatcher_.get()));
  }
  pools_->Start();
  signals_->Start();
  spdlog::info(
      "serving grpc={} transport={} workers_transport={} tenants={} metrics={} "
      "metrics_transport={} http={} models={} version={}",
      grpc_address_, config_.server_transport, config_.worker_plaintext ? "plaintext" : "mtls",
      config_.tenants_path.empty() ? "none (anonymous)" : config_.tenants_path, metrics_address_,
      config_.metrics_transport,
      openai_ != nullptr ? absl::StrCat(openai_->Scheme(), "://", openai_->Address()) : "off",
      absl::StrJoin(models_, ","), kVersion);
  if (reloader_) reloader_->Start(config_.policy_watch_interval);
  if (!config_.tenants_path.empty()) tenants_->Watch(config_.policy_watch_interval);
  return absl::OkStatus();
}

void Gateway::OnPoolsChanged() {
  absl::MutexLock l(&health_mu_);
  for (const auto& [name, pool] : pools_->pools()) {
    if (auto it = queues_.find(name); it != queues_.end()) {
      const int max_inflight = config_.queue.max_inflight;
      const int capacity = pool->DispatchCapacity(config_.dispatch_headroom);
      it->second->SetCapacity(capacity > 0 ? std::min(capacity, max_inflight) : max_inflight);
    }
    const int ready = pool->ReadyCount();
    if (serving_health_ != nullptr) serving_health_->SetServingStatus("model/" + name, ready > 0);
    if (auto* m = metrics_->ForModel(name)) {
      m->ready_workers->Set(ready);
      m->workers->Set(static_cast<double>(pool->endpoints()->size()));
    }
  }
}

std::optional<ModelLoad> Gateway::LocalLoad(const std::string& model) const {
  const ModelPool* pool = pools_->Find(model);
  if (pool == nullptr) return std::nullopt;
  ModelLoad load;
  for (const auto& e : *pool->endpoints()) {
    load.inflight += e->outstanding();
    load.usable_workers += e->usable() ? 1 : 0;
  }
  if (auto q = queues_.find(model); q != queues_.end()) load.queued = q->second->queued();
  return load;
}

void Gateway::Reload(const std::string& why) {
  if (reloader_) reloader_->ReloadAsync(why, nullptr);
  if (!config_.tenants_path.empty()) tenants_->ReloadAsync(why, nullptr);
  if (!reloader_ && config_.tenants_path.empty()) {
    spdlog::info("{}: no --policy or --tenants file", why);
  }
}

void Gateway::Drain() {
  if (reloader_) reloader_->Stop();
  tenants_->Stop();
  spdlog::info("draining (health NOT_SERVING, up to {})",
               absl::FormatDuration(config_.drain_timeout));
  {
    absl::MutexLock l(&health_mu_);
    serving_health_ = nullptr;
    health_.SetAllServingStatus(false);
  }
  dispatcher_->StartDraining();
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(config_.drain_timeout);
  if (!dispatcher_->WaitIdle(deadline)) {
    spdlog::warn("drain timed out with {} requests in flight", dispatcher_->inflight());
  }
  dispatcher_->WaitQuiet(absl::ToChronoNanoseconds(config_.drain_quiet_period), deadline);
}

void Gateway::Stop() {
  StopGrpcServer(server_.get(), &health_, /*grace_seconds=*/5);
  openai_.reset();  // closes its connections; drained like the gRPC calls
  // Client-side calls (cancelled shadows) must end before what they use is destroyed.
  dispatcher_->WaitIdle(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  signals_->Stop();
  pools_->Stop();
  // The worker channels stay open until the process exits: gRPC 1.51 can free its callback
  // completion queue twice when the last channel using it is destroyed while its threads still
  // poll (an ASan double-free in grpc_cq_internal_unref at shutdown, seen in CI). Stopped above,
  // the pools do nothing more; a static keeps them reachable, so leak checkers stay quiet.
  static WorkerPools* const kept_until_exit = pools_.release();
  (void)kept_until_exit;
  MetricsServer::KeepUntilExit(std::move(metrics_server_));
  spdlog::info("stopped");
}

}  // namespace tandem::gateway
