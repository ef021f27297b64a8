#pragma once

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/dispatch/call_alarm.h"
#include "gateway/dispatch/call_usage.h"
#include "gateway/dispatch/caller_context.h"
#include "gateway/dispatch/dispatcher.h"
#include "gateway/dispatch/fair_queue.h"
#include "gateway/dispatch/generation_attempts.h"
#include "gateway/dispatch/queue_wait.h"
#include "gateway/dispatch/retry_advice.h"
#include "gateway/dispatch/second_opinion_call.h"
#include "gateway/dispatch/worker_attempt.h"
#include "gateway/intake/intake.h"
#include "gateway/intake/tenants.h"
#include "gateway/metrics/gateway_metrics.h"
#include "tandem/v1/gateway.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

// What Generate and GenerateStream share: intake (authentication, admission, the tenant's
// quotas, the dispatch queue), the worker attempts, accounting and logging. The decisions over
// the attempts (which one's chunks reach the caller; retries, mid-stream failovers, hedges, the
// stall watch) are GenerationAttempts'; this class is their gRPC side: each attempt is a
// client reactor to a worker, and their events, its timers' and the caller's become calls on
// GenerationAttempts, whose answers it carries out. A subclass is the server reactor: it relays
// the committed attempt's chunks to the caller and finishes the call.
//
// Lifetime: one reference for the server reactor, one per live attempt, one per pending timer
// (queue wait, hedge, stall watch) and one while a dispatch grant runs; the object deletes itself
// when the last goes. An attempt has its own references: gRPC's, dropped in OnDone, and one for
// each Cancel in progress on another thread.
class GenerationCall : private GenerationAttempts::Environment,
                       private WorkerAttempt::Owner,
                       private QueueWait::Owner {
 public:
  GenerationCall(const GenerationCall&) = delete;
  // The request; the subclass fills it (from the caller's bytes) before Begin.
  tandem::v1::GenerateRequest& request() { return request_; }
  // What Begin decided (set once the first attempt starts).
  const Admission& admission() const { return admission_; }
  GenerationCall& operator=(const GenerationCall&) = delete;

 protected:
  // `rpc` names the call in logs ("Generate", "chat.completions", ...).
  GenerationCall(Dispatcher* dispatcher, std::unique_ptr<CallerContext> caller, const char* rpc);
  ~GenerationCall() override;

  // Authenticates, validates, routes and applies the tenant's quotas; then starts the first
  // attempt, or queues for a dispatch slot (the attempt then starts when one frees). `parsed` is
  // how decoding request() went: an error is the call's answer once the caller is authenticated.
  // An error means nothing was started and the caller finishes the call with it.
  absl::Status Begin(const absl::Status& parsed) ABSL_LOCKS_EXCLUDED(mu_);

  // A chunk of the committed attempt; the subclass relays it and calls Resume() when ready for
  // the next.
  virtual void Relay(const tandem::v1::WorkerGenerateChunk& chunk) = 0;
  // The outcome of the whole call; called exactly once, after the last Relay.
  virtual void Complete(const grpc::Status& status) = 0;

  Dispatcher* dispatcher() const { return dispatcher_; }
  CallerContext& caller() const { return *context_; }
  // Reads the next chunk of the committed attempt.
  void Resume() ABSL_LOCKS_EXCLUDED(mu_);
  // The caller went away: leaves the queue, or cancels every attempt and timer.
  void CancelAll() ABSL_LOCKS_EXCLUDED(mu_);

  // The final chunk's (or answer's) usage, timings and, when there was any, recovery.
  void FillFinal(tandem::v1::Usage* usage, tandem::v1::Timings* timings,
                 tandem::v1::Recovery* recovery) const ABSL_LOCKS_EXCLUDED(mu_);
  // Metrics and the end log line; exactly once per call.
  void Record(const grpc::Status& ended) ABSL_LOCKS_EXCLUDED(mu_);
  // Gives the dispatch slot, if this call holds one, to the next waiter, whose dispatch runs on
  // this thread: called after Finish, so this call's answer does not wait for that. The caller
  // holds a reference across it (a reaction, an attempt's end).
  void ReleaseSlot();
  // The status the caller gets: with retry advice when a refusal may be retried.
  grpc::Status Detailed(const grpc::Status& status) const { return retry_advice_.Detailed(status); }
  // The retry advice of a refusal; zero when none.
  absl::Duration retry_after() const { return retry_advice_.after(); }

  // Drops the server reactor's reference (its OnDone).
  void Unref() override;
  // Another reference, for a front that may call in after it let the call go (Unref).
  void Ref() override { refs_.fetch_add(1, std::memory_order_relaxed); }

  const Disclosure& disclosure() const { return disclosure_; }

 private:
  using Attempt = WorkerAttempt;
  using SteadyClock = std::chrono::steady_clock;

  // Begin's steps.
  absl::Status Admit();
  // Asks the policy's second-opinion model about an unsure request (the decision's
  // second_opinion); false, with the decision standing, when that model has no usable worker.
  bool AskSecondOpinion() ABSL_LOCKS_EXCLUDED(mu_);
  // Its answer (on a gRPC thread): admits the request again with it, then goes on as Begin.
  void OnSecondOpinion(const std::string& request_class, const grpc::Status& status,
                       SteadyClock::time_point asked) ABSL_LOCKS_EXCLUDED(mu_);
  // Begin's steps after the routing decision: metrics, the tenant's tokens, the session, the
  // queue.
  absl::Status Proceed();
  void CountAdmitted();
  absl::Status ReserveTenantTokens();
  absl::Status Enqueue();
  absl::Status RefuseQueueFull(const std::string& tenant);

  // When a refusal may be retried: said as RetryInfo (with a QuotaFailure naming
  // `quota_subject` when a quota refused) in the status details (Detailed), and as the
  // retry-after-ms trailer (HTTP's Retry-After in milliseconds) for clients without
  // error-details support.
  void SetRetryAfter(double seconds, std::string quota_subject = "");

  // QueueWait::Owner: the dispatch queue.
  void OnSlotGranted() override;
  void OnQueueTimeout() override;

  // Starts the first attempt. After a wait in the queue the endpoint is picked again: the one
  // chosen at admission may have gone since.
  void Dispatch(bool waited) ABSL_LOCKS_EXCLUDED(mu_);
  // The endpoint for a request that waited for its slot; false when there is none (the call is
  // then complete).
  bool RepickAfterWait();
  void SetDeadlines(std::chrono::system_clock::time_point now);
  void StartFirstAttempt() ABSL_LOCKS_EXCLUDED(mu_);
  void ArmHedge();

  // WorkerAttempt::Owner: attempt events.
  void OnAttemptChunk(Attempt* a) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnAttemptReadEnded(Attempt* a) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnAttemptDone(Attempt* a, const grpc::Status& status) override ABSL_LOCKS_EXCLUDED(mu_);
  // Whether an attempt that ended with `status` was cancelled by the stall watch while the
  // caller stayed: its end is then the worker's fault.
  bool EndedByStall(const Attempt& a, const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Completes the call when an attempt's end decided its outcome.
  void CompleteIfDone(const GenerationAttempts::EndActions& actions);

  // Timers.
  void OnHedgeAlarm(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void StartStallWatch() ABSL_LOCKS_EXCLUDED(mu_);
  void OnStallAlarm(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  // Sets the stall watch's timer `after` from now: its first check (`first`), or the next.
  void SetStallAlarm(SteadyClock::duration after, bool first);
  void StopTimers();

  // A reactor for a new attempt, live from now; the caller starts it once mu_ is released.
  Attempt* AddAttempt(GenerationAttempts::NewAttempt start) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live attempts `ids`, each with a reference for CancelAndUnref: an attempt may end
  // (OnDone, then delete) on a gRPC thread at any moment, so one is cancelled only with a
  // reference taken while holding mu_ (OnAttemptDone removes it from live_ under mu_ before
  // gRPC's reference goes), and the cancel never touches a freed ClientContext.
  std::vector<Attempt*> RefLive(const std::vector<GenerationAttempts::AttemptId>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Record's per-tenant part.
  void RecordTenant(const grpc::Status& status, SteadyClock::time_point now);
  // An endpoint choice's error as the caller may see it: Pick lists every endpoint and why.
  absl::Status ForCaller(const absl::Status& status) const;

  // GenerationAttempts::Environment. Called with mu_ held.
  SteadyClock::time_point Now() const override;
  absl::StatusOr<AttemptTarget> PickTarget(
      const std::vector<const AttemptTarget*>& exclude) override;
  bool TryRetry() override;
  bool TryHedge() override;
  void ReleaseHedge() override;
  bool CallerGone() const override;
  bool Unresponsive(const AttemptTarget& target) const override;
  bool AnotherUsable(const AttemptTarget& target) const override;
  void CountRetry(const std::string& model, const char* reason) override;
  void CountFailover(const std::string& from_model, const std::string& to_model) override;
  void CountHedge(const std::string& model, bool won) override;
  void CountRetryBudgetExhausted() override;
  void CountStall(const std::string& model) override;

  Dispatcher* const dispatcher_;
  // Lives as long as this object: attempts' contexts may refer to the caller's call.
  const std::unique_ptr<CallerContext> context_;
  tandem::v1::GenerateRequest request_;
  const char* const rpc_;
  const SteadyClock::time_point arrival_;
  // Set by Begin and Dispatch, read-only once the first attempt starts.
  Admission admission_;
  Disclosure disclosure_;  // set once the caller is known
  GatewayMetrics::Model* model_metrics_ = nullptr;
  TenantRegistry::Caller caller_;
  bool started_ = false;
  bool tenant_admitted_ = false;
  int64_t reserved_tokens_ = 0;
  // Counted in the dispatcher's in-flight calls (drain waits for it).
  bool counted_ = false;
  RetryAdvice retry_advice_;
  std::chrono::system_clock::time_point attempt_deadline_;
  // attempt_deadline_ less --worker_deadline_offset: when workers are told to stop.
  std::chrono::system_clock::time_point worker_deadline_;

  CallUsage usage_;  // of the relayed answer, for FillFinal and Record

  QueueWait queue_wait_;
  CallAlarm hedge_alarm_;
  CallAlarm stall_alarm_;
  std::atomic<int> refs_{1};

  mutable absl::Mutex mu_;
  // The second opinion in flight (CancelAll cancels it), and whether it has answered.
  SecondOpinionCall* second_opinion_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool second_opinion_answered_ ABSL_GUARDED_BY(mu_) = false;
  GenerationAttempts attempts_ ABSL_GUARDED_BY(mu_);
  // The reactors of attempts_'s live attempts.
  std::vector<Attempt*> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway
