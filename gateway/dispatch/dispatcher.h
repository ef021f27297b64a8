#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log_rate_limiter.h"
#include "common/request_validation.h"
#include "gateway/dispatch/decision_log.h"
#include "gateway/dispatch/fair_queue.h"
#include "gateway/dispatch/retry_budget.h"
#include "gateway/dispatch/timer_queue.h"
#include "gateway/intake/access.h"
#include "gateway/intake/intake.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pool/worker_pools.h"

namespace tandem::gateway {

class ShadowCall;

struct DispatchOptions {
  // May be null; with `log_prompt_text` records carry the prompt text too.
  DecisionLog* decision_log = nullptr;
  bool log_prompt_text = false;
  // Deadline of shadow copies (a policy's `shadow` action).
  absl::Duration shadow_timeout = absl::Seconds(60);
  // Applied to every worker call of a request whose caller set no deadline.
  absl::Duration default_deadline = absl::Seconds(300);
  // Workers are told to stop this much before the request's deadline (kWorkerTimeoutHeader), so
  // that their end of stream reaches the caller before its deadline passes.
  absl::Duration worker_deadline_offset = absl::Milliseconds(20);
  // A cancel this close to the caller's deadline is counted as DEADLINE_EXCEEDED, what the caller
  // saw: its own timer fires first, and its cancel can reach the gateway before the gateway's
  // timer (set when the call arrived, later than the caller set it) fires.
  absl::Duration deadline_cancel_window = absl::Milliseconds(100);
  // Attempts per request, the first included: retries before anything streamed, mid-stream
  // failovers and hedges each take one.
  int max_attempts = 3;
  // Retries over any 10 s at most max(retry_budget_min, retry_budget_ratio x requests started in
  // them); hedges in flight at most max(min, ratio x active requests); mid-stream failovers only
  // --max_attempts. gateway/dispatch/retry_budget.h says why they differ.
  double retry_budget_ratio = 0.2;
  int retry_budget_min = 3;
  // API keys -> tenants and their quotas; null serves everyone as one unlimited tenant.
  const TenantRegistry* tenants = nullptr;
  // Each model's dispatch slots, shared fairly between tenants; null (or a model missing):
  // no gateway-side queueing.
  const std::map<std::string, std::unique_ptr<FairQueue>>* queues = nullptr;
  // Longest wait for a dispatch slot before RESOURCE_EXHAUSTED.
  absl::Duration max_queue_wait = absl::Seconds(10);
  // Longest any generation (unary or stream) may run, whatever deadline the caller set.
  absl::Duration max_stream_duration = absl::Hours(1);
  // A stream whose worker sends no token for max(stall_timeout_min, stall_timeout_multiple x
  // its mean time per token) is failed over mid-answer, as if the worker had died; a zero
  // stall_timeout_min turns this off.
  absl::Duration stall_timeout_min = absl::Seconds(5);
  double stall_timeout_multiple = 20;
  // Worker addresses in answers (RouteInfo.worker, Recovery) for every tenant, not only admins.
  bool expose_worker_addresses = false;
  // Log lines a second for requests refused before dispatch (0: all).
  double rejected_log_per_second = RequestLimits{}.rejected_log_per_second;
};

// What every generation call shares, whichever front it came in by: the call context. Built once
// at start-up (gateway/gateway.cc) and handed to each call; what operators reload (policies,
// tenants) swaps inside the holders it points to, so a call reads one snapshot of each. It also
// counts the calls in flight, for draining, and owns the shadow copies.
class Dispatcher {
 public:
  // Everything pointed to outlives this object.
  Dispatcher(const Intake* intake, const WorkerPools* pools, GatewayMetrics* metrics,
             DispatchOptions options = {});
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  const Intake& intake() const { return *intake_; }
  const Access& access() const { return access_; }
  GatewayMetrics& metrics() { return *metrics_; }
  const DispatchOptions& options() const { return options_; }
  RetryBudget& retry_budget() { return retry_budget_; }
  LogRateLimiter& rejected_log() { return rejected_log_; }
  // The calls' timers (queue wait, hedge, stall watch).
  TimerQueue& timers() { return timers_; }
  // The dispatch queue of `model`; null when it has none.
  FairQueue* QueueFor(const std::string& model) const;

  // New generations get UNAVAILABLE from now on (those admitted finish).
  // Also cancels shadow copies in flight.
  void StartDraining() ABSL_LOCKS_EXCLUDED(shadow_mu_);
  bool draining() const { return draining_.load(std::memory_order_relaxed); }
  void RefusedWhileDraining();
  // Generations dispatched and not yet finished; for draining.
  int64_t inflight() const { return inflight_.load(std::memory_order_relaxed); }
  void CallStarted() ABSL_LOCKS_EXCLUDED(mu_);
  void CallEnded() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a call's closing reactions (OnDone, OnCancel) should run where gRPC completes it
  // rather than hop to gRPC's executor thread: with few calls in flight the hop costs a thread
  // wake-up per call (9% of the gateway's CPU per request with one call at a time); with many
  // the executor is awake anyway and takes that work off the threads reading the sockets
  // (inline cost 7% more CPU per request with 128 in flight). Measured with
  // scripts/bench_gateway_ab.sh.
  bool InlineReactions() const { return inflight() <= kInlineReactionsMaxInFlight; }
  static constexpr int64_t kInlineReactionsMaxInFlight = 4;
  // Waits until no generation is in flight: false when `deadline` came first.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns once no call was refused for draining for `quiet` (or at `deadline`). gRPC 1.51
  // answers a call that arrives as the server shuts down with CANCELLED, which clients do not
  // retry; while the gateway still serves, such a call gets UNAVAILABLE (retry elsewhere).
  // Waiting for a quiet moment leaves that race only to a caller that ignored it all along.
  void WaitQuiet(std::chrono::steady_clock::duration quiet,
                 std::chrono::steady_clock::time_point deadline);

  // The status a call ended with as its caller saw it: the caller's deadline passing cancels
  // the call (OnCancel, then the attempts end CANCELLED) but the caller sees DEADLINE_EXCEEDED,
  // and its own timer fires first, so its cancel can arrive just before ours: within
  // --deadline_cancel_window of `deadline` a cancel is the deadline (as the worker decides).
  grpc::Status AsCallerSawIt(const grpc::Status& status,
                             std::chrono::system_clock::time_point deadline) const;
  // Counts an admitted request's decision and writes it to the decision log, if there is one.
  void RecordDecision(const Admission& admission);
  // Sends a copy of an admitted request to `model`, answer discarded, measured in metrics.
  void StartShadow(const Admission& admission, const std::string& model)
      ABSL_LOCKS_EXCLUDED(shadow_mu_);
  void ShadowEnded(ShadowCall* call) ABSL_LOCKS_EXCLUDED(shadow_mu_);
  // A usable endpoint of `model` for a side call (a second opinion); null when it has none.
  std::shared_ptr<Endpoint> PickEndpoint(const std::string& model) const;

 private:
  const Intake* const intake_;
  const WorkerPools* const pools_;
  GatewayMetrics* const metrics_;
  const DispatchOptions options_;
  const Access access_;
  RetryBudget retry_budget_;
  LogRateLimiter rejected_log_;
  // Calls in flight: read per call (InlineReactions), so not behind a lock; mu_ orders the
  // signal when it drops to 0 after WaitIdle's check.
  std::atomic<int64_t> inflight_{0};
  absl::Mutex mu_;
  absl::CondVar idle_cv_;  // signalled under mu_ when inflight_ drops to 0
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> last_refused_ns_{0};  // steady clock: the last call refused for draining
  absl::Mutex shadow_mu_;
  std::set<ShadowCall*> shadows_ ABSL_GUARDED_BY(shadow_mu_);
  // Last: its thread stops first, before anything a callback might use goes.
  TimerQueue timers_;
};

}  // namespace tandem::gateway
