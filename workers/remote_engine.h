#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "tandem/v1/worker.pb.h"
#include "workers/engine.h"
#include "workers/scheduler.h"
#include "workers/worker_metrics.h"

namespace tandem::workers {

// An engine that runs elsewhere and takes whole requests (an engine server the worker fronts:
// workers/upstream/), as the worker service and the worker see it. The seam keeps the worker's
// core free of the HTTP client, so a build without the upstream engine (the GPU kit) links none.
class RemoteEngine {
 public:
  virtual ~RemoteEngine() = default;

  virtual const EngineInfo& Info() const = 0;
  // Starts its threads, which report into `metrics`. `on_ready` says each change between ready
  // and not ready; `on_fatal` a start-up error found once the engine answers.
  virtual void Start(WorkerMetrics* metrics, std::function<void(bool ready)> on_ready,
                     std::function<void(std::string)> on_fatal) = 0;
  // Later Submits get UNAVAILABLE; admitted work continues.
  virtual void Drain() = 0;
  virtual bool WaitIdle(std::chrono::steady_clock::time_point deadline) = 0;
  virtual void Stop() = 0;
  // Admits one request; RESOURCE_EXHAUSTED when full, UNAVAILABLE when not ready or draining,
  // and a status naming the field when the engine cannot honour the request.
  virtual absl::StatusOr<std::shared_ptr<Cancellation>> Submit(
      const tandem::v1::WorkerGenerateRequest& request, const std::string& request_id,
      std::chrono::steady_clock::time_point arrival, std::chrono::steady_clock::time_point deadline,
      std::shared_ptr<GenerationSink> sink) = 0;
  // Why requests are refused while it is not ready.
  virtual std::string NotReadyReason() const = 0;
  // Requests on their way to or in the engine, and waiting for that; and the limits of both.
  virtual int32_t in_flight() const = 0;
  virtual int32_t queued() const = 0;
  virtual int32_t max_in_flight() const = 0;
  virtual int32_t max_queue() const = 0;
  // Families the worker serves on its /metrics besides its own (the engine's raw series), or
  // null.
  virtual std::shared_ptr<prometheus::Collectable> EngineFamilies() const { return nullptr; }
};

}  // namespace tandem::workers
