#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/pool/worker_client.h"
#include "tandem/v1/admin.pb.h"
#include "tandem/v1/gateway.pb.h"

namespace tandem::gateway {

class GatewayMetrics;

// Circuit breaker of one endpoint. Closed: takes traffic. Open: ejected by passive outlier
// detection (failed calls); no traffic. Half-open: the ejection time is over and the next
// active probe decides (readmit, or eject again for twice as long).
enum class BreakerState { kClosed = 0, kOpen = 1, kHalfOpen = 2 };
const char* BreakerStateName(BreakerState s);

// How a finished worker call counts for outlier detection.
enum class CallOutcome {
  kSuccess,      // resets the failure count
  kNeutral,      // the caller's doing (bad request, cancel, its deadline, a full queue)
  kWorkerFault,  // UNAVAILABLE, transport errors, timeouts the caller did not cause
  kInternal,     // INTERNAL: a sick worker only when repeated
  kStalled,      // a stream it sent no token on within the stall timeout: hung, or far too slow
};
// `caller_deadline_passed`: DEADLINE_EXCEEDED is the caller's deadline, not the worker's fault.
CallOutcome ClassifyCall(grpc::StatusCode code, bool caller_deadline_passed);

struct EndpointOptions {
  // Consecutive worker faults (or INTERNAL errors) that eject an endpoint.
  int failure_threshold = 3;
  int internal_error_threshold = 5;
  // Consecutive stalled streams that eject it (latency-based outlier detection): all the streams
  // of a hung worker stall at once, while a healthy one stalls almost never.
  int stall_threshold = 2;
  // First ejection lasts `base_ejection`; each re-ejection from half-open doubles it, up to
  // `max_ejection`. Readmission also needs a passing active probe.
  absl::Duration base_ejection = absl::Milliseconds(200);
  absl::Duration max_ejection = absl::Milliseconds(800);
};

// One worker endpoint and what the gateway knows about it: active health (grpc.health.v1
// Check, then GetInfo), passive outlier detection, outstanding calls and scraped load.
// What the intake checks each request against, from a worker's last successful WorkerInfo;
// `known` is false before any probe succeeded.
struct ModelFacts {
  bool known = false;
  bool vision = false;
  int32_t max_output_tokens = 0;
};

class Endpoint : public std::enable_shared_from_this<Endpoint> {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  Endpoint(std::string model, std::unique_ptr<WorkerClient> client, EndpointOptions options,
           GatewayMetrics* metrics);
  // Probe timeouts in a row that make a ready endpoint not ready (see WorkerPoolsOptions).
  void set_probe_timeouts(int n) { probe_timeouts_allowed_ = n; }
  ~Endpoint();

  WorkerClient& client() { return *client_; }
  const std::string& model() const { return model_; }
  const std::string& address() const { return client_->address(); }
  // Active health: the last probe found it SERVING and READY for this model.
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // Ready and not ejected: may take traffic.
  bool usable() const { return ready() && breaker() != BreakerState::kOpen; }
  // Silent rather than failing: its probes timed out until it was taken out of service, or its
  // streams stalled until it was ejected. Calls on it still waiting for a first token are given
  // up and retried elsewhere; a worker that only drains or refuses is not unresponsive.
  bool unresponsive() const {
    return probes_timed_out_.load(std::memory_order_acquire) ||
           stall_ejected_.load(std::memory_order_acquire);
  }
  BreakerState breaker() const { return breaker_.load(std::memory_order_acquire); }
  int outstanding() const { return outstanding_.load(std::memory_order_relaxed); }
  void AddOutstanding(int delta) { outstanding_.fetch_add(delta, std::memory_order_relaxed); }
  // Requests running plus waiting on the worker at its last scrape; -1 before any scrape.
  int64_t scraped_load() const { return scraped_load_.load(std::memory_order_relaxed); }
  void set_scraped_load(int64_t v) { scraped_load_.store(v, std::memory_order_relaxed); }
  // The worker's /metrics URL from its WorkerInfo; empty until known.
  std::string metrics_url() const ABSL_LOCKS_EXCLUDED(mu_);

  // Last successful WorkerInfo, and the reason it is not usable (empty when usable).
  tandem::v1::WorkerInfo info() const ABSL_LOCKS_EXCLUDED(mu_);
  // The model facts of that WorkerInfo, read without a lock or a copy.
  ModelFacts facts() const;
  std::string not_ready_reason() const ABSL_LOCKS_EXCLUDED(mu_);
  tandem::v1::EndpointStatus Describe() const ABSL_LOCKS_EXCLUDED(mu_);

  // Passive outlier detection: called once per finished worker call.
  void RecordCall(CallOutcome outcome, TimePoint now) ABSL_LOCKS_EXCLUDED(mu_);
  // The timer side of the breaker: moves an open breaker whose ejection is over to half-open.
  void Tick(TimePoint now) ABSL_LOCKS_EXCLUDED(mu_);

  // Issues one asynchronous probe unless one is in flight; `on_change` runs when usability
  // flips. `timeout` bounds each RPC of the probe.
  void Probe(absl::Duration timeout, const std::function<void()>& on_change)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels an in-flight probe and waits for its callback; for shutdown.
  void StopProbing() ABSL_LOCKS_EXCLUDED(mu_);
  // A probe started by Probe has not finished yet.
  bool probing() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void HealthDone(const grpc::Status& status, absl::Duration timeout,
                  const std::function<void()>& on_change) ABSL_LOCKS_EXCLUDED(mu_);
  void ProbeDone(const grpc::Status& status, const std::string& health_failure,
                 const std::function<void()>& on_change) ABSL_LOCKS_EXCLUDED(mu_);
  void Eject(TimePoint now, const char* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExportState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string model_;
  const std::unique_ptr<WorkerClient> client_;
  const EndpointOptions options_;
  GatewayMetrics* const metrics_;
  std::atomic<bool> ready_{false};
  std::atomic<BreakerState> breaker_{BreakerState::kClosed};
  std::atomic<int> outstanding_{0};
  std::atomic<int64_t> scraped_load_{-1};
  std::atomic<int> probe_timeouts_allowed_{3};
  std::atomic<bool> probes_timed_out_{false};  // until a probe is answered
  std::atomic<bool> stall_ejected_{false};     // until readmitted
  // ModelFacts packed: max_output_tokens in the low 32 bits, known and vision above.
  std::atomic<uint64_t> facts_{0};

  mutable absl::Mutex mu_;
  absl::CondVar probe_cv_;  // probe_in_flight_ became false
  tandem::v1::WorkerInfo info_ ABSL_GUARDED_BY(mu_);
  std::string not_ready_reason_ ABSL_GUARDED_BY(mu_) = "not probed yet";
  int consecutive_faults_ ABSL_GUARDED_BY(mu_) = 0;
  int consecutive_internal_ ABSL_GUARDED_BY(mu_) = 0;
  int consecutive_stalls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ejections_ ABSL_GUARDED_BY(mu_) = 0;
  int consecutive_probe_timeouts_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration ejection_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  TimePoint ejected_until_ ABSL_GUARDED_BY(mu_);
  std::string last_fault_ ABSL_GUARDED_BY(mu_);
  bool probe_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // The pointer is guarded; the context itself is used by the one probe in flight.
  std::unique_ptr<grpc::ClientContext> probe_context_ ABSL_GUARDED_BY(mu_);
  // Used by the probe in flight alone (probe_in_flight_ hands them from one probe to the next).
  grpc::health::v1::HealthCheckRequest health_request_;
  grpc::health::v1::HealthCheckResponse health_response_;
  tandem::v1::WorkerInfoRequest probe_request_;
  tandem::v1::WorkerInfo probe_response_;
};

using EndpointList = std::vector<std::shared_ptr<Endpoint>>;

}  // namespace tandem::gateway
