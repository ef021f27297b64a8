#pragma once

#include <atomic>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/log_rate_limiter.h"
#include "common/request_validation.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "workers/device.h"
#include "workers/engine.h"
#include "workers/image_pool.h"
#include "workers/remote_engine.h"
#include "workers/scheduler.h"
#include "workers/worker_metrics.h"

namespace tandem::workers {

// tandem.v1.Worker over the callback API. Reactors never block: generation runs on the
// scheduler's engine thread, which hands text to the reactor; one write is in flight at a time
// and text produced meanwhile is coalesced into the next chunk. Images are decoded and resized
// on the service's image pool (a full pool refuses with RESOURCE_EXHAUSTED), so gRPC's threads,
// which also answer health checks, never decode.
class WorkerService final : public tandem::v1::Worker::CallbackService {
 public:
  WorkerService(const Engine* engine, Scheduler* scheduler, WorkerMetrics* metrics,
                DeviceDescription device, RequestLimits limits,
                ImagePool::Options image_pool = ImagePool::Options());
  // A worker in front of an engine server (--engine=upstream): requests are validated here and
  // relayed by `upstream`, which also reports the load.
  WorkerService(RemoteEngine* upstream, WorkerMetrics* metrics, DeviceDescription device,
                RequestLimits limits);

  grpc::ServerWriteReactor<tandem::v1::WorkerGenerateChunk>* Generate(
      grpc::CallbackServerContext* context,
      const tandem::v1::WorkerGenerateRequest* request) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const tandem::v1::WorkerInfoRequest* request,
                                    tandem::v1::WorkerInfo* response) override
      ABSL_LOCKS_EXCLUDED(device_mu_);

  void SetState(tandem::v1::WorkerInfo::State state) { state_.store(state); }
  // Reported in WorkerInfo so the gateway can scrape this worker's metrics.
  // Where WorkerInfo says the /metrics endpoint is: its port, and whether it serves HTTPS.
  void SetMetricsEndpoint(int port, bool tls) {
    metrics_tls_.store(tls);
    metrics_port_.store(port);
  }
  // Re-reads device memory into metrics and worker info; called periodically by main.
  void RefreshDevice() ABSL_LOCKS_EXCLUDED(device_mu_);

 private:
  // Either engine_ and scheduler_ (a native engine or the simulator), or upstream_.
  const Engine* const engine_;
  Scheduler* const scheduler_;
  RemoteEngine* const upstream_ = nullptr;
  const EngineInfo& info_;
  WorkerMetrics* const metrics_;
  const RequestLimits limits_;
  LogRateLimiter rejected_log_;
  std::atomic<tandem::v1::WorkerInfo::State> state_{tandem::v1::WorkerInfo::STATE_LOADING};
  std::atomic<int> metrics_port_{0};
  std::atomic<bool> metrics_tls_{false};
  absl::Mutex device_mu_;
  DeviceDescription device_ ABSL_GUARDED_BY(device_mu_);
  // Last: destroyed first, its queued jobs run while everything they use is still here.
  std::unique_ptr<ImagePool> image_pool_;
};

}  // namespace tandem::workers
