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
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http_client.h"
#include "common/tls.h"
#include "tandem/v1/worker.pb.h"
#include "workers/engine.h"
#include "workers/remote_engine.h"
#include "workers/scheduler.h"
#include "workers/upstream/engine_metrics_mirror.h"
#include "workers/upstream/engine_process.h"
#include "workers/upstream/engine_profile.h"
#include "workers/upstream/upstream_options.h"
#include "workers/worker_metrics.h"

namespace tandem::workers::upstream {

// A worker engine that fronts one OpenAI-compatible engine server. Each admitted request is
// one streaming chat-completion call, made from a pool of max_in_flight dispatch threads; the
// stream is turned back into a native worker's text (ChatStreamDecoder) and handed to the
// worker's GenerationSink, so the gateway-worker contract stays one protocol.
class UpstreamEngine final : public RemoteEngine {
 public:
  enum class Health { kStarting, kReady, kDead };

  // Checks the options; contacts nothing yet.
  static absl::StatusOr<std::unique_ptr<UpstreamEngine>> Create(UpstreamOptions options,
                                                                EngineInfo info);
  ~UpstreamEngine();

  const EngineInfo& Info() const override { return info_; }
  const UpstreamOptions& options() const { return options_; }

  // Starts the dispatch threads and the health and metrics pollers, which report into
  // `metrics`. `on_ready` is called (on the health thread) at every change between ready and
  // starting or dead; `on_fatal` when the engine serves another model than the one asked for (a
  // start-up error, found once the engine answers). Submit only after Start.
  void Start(WorkerMetrics* metrics, std::function<void(bool ready)> on_ready,
             std::function<void(std::string)> on_fatal) override;
  // Later Submits get UNAVAILABLE; admitted work continues.
  void Drain() override ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) override ABSL_LOCKS_EXCLUDED(mu_);
  // Ends queued work with UNAVAILABLE, cancels running work and joins every thread; then stops
  // the engine when it is the worker's child.
  void Stop() override ABSL_LOCKS_EXCLUDED(mu_);

  // Admits one request: its engine request is built now (a field the engine cannot honour is
  // refused here), then it waits for a dispatch thread. RESOURCE_EXHAUSTED when the queue is
  // full; UNAVAILABLE while the engine is not ready, or draining.
  absl::StatusOr<std::shared_ptr<Cancellation>> Submit(
      const tandem::v1::WorkerGenerateRequest& request, const std::string& request_id,
      std::chrono::steady_clock::time_point arrival, std::chrono::steady_clock::time_point deadline,
      std::shared_ptr<GenerationSink> sink) override ABSL_LOCKS_EXCLUDED(mu_);

  Health health() const { return health_.load(); }
  // The engine's pid when the worker started it (--upstream_command), else 0.
  pid_t engine_pid() const { return process_ != nullptr ? process_->pid() : 0; }
  // Why a request is refused while the engine is not ready: starting, or failing its checks.
  std::string NotReadyReason() const override;
  // The worker's own counts: requests on their way to or in the engine, and waiting here.
  int32_t in_flight() const override { return in_flight_.load(); }
  int32_t queued() const override { return queued_.load(); }
  int32_t max_in_flight() const override { return options_.max_in_flight; }
  int32_t max_queue() const override { return options_.max_queue; }
  std::shared_ptr<prometheus::Collectable> EngineFamilies() const override { return mirror_; }

 private:
  struct Job;
  struct Stream;  // one call's engine stream as Run relays it
  UpstreamEngine(UpstreamOptions options, EngineInfo info);

  void DispatchLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // One engine call for `job`, from its dispatch to its OnFinished.
  void Run(Job& job, class StreamingPost& post);
  // Finishes `job` when it was cancelled or its deadline passed while it waited for a
  // dispatch thread; then true, and the engine never hears of it.
  bool EndedWhileQueued(Job& job, std::chrono::steady_clock::time_point dispatched);
  // Passes the engine's answer `bytes`, as they arrive, to the job's sink; a malformed stream
  // is DATA_LOSS, which aborts the call.
  absl::Status Relay(Job& job, Stream& stream, absl::string_view bytes);
  // Ends the call: the decoder's tail and the tokens told only by the usage, the finish
  // metrics, and OnFinished with `status` (the call's, see CallStatus in the .cc).
  void Complete(Job& job, Stream& stream, absl::Status status);
  void HealthLoop(std::function<void(bool)> on_ready, std::function<void(std::string)> on_fatal);
  absl::Status CheckServedModel();
  // --upstream_probe_interval: due when that long has passed since the last probe and nothing is
  // in flight (traffic flowing is proof enough); the probe asks the engine for one token.
  bool ProbeDue(std::chrono::steady_clock::time_point last_probe) const;
  absl::Status Probe(CurlHttpClient& http) ABSL_LOCKS_EXCLUDED(mu_);
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
  const std::shared_ptr<EngineMetricsMirror> mirror_;
};

}  // namespace tandem::workers::upstream
