#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "tandem/v1/worker.pb.h"
#include "workers/engine.h"
#include "workers/scheduler.h"
#include "workers/upstream/engine_process.h"
#include "workers/upstream/engine_profile.h"
#include "workers/worker_metrics.h"

namespace tandem::workers::upstream {

struct UpstreamOptions {
  // http(s)://HOST:PORT of the engine server (no path).
  std::string url;
  EngineProfile profile;
  std::string api_key;
  TlsFiles tls;
  // When set, the engine server is the worker's child (EngineProcess): this command, run by
  // /bin/sh with CUDA_VISIBLE_DEVICES from `device`, restarted when it dies, stopped (SIGTERM,
  // then SIGKILL after stop_timeout) with the worker.
  std::string command;
  std::string device;
  absl::Duration stop_timeout = absl::Seconds(30);
  // The model id the engine must serve (its /v1/models); empty: whatever it serves, when that
  // is one model.
  std::string served_model;
  bool vision = false;
  // Requests in flight to the engine at once, and waiting here for a slot.
  int32_t max_in_flight = 64;
  int32_t max_queue = 256;
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration idle_timeout = absl::Seconds(60);
  size_t max_event_bytes = 4 << 20;
  // Readiness: the engine's health endpoint every interval, each probe given `timeout` (busy
  // engines answer slowly; a slow answer is not a dead engine); `failures` failed probes in a
  // row after ready make it dead, `successes` good ones make it ready again.
  absl::Duration health_interval = absl::Seconds(1);
  absl::Duration health_timeout = absl::Seconds(10);
  int32_t health_failures = 3;
  int32_t health_successes = 2;
  // The engine's /metrics: polled this often; data older than `metrics_stale` is not used.
  absl::Duration metrics_interval = absl::Milliseconds(250);
  absl::Duration metrics_timeout = absl::Seconds(2);
  absl::Duration metrics_stale = absl::Seconds(5);
};

// INVALID_ARGUMENT naming the flag at fault.
absl::Status ValidateUpstreamOptions(const UpstreamOptions& options);

// A worker engine that fronts one OpenAI-compatible engine server. Each admitted request is
// one streaming chat-completion call, made from a pool of max_in_flight dispatch threads; the
// stream is turned back into a native worker's text (ChatStreamDecoder) and handed to the
// worker's GenerationSink, so the gateway-worker contract stays one protocol.
class UpstreamEngine {
 public:
  enum class Health { kStarting, kReady, kDead };

  // Checks the options; contacts nothing yet.
  static absl::StatusOr<std::unique_ptr<UpstreamEngine>> Create(UpstreamOptions options,
                                                                EngineInfo info);
  ~UpstreamEngine();

  const EngineInfo& Info() const { return info_; }
  const UpstreamOptions& options() const { return options_; }

  // Starts the dispatch threads and the health and metrics pollers, which report into
  // `metrics`. `on_health` is called (on the health thread) at every change of state;
  // `on_fatal` when the engine serves another model than the one asked for (a start-up error,
  // found once the engine answers). Submit only after Start.
  void Start(WorkerMetrics* metrics, std::function<void(Health)> on_health,
             std::function<void(std::string)> on_fatal);
  // Later Submits get UNAVAILABLE; admitted work continues.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends queued work with UNAVAILABLE, cancels running work and joins every thread; then stops
  // the engine when it is the worker's child.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Admits one request: its engine request is built now (a field the engine cannot honour is
  // refused here), then it waits for a dispatch thread. RESOURCE_EXHAUSTED when the queue is
  // full; UNAVAILABLE while the engine is not ready, or draining.
  absl::StatusOr<std::shared_ptr<Cancellation>> Submit(
      const tandem::v1::WorkerGenerateRequest& request, const std::string& request_id,
      std::chrono::steady_clock::time_point arrival, std::chrono::steady_clock::time_point deadline,
      std::shared_ptr<GenerationSink> sink) ABSL_LOCKS_EXCLUDED(mu_);

  Health health() const { return health_.load(); }
  // The engine's pid when the worker started it (--upstream_command), else 0.
  pid_t engine_pid() const { return process_ != nullptr ? process_->pid() : 0; }
  // Why a request is refused while the engine is not ready: starting, or failing its checks.
  std::string NotReadyReason() const;
  // The worker's own counts: requests on their way to or in the engine, and waiting here.
  int32_t in_flight() const { return in_flight_.load(); }
  int32_t queued() const { return queued_.load(); }

 private:
  struct Job;
  UpstreamEngine(UpstreamOptions options, EngineInfo info);

  void DispatchLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void Run(Job& job, class StreamingPost& post);
  void HealthLoop(std::function<void(Health)> on_health, std::function<void(std::string)> on_fatal);
  absl::Status CheckServedModel();
  // The engine's API key for the health, models and metrics GETs ("Authorization: Bearer").
  std::vector<std::string> AuthHeaders() const;
  void MetricsLoop();
  void PublishLoad(double engine_waiting, double engine_running) const;
  bool Sleep(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);

  const UpstreamOptions options_;
  EngineInfo info_;
  WorkerMetrics* metrics_ = nullptr;  // set by Start
  std::atomic<Health> health_{Health::kStarting};
  std::atomic<int32_t> in_flight_{0};
  std::atomic<int32_t> queued_{0};
  // The engine's own gauges as last read (fresh ones only; 0 when stale or absent).
  std::atomic<double> engine_waiting_{0};
  std::atomic<double> engine_running_{0};

  absl::Mutex mu_;
  // The model id requests name: --upstream_model, or the one the engine listed.
  std::string served_model_ ABSL_GUARDED_BY(mu_);
  absl::CondVar work_cv_;
  absl::CondVar idle_cv_;
  std::deque<std::unique_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stop_{false};  // running calls end at their next poll
  std::vector<std::thread> threads_;
  std::unique_ptr<EngineProcess> process_;  // with --upstream_command
};

}  // namespace tandem::workers::upstream
