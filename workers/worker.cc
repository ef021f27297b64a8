#include "workers/worker.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/numbers.h"
#include "common/clock.h"
#include "common/grpc_server.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "prometheus/metric_family.h"
#include "spdlog/spdlog.h"

namespace tandem::workers {
namespace {

// The worker's registry followed by the families of its engine (workers/remote_engine.h).
class WorkerFamilies final : public prometheus::Collectable {
 public:
  WorkerFamilies(std::shared_ptr<prometheus::Collectable> own,
                 std::shared_ptr<prometheus::Collectable> engine)
      : own_(std::move(own)), engine_(std::move(engine)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families = own_->Collect();
    for (prometheus::MetricFamily& f : engine_->Collect()) families.push_back(std::move(f));
    return families;
  }

 private:
  const std::shared_ptr<prometheus::Collectable> own_;
  const std::shared_ptr<prometheus::Collectable> engine_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Worker>> Worker::Start(WorkerConfig config, DeviceDescription device,
                                                      LoadedEngine engine) {
  std::unique_ptr<Worker> worker(
      new Worker(std::move(config), std::move(device), std::move(engine)));
  RETURN_IF_ERROR(worker->StartServers());
  return worker;
}

Worker::Worker(WorkerConfig config, DeviceDescription device, LoadedEngine engine)
    : config_(std::move(config)),
      device_(std::move(device)),
      engine_(std::move(engine)),
      main_thread_(pthread_self()) {
  const EngineInfo& info = Info();
  registry_ = std::make_shared<prometheus::Registry>();
  metrics_ = std::make_unique<WorkerMetrics>(
      *registry_, WorkerMetrics::Labels{info.model_name, info.model_id, info.engine, device_.id,
                                        device_.name, engine_.weights, info.quantization});
  if (engine_.upstream != nullptr) {
    service_ = std::make_unique<WorkerService>(engine_.upstream.get(), metrics_.get(), device_,
                                               config_.limits);
    return;
  }
  metrics_->sequence_memory_budget.Set(static_cast<double>(engine_.engine->MemoryBudgetBytes()));
  scheduler_ = std::make_unique<Scheduler>(engine_.engine.get(), metrics_.get(), Clock::Real(),
                                           config_.scheduler);
  service_ = std::make_unique<WorkerService>(engine_.engine.get(), scheduler_.get(), metrics_.get(),
                                             device_, config_.limits, config_.image_pool);
}

const EngineInfo& Worker::Info() const {
  return engine_.upstream != nullptr ? engine_.upstream->Info() : engine_.engine->Info();
}

void Worker::SetServing(bool serving) {
  service_->SetState(serving ? tandem::v1::WorkerInfo::STATE_READY
                             : tandem::v1::WorkerInfo::STATE_LOADING);
  metrics_->ready.Set(serving ? 1 : 0);
  health_.SetAllServingStatus(serving);
}

// The worker is ready while its engine server is: health follows the engine's three states
// (starting and dead both refuse work with UNAVAILABLE, so the gateway sends it elsewhere).
void Worker::ServeUpstream() {
  engine_.upstream->Start(
      metrics_.get(),
      [this](bool ready) {
        absl::MutexLock l(&serving_mu_);
        if (!draining_) SetServing(ready);
      },
      [this](std::string message) {
        // A start-up error found once the engine answered: the process stops as on SIGTERM
        // (threads joined, the engine child stopped) and exits non-zero (failed()).
        spdlog::critical("{}", message);
        failed_.store(true);
        // To the main thread, which waits for it with the signal blocked (a process-directed
        // signal may land on a thread that does not block it, e.g. a sanitizer's, and kill).
        pthread_kill(main_thread_, SIGTERM);
      });
}

Worker::~Worker() = default;

absl::Status Worker::StartServers() {
  std::shared_ptr<prometheus::Collectable> families = registry_;
  if (engine_.upstream != nullptr && engine_.upstream->EngineFamilies() != nullptr) {
    families = std::make_shared<WorkerFamilies>(registry_, engine_.upstream->EngineFamilies());
  }
  ASSIGN_OR_RETURN(metrics_server_,
                   MetricsServer::Start(config_.metrics_listen, families, config_.metrics_server));
  metrics_address_ = metrics_server_->Address();
  int port = 0;
  if (absl::SimpleAtoi(metrics_address_.substr(metrics_address_.rfind(':') + 1), &port)) {
    service_->SetMetricsEndpoint(port, std::string(metrics_server_->Scheme()) == "https");
  }
  GrpcServerOptions options;
  options.listen = config_.listen;
  options.credentials = config_.server_credentials;
  // Both names answer: "" (the whole server) and the worker service.
  health_.SetServingStatus("", false);
  health_.SetServingStatus("tandem.v1.Worker", false);
  options.services = {service_.get()};
  options.health = &health_;
  options.max_receive_message_bytes =
      static_cast<int>(std::min<int64_t>(config_.max_request_bytes, INT32_MAX));
  // Clients re-resolve DNS when connections age out, so new gateway replicas spread load.
  options.max_connection_age_ms = 5 * 60 * 1000;
  ASSIGN_OR_RETURN(GrpcServer server, StartGrpcServer(options));
  server_ = std::move(server.server);
  grpc_address_ = server.address;
  return absl::OkStatus();
}

void Worker::Serve() {
  if (engine_.upstream != nullptr) {
    ServeUpstream();
  } else {
    scheduler_->Start();
    SetServing(true);
  }
  const EngineInfo& info = Info();
  const char* label = "";
  if (engine_.weights == "none") label = " [LOAD SIMULATOR: not a real model]";
  if (engine_.weights == "random") {
    label =
        " [RANDOM WEIGHTS: a measuring tool, meaningless answers; router weights random: "
        "expert load is about uniform]";
  }
  spdlog::info(
      "serving model={} ({}) engine={}{} device={} ({}) grpc={} transport={} metrics={} "
      "metrics_transport={}",
      info.model_name, info.model_id, info.engine, label, device_.id, device_.name, grpc_address_,
      config_.server_transport, metrics_address_, config_.metrics_transport);
  refresher_ = std::thread([this] { RefreshDeviceLoop(); });
}

void Worker::RefreshDeviceLoop() {
  absl::MutexLock l(&refresh_mu_);
  const absl::Condition stopping(&stopping_);
  while (!refresh_mu_.AwaitWithTimeout(stopping, config_.device_refresh_interval)) {
    service_->RefreshDevice();
  }
}

void Worker::Drain() {
  spdlog::info("draining (health NOT_SERVING, up to {})",
               absl::FormatDuration(config_.drain_timeout));
  {
    absl::MutexLock l(&serving_mu_);
    draining_ = true;
    service_->SetState(tandem::v1::WorkerInfo::STATE_DRAINING);
    health_.SetAllServingStatus(false);
    metrics_->ready.Set(0);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(config_.drain_timeout);
  bool idle = false;
  if (engine_.upstream != nullptr) {
    engine_.upstream->Drain();
    idle = engine_.upstream->WaitIdle(deadline);
  } else {
    scheduler_->Drain();
    idle = scheduler_->WaitIdle(deadline);
  }
  if (!idle) spdlog::warn("drain timed out; ending what is left");
}

void Worker::Stop() {
  if (scheduler_ != nullptr) scheduler_->Stop();
  if (engine_.upstream != nullptr) engine_.upstream->Stop();
  StopGrpcServer(server_.get(), &health_, /*grace_seconds=*/5);
  {
    absl::MutexLock l(&refresh_mu_);
    stopping_ = true;
  }
  if (refresher_.joinable()) refresher_.join();
  spdlog::info("stopped");
  MetricsServer::KeepUntilExit(std::move(metrics_server_));
}

}  // namespace tandem::workers
