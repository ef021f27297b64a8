#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_server.h"
#include "common/health_service.h"
#include "common/metrics_server.h"
#include "gateway/config.h"
#include "gateway/control/admin_service.h"
#include "gateway/control/policy_reloader.h"
#include "gateway/dispatch/decision_log.h"
#include "gateway/dispatch/dispatcher.h"
#include "gateway/dispatch/fair_queue.h"
#include "gateway/grpc_front/grpc_front.h"
#include "gateway/http_front/openai_front.h"
#include "gateway/intake/intake.h"
#include "gateway/intake/router_holder.h"
#include "gateway/intake/tenants.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pool/worker_pools.h"
#include "gateway/signals/signal_engine.h"

namespace tandem::gateway {

// One running gateway: worker pools, signals, router and policy, tenants, dispatch queues, the
// gRPC server and /metrics. Start() builds and starts it all from a validated config, or says
// what failed; the process then calls Reload() on SIGHUP and Drain() then Stop() on SIGTERM.
class Gateway {
 public:
  static constexpr char kVersion[] = "0.1.0";

  // `config` must have passed Validate(). An error names what could not start (a worker entry,
  // the policy or tenants file, the decision log, a port).
  static absl::StatusOr<std::unique_ptr<Gateway>> Start(GatewayConfig config);
  ~Gateway();

  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  // The HTTP front's HOST:PORT; empty without --http_listen.
  std::string http_address() const { return openai_ != nullptr ? openai_->Address() : ""; }
  const std::vector<std::string>& models() const { return models_; }

  // Re-reads the policy and tenants files in the background; an invalid file is logged and
  // counted, and the live one stays.
  void Reload(const std::string& why);
  // Health NOT_SERVING, new calls UNAVAILABLE; waits up to drain_timeout for calls in flight,
  // then for drain_quiet_period without new ones.
  void Drain();
  // Stops the server and the background threads. Call once, after Drain().
  void Stop();

 private:
  explicit Gateway(GatewayConfig config);
  absl::Status Init();
  absl::Status ConfigurePools();
  absl::Status StartRouting();
  absl::Status StartTenancy();
  absl::Status StartServing();
  // Readiness changes: per-model health, ready-worker gauges and each model's dispatch slots
  // (what its usable workers take at once, at most --max_inflight).
  void OnPoolsChanged();
  std::optional<ModelLoad> LocalLoad(const std::string& model) const;

  GatewayConfig config_;
  std::vector<std::string> models_;  // sorted
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<GatewayMetrics> metrics_;
  // Each model's dispatch slots (empty with max_inflight 0); filled before the pools start.
  std::map<std::string, std::unique_ptr<FairQueue>> queues_;
  std::unique_ptr<WorkerPools> pools_;
  std::unique_ptr<RouterHolder> router_;
  std::unique_ptr<SignalEngine> signals_;
  std::unique_ptr<PolicyReloader> reloader_;  // null without a policy file
  std::unique_ptr<Sessions> sessions_;
  std::unique_ptr<PromptTokenCounter> token_counter_;
  std::unique_ptr<Intake> intake_;
  std::unique_ptr<DecisionLog> decision_log_;
  std::unique_ptr<TenantRegistry> tenants_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<GrpcFront> grpc_front_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::unique_ptr<OpenAiFront> openai_;  // null without --http_listen
  HealthService health_;
  std::unique_ptr<grpc::Server> server_;
  std::string grpc_address_;
  std::string metrics_address_;

  // Probe callbacks (gRPC threads) and the drain both write health; the drain clears
  // `serving_health_` so that a late probe result cannot turn a model SERVING again.
  absl::Mutex health_mu_;
  HealthService* serving_health_ ABSL_GUARDED_BY(health_mu_) = nullptr;
};

}  // namespace tandem::gateway
