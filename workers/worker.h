#pragma once

#include <grpcpp/grpcpp.h>
#include <pthread.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/health_service.h"
#include "common/metrics_server.h"
#include "workers/device.h"
#include "workers/engine_factory.h"
#include "workers/scheduler.h"
#include "workers/worker_config.h"
#include "workers/worker_metrics.h"
#include "workers/worker_service.h"

namespace tandem::workers {

// One running worker: an engine on its device, the scheduler that batches it, the gRPC server
// and /metrics. Start() listens with the worker LOADING; Serve() turns it READY; on SIGTERM the
// process calls Drain() then Stop().
class Worker {
 public:
  // `config` must have passed Validate(); `engine` is MakeEngine's for `device`. Call on the
  // thread that awaits termination signals (main).
  static absl::StatusOr<std::unique_ptr<Worker>> Start(WorkerConfig config,
                                                       DeviceDescription device,
                                                       LoadedEngine engine);
  ~Worker();

  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }

  // READY: the scheduler runs, health SERVING, device memory re-read every
  // device_refresh_interval.
  void Serve();
  // DRAINING and NOT_SERVING; running requests may finish for up to drain_timeout.
  void Drain();
  // Ends what is left, stops the server and the device refresher. Call once, after Drain().
  void Stop();
  // A start-up error found after listening (an engine server serving another model): the worker
  // sent itself SIGTERM, and the process should exit non-zero.
  bool failed() const { return failed_.load(); }

 private:
  Worker(WorkerConfig config, DeviceDescription device, LoadedEngine engine);
  absl::Status StartServers();
  void RefreshDeviceLoop();
  const EngineInfo& Info() const;
  void SetServing(bool serving);
  void ServeUpstream();

  WorkerConfig config_;
  DeviceDescription device_;
  LoadedEngine engine_;
  const pthread_t main_thread_;  // where termination signals are awaited (Start's caller)
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<WorkerMetrics> metrics_;
  std::unique_ptr<Scheduler> scheduler_;  // null in front of an engine server
  // Health changes of an engine server and the drain, in order: a draining worker stays so.
  absl::Mutex serving_mu_;
  bool draining_ ABSL_GUARDED_BY(serving_mu_) = false;
  std::atomic<bool> failed_{false};
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<MetricsServer> metrics_server_;
  HealthService health_;
  std::unique_ptr<grpc::Server> server_;
  std::string grpc_address_;
  std::string metrics_address_;

  absl::Mutex refresh_mu_;
  bool stopping_ ABSL_GUARDED_BY(refresh_mu_) = false;
  std::thread refresher_;
};

}  // namespace tandem::workers
