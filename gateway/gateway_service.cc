#include "gateway/gateway_service.h"

#include <grpc/grpc.h>
#include <grpcpp/alarm.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/call_metadata.h"
#include "common/grpc_status.h"
#include "common/log_text.h"
#include "common/proto_request.h"
#include "router/decision_record.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {
namespace {

constexpr char kShadowSuffix[] = "-shadow";

using SteadyClock = std::chrono::steady_clock;
using tandem::v1::GenerateRequest;
using tandem::v1::WorkerGenerateChunk;

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string MetadataRequestId(const grpc::CallbackServerContext* context) {
  const auto& md = context->client_metadata();
  auto it = md.find("x-request-id");
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

void FillRoute(const Admission& a, Disclosure disclosure, tandem::v1::RouteInfo* route) {
  route->set_model(a.decision.model);
  route->set_request_class(a.decision.request_class);
  route->set_rule(a.decision.rule);
  // A policy's reason lists the conditions that matched, which may name other tenants.
  route->set_reason(disclosure.explain ? a.decision.reason
                                       : absl::StrCat("rule '", a.decision.rule, "' matched"));
  route->set_policy_version(a.decision.policy_version);
  if (a.endpoint != nullptr && disclosure.workers) route->set_worker(a.endpoint->address());
}

bool HasRecovery(const tandem::v1::Recovery& r) {
  return r.retries() > 0 || r.failovers() > 0 || r.hedged() || r.events_size() > 0;
}

// What Generate and GenerationStream share: intake, the worker attempts (first, retries,
// mid-stream failovers, hedges), accounting and logging. Exactly one attempt is "committed" at
// a time: the one whose chunks reach the client. The first attempt to deliver a chunk commits;
// any other still racing (a hedge) is cancelled.
//
// Lifetime: one reference for the server reactor, one per live attempt, one for a pending hedge
// alarm; the object deletes itself when the last goes. An attempt has its own references: gRPC's,
// dropped in OnDone, and one for each Cancel in progress on another thread.
class GenerationCall {
 public:
  // `bytes` is the request as received; it is parsed here, and a parse error is the call's
  // answer once the caller is authenticated.
  GenerationCall(GatewayService* service, grpc::CallbackServerContext* context,
                 const grpc::ByteBuffer* bytes, const char* rpc)
      : service_(service),
        context_(context),
        server_call_(context->c_call()),
        parsed_(ParseRequest(*bytes, &request_)),
        rpc_(rpc),
        arrival_(SteadyClock::now()) {
    grpc_call_ref(server_call_);
  }
  virtual ~GenerationCall() {
    grpc_call_unref(server_call_);
    // Here, not when the caller got its answer: a copy that lost a hedge race, or a pending
    // alarm, may call into this object until its last reference goes, and a drain must wait for
    // that too.
    if (counted_) service_->CallEnded();
  }

  // One call to one worker.
  class Attempt final : public grpc::ClientReadReactor<WorkerGenerateChunk> {
   public:
    Attempt(GenerationCall* owner, Target target, tandem::v1::WorkerGenerateRequest request,
            bool hedge)
        : owner_(owner),
          target_(std::move(target)),
          request_(std::move(request)),
          hedge_(hedge),
          context_(grpc::ClientContext::FromCallbackServerContext(*owner->context_)) {
      // Propagation already bounds this by the caller's deadline; this adds the default.
      context_->set_deadline(owner->attempt_deadline_);
      AddWorkerTimeout(owner->worker_deadline_, context_.get());
      context_->AddMetadata("x-request-id", request_.request_id());
    }
    void Start() {
      target_.endpoint->AddOutstanding(1);
      target_.endpoint->client().Generate(context_.get(), &request_, this);
      // The hold keeps the call alive until its end of stream is read: reads are started from
      // other reactions, and without it the call could complete between them.
      AddHold();
      StartRead(&in_);
      StartCall();
    }
    // A read after a chunk: from here until the next chunk, the worker is the one keeping the
    // stream waiting (the stall watch measures this; the first read waits on prefill instead).
    void Read() {
      reading_since_ns_.store(SteadyClock::now().time_since_epoch().count(),
                              std::memory_order_relaxed);
      StartRead(&in_);
    }
    // When the outstanding read after a chunk started; nullopt when none is outstanding.
    std::optional<SteadyClock::time_point> reading_since() const {
      const int64_t ns = reading_since_ns_.load(std::memory_order_relaxed);
      if (ns == 0) return std::nullopt;
      return SteadyClock::time_point(SteadyClock::duration(ns));
    }
    // Cancelled by the stall watch: its end is a worker fault, failed over like a dead worker.
    void MarkStalled() { stalled_.store(true, std::memory_order_relaxed); }
    bool stalled() const { return stalled_.load(std::memory_order_relaxed); }
    // An attempt may end (OnDone, then delete) on a gRPC thread at any moment, so one found in
    // live_ is cancelled only with a reference taken while holding mu_ (OnAttemptDone removes it
    // from live_ under mu_ before gRPC's reference goes): CancelAndUnref then never touches a
    // freed ClientContext.
    void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
    void CancelAndUnref() {
      context_->TryCancel();
      Unref();
    }
    const WorkerGenerateChunk& chunk() const { return in_; }
    Endpoint* endpoint() const { return target_.endpoint.get(); }
    const ModelPool& pool() const { return *target_.pool; }
    const std::shared_ptr<Endpoint>& endpoint_ref() const { return target_.endpoint; }
    const std::string& model() const { return target_.pool->name(); }
    bool hedge() const { return hedge_; }
    // A mid-stream failover's attempt: it continues the answer relayed so far.
    bool continuation() const { return request_.continue_final_message(); }
    SteadyClock::time_point created() const { return created_; }
    // Cancelled because another copy committed first; its chunks and its end decide nothing.
    // Guarded by the owner's mu_.
    void MarkLost() { lost_ = true; }
    bool lost() const { return lost_; }
    // Whether this copy still holds a unit of the retry budget's hedges. Guarded by the owner's
    // mu_.
    bool holds_hedge_unit() const { return holds_hedge_unit_; }
    void set_holds_hedge_unit(bool holds) { holds_hedge_unit_ = holds; }

    void OnReadDone(bool ok) override {
      reading_since_ns_.store(0, std::memory_order_relaxed);
      if (ok) {
        owner_->OnAttemptChunk(this);
      } else {
        RemoveHold();  // end of stream: OnDone follows with the status
      }
    }
    void OnDone(const grpc::Status& status) override {
      owner_->OnAttemptDone(this, status);
      Unref();
    }

   private:
    void Unref() {
      if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
    }

    GenerationCall* const owner_;
    const Target target_;
    const tandem::v1::WorkerGenerateRequest request_;
    const bool hedge_;
    const SteadyClock::time_point created_ = SteadyClock::now();
    std::unique_ptr<grpc::ClientContext> context_;
    WorkerGenerateChunk in_;
    std::atomic<int> refs_{1};       // gRPC's until OnDone, plus one per CancelAndUnref to come
    bool lost_ = false;              // guarded by the owner's mu_
    bool holds_hedge_unit_ = false;  // guarded by the owner's mu_
    std::atomic<int64_t> reading_since_ns_{0};  // steady clock; 0: no read after a chunk pending
    std::atomic<bool> stalled_{false};
  };

 protected:
  // Authenticates, validates, routes and applies the tenant's quotas; then starts the first
  // attempt, or queues for a dispatch slot (the attempt then starts when one frees). An error
  // means nothing was started and the caller finishes the call with it.
  absl::Status Begin() {
    // Named before anything can refuse the request, so every end line carries it (Admit
    // validates it, and replaces it when invalid).
    admission_.request_id = LoggableRequestId(request_, MetadataRequestId(context_));
    if (service_->draining()) {
      service_->RefusedWhileDraining();
      return absl::UnavailableError("gateway is draining; retry on another replica");
    }
    absl::StatusOr<TenantRegistry::Caller> caller = service_->Authenticate(context_);
    if (!caller.ok()) return caller.status();
    caller_ = std::move(*caller);
    disclosure_ = service_->DisclosureFor(caller_);
    if (!parsed_.ok()) return parsed_;
    const auto admit_start = SteadyClock::now();
    absl::Status s =
        service_->intake().Admit(request_, MetadataRequestId(context_), context_->deadline(), false,
                                 &admission_, caller_.spec);
    service_->metrics().decision_duration().Observe(Seconds(SteadyClock::now() - admit_start));
    if (!s.ok()) {
      if (admission_.retry_after_seconds > 0) {
        SetRetryAfter(admission_.retry_after_seconds);
        service_->metrics().CountShed(admission_.decision.request_class);
        service_->metrics().CountDecision(
            admission_.decision.model, admission_.decision.request_class, admission_.decision.rule,
            admission_.decision.policy_version);
      }
      if (s.code() == absl::StatusCode::kPermissionDenied) {
        service_->metrics().CountAuthFailure("model_denied");
      }
      return ForCaller(s);
    }
    const auto& d = admission_.decision;
    if (!admission_.fell_back_from.empty()) {
      service_->metrics().CountFallback(admission_.fell_back_from, d.model);
    }
    model_metrics_ = service_->metrics().ForModel(d.model);
    service_->metrics().CountDecision(d.model, d.request_class, d.rule, d.policy_version);
    if (DecisionLog* log = service_->decision_log()) {
      tandem::v1::DecisionRecord record = router::ToRecord(admission_.features, d);
      record.set_request_id(admission_.request_id);
      record.set_time_unix_seconds(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
      // The text the learned tier read (bounded), so replay classifies exactly what live did.
      if (service_->log_prompt_text()) record.set_prompt_text(admission_.features.classifier_text);
      log->Record(std::move(record));
    }

    if (caller_.tenant != nullptr) {
      // The reservation: the prompt (estimated) and every token the request may generate.
      reserved_tokens_ =
          admission_.features.prompt_tokens + admission_.worker_request.sampling().max_tokens();
      if (auto refusal = caller_.tenant->TryAdmit(reserved_tokens_, SteadyClock::now())) {
        service_->metrics().CountThrottled(caller_.tenant->metrics().label, refusal->reason);
        SetRetryAfter(refusal->retry_after_seconds, "tenant:" + caller_.tenant->name());
        return absl::ResourceExhaustedError(absl::StrFormat(
            "%s; retry after %.3fs", refusal->message, refusal->retry_after_seconds));
      }
      tenant_admitted_ = true;
    }
    // Counted from here so a drain waits for queued requests too.
    service_->CallStarted();
    counted_ = true;

    // The decided model's slots: fairness between tenants holds where that model's workers are
    // full, not only at the gateway's own limit.
    FairQueue* queue = queue_ = service_->QueueFor(admission_.pool->name());
    const std::string label = caller_.tenant != nullptr ? caller_.tenant->name() : "anonymous";
    if (queue == nullptr) {
      Dispatch(false);
      return absl::OkStatus();
    }
    waiter_.tenant = label;
    // Granted from FairQueue::Release on the thread of the call that finished: start on a gRPC
    // thread instead, so that call is not held up and a run of grants cannot nest (a grant whose
    // dispatch fails at once releases its slot to the next waiter).
    waiter_.grant = [this] {
      refs_.fetch_add(1, std::memory_order_relaxed);
      grant_alarm_.Set(std::chrono::system_clock::now(), [this](bool) {
        OnGranted();
        Unref();
      });
    };
    const int priority = caller_.spec != nullptr ? caller_.spec->priority : 1;
    // Held until the wait is set up: a slot freed on another thread right after Acquire must
    // not grant this call before its alarm and gauges exist.
    std::unique_lock<std::mutex> queue_lock(queue_mu_);
    switch (queue->Acquire(&waiter_, priority)) {
      case FairQueue::Result::kRun:
        queue_lock.unlock();
        slot_held_.store(true);
        Dispatch(false);
        return absl::OkStatus();
      case FairQueue::Result::kFull: {
        if (caller_.tenant != nullptr) {
          service_->metrics().CountThrottled(caller_.tenant->metrics().label, "queue_full");
        }
        const double wait = absl::ToDoubleSeconds(service_->options().max_queue_wait) / 10;
        SetRetryAfter(wait, caller_.tenant != nullptr ? "tenant:" + caller_.tenant->name() : "");
        return absl::ResourceExhaustedError(absl::StrFormat(
            "the gateway is at --max_inflight and tenant '%s' already has --max_queued requests "
            "waiting; retry after %.3fs",
            label, wait));
      }
      case FairQueue::Result::kQueued:
        break;
    }
    queued_at_ = SteadyClock::now();
    if (caller_.tenant != nullptr) caller_.tenant->metrics().queued->Increment();
    if (auto* m = service_->metrics().ForModel(admission_.pool->name())) m->queued->Increment();
    refs_.fetch_add(1, std::memory_order_relaxed);
    queue_alarm_.Set(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(service_->options().max_queue_wait),
                     [this](bool ok) { OnQueueAlarm(ok); });
    return absl::OkStatus();
  }

  // When a refusal may be retried: said as RetryInfo (with a QuotaFailure naming
  // `quota_subject` when a quota refused) in the status details (Detailed), and as the
  // retry-after-ms trailer (HTTP's Retry-After in milliseconds) for clients without
  // error-details support.
  void SetRetryAfter(double seconds, std::string quota_subject = "") {
    retry_after_ = absl::Seconds(seconds);
    quota_subject_ = std::move(quota_subject);
    context_->AddTrailingMetadata("retry-after-ms",
                                  std::to_string(static_cast<int64_t>(std::ceil(seconds * 1000))));
  }
  // The status the caller gets.
  grpc::Status Detailed(const grpc::Status& status) const {
    if (status.ok() || retry_after_ <= absl::ZeroDuration()) return status;
    return WithRetryInfo(status, retry_after_, quota_subject_);
  }

  // Leaves the dispatch queue: true when this call was waiting there (and now is not).
  bool LeaveQueue() {
    FairQueue* queue = queue_;
    if (queue == nullptr || !queue->Cancel(&waiter_)) return false;
    QueueWaitEnded();
    return true;
  }

  void QueueWaitEnded() {
    service_->metrics().queue_wait().Observe(Seconds(SteadyClock::now() - queued_at_));
    if (caller_.tenant != nullptr) caller_.tenant->metrics().queued->Decrement();
    if (auto* m = service_->metrics().ForModel(admission_.pool->name())) m->queued->Decrement();
  }

  void OnGranted() {
    { std::lock_guard<std::mutex> l(queue_mu_); }  // Begin has finished setting up the wait
    QueueWaitEnded();
    slot_held_.store(true);
    queue_alarm_.Cancel();  // its callback runs with ok=false and drops its reference
    Dispatch(true);
  }

  void OnQueueAlarm(bool ok) {
    if (ok && LeaveQueue()) {
      if (caller_.tenant != nullptr) {
        service_->metrics().CountThrottled(caller_.tenant->metrics().label, "queue_timeout");
      }
      SetRetryAfter(1);
      Complete(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("waited ", absl::FormatDuration(service_->options().max_queue_wait),
                       " for a dispatch slot (--max_queue_wait); the gateway is at "
                       "--max_inflight; retry after 1s")));
    }
    Unref();
  }

  // Starts the first attempt. After a wait in the queue the endpoint is picked again: the one
  // chosen at admission may have gone since.
  void Dispatch(bool waited) {
    if (waited) {
      absl::StatusOr<Target> target = service_->intake().PickTarget(admission_, {});
      if (!target.ok()) {
        Complete(ToGrpcStatus(ForCaller(target.status())));
        return;
      }
      if (target->pool != admission_.pool) {
        // The decided model lost its workers during the wait: its fallback, capped as a
        // failover to it is.
        service_->metrics().CountFallback(admission_.pool->name(), target->pool->name());
        admission_.pool = target->pool;
        auto* sampling = admission_.worker_request.mutable_sampling();
        if (target->max_output_tokens > 0 && sampling->max_tokens() > target->max_output_tokens) {
          sampling->set_max_tokens(target->max_output_tokens);
        }
      }
      admission_.endpoint = target->endpoint;
    }
    const auto& d = admission_.decision;
    if (model_metrics_ != nullptr) model_metrics_->inflight->Increment();
    service_->retry_budget().RequestStarted(SteadyClock::now());
    started_ = true;
    spdlog::info("request_id={} rpc={} start model={} class={} rule={} worker={} tenant={}",
                 admission_.request_id, rpc_, d.model, d.request_class, d.rule,
                 admission_.endpoint->address(),
                 caller_.tenant != nullptr ? caller_.tenant->name() : "-");

    // Every attempt shares one deadline: the caller's, or the default when it set none; never
    // more than --max_stream_duration from arrival.
    const auto now = std::chrono::system_clock::now();
    const auto caller_deadline = context_->deadline();
    const bool caller_set_none = IsNoDeadline(caller_deadline);
    attempt_deadline_ = std::min(
        caller_set_none ? now + absl::ToChronoMilliseconds(service_->options().default_deadline)
                        : caller_deadline,
        now - (SteadyClock::now() - arrival_) +
            absl::ToChronoMilliseconds(service_->options().max_stream_duration));
    worker_deadline_ =
        attempt_deadline_ - absl::ToChronoMicroseconds(service_->options().worker_deadline_offset);

    Target first{admission_.pool, admission_.endpoint, 0};
    Attempt* a = new Attempt(this, first, admission_.worker_request, /*hedge=*/false);
    {
      std::lock_guard<std::mutex> l(mu_);
      live_.push_back(a);
      refs_.fetch_add(1, std::memory_order_relaxed);
      ++attempts_;
    }
    a->Start();
    StartStallWatch();
    if (d.hedge_after_seconds > 0) {
      // The first attempt already runs: its first token (or its end) may call CancelHedge on
      // another thread now, and a grpc::Alarm must not be cancelled while it is being set. A
      // hedge cancelled before this point is not set at all: it would hold the call (and the
      // drain) for hedge_after_seconds for nothing.
      std::lock_guard<std::mutex> l(hedge_mu_);
      if (!hedge_cancelled_) {
        refs_.fetch_add(1, std::memory_order_relaxed);
        hedge_alarm_.Set(
            now + std::chrono::microseconds(static_cast<int64_t>(d.hedge_after_seconds * 1e6)),
            [this](bool ok) { OnHedgeAlarm(ok); });
        hedge_armed_ = true;
      }
    }
    if (!d.shadow.empty() && d.shadow != d.model) service_->StartShadow(admission_, d.shadow);
  }

  // A chunk of the committed attempt; the subclass relays it and calls Resume() when ready for
  // the next. `final` when it carries the finish reason.
  virtual void Relay(const WorkerGenerateChunk& chunk) = 0;
  // The outcome of the whole call; called exactly once, after the last Relay.
  virtual void Complete(const grpc::Status& status) = 0;

  // Reads the next chunk of the committed attempt.
  void Resume() {
    Attempt* a = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      a = committed_;
    }
    if (a != nullptr) a->Read();
  }
  void CancelAll() {
    if (LeaveQueue()) {
      // Begin may still be setting the alarm on another thread (it holds queue_mu_ until then);
      // gRPC never runs OnCancel inside Begin, so this cannot wait on itself.
      { std::lock_guard<std::mutex> l(queue_mu_); }
      queue_alarm_.Cancel();  // drops its reference now, not at --max_queue_wait
      Complete(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while queued"));
      return;
    }
    std::vector<Attempt*> live;
    {
      std::lock_guard<std::mutex> l(mu_);
      cancelled_ = true;
      live = live_;
      for (Attempt* a : live) a->Ref();
    }
    for (Attempt* a : live) a->CancelAndUnref();
    CancelHedge();
    CancelStallWatch();
  }

  // The stall watch: from dispatch, an alarm checks every stall timeout that the committed
  // attempt's worker has not kept a read waiting longer than that (before the first token: that
  // the attempts' workers have not gone silent). A stalled attempt
  // is cancelled and failed over mid-answer like a dead worker (OnAttemptDone), and counts
  // against its endpoint (CallOutcome::kStalled), so a hung worker is ejected for new requests.
  // The timeout: --stall_timeout_multiple x this stream's mean time per token so far, at least
  // --stall_timeout_min.
  SteadyClock::duration FirstTokenTimeout() const {
    const auto floor = absl::ToChronoNanoseconds(service_->options().stall_timeout_min);
    const auto ttft = std::chrono::nanoseconds(first_token_ns_.load(std::memory_order_relaxed));
    return std::max<SteadyClock::duration>(floor,
                                           std::chrono::duration_cast<SteadyClock::duration>(
                                               ttft * service_->options().stall_timeout_multiple));
  }

  SteadyClock::duration StallTimeout() const {
    const auto floor = absl::ToChronoNanoseconds(service_->options().stall_timeout_min);
    const auto per_token =
        std::chrono::nanoseconds(inter_token_ns_.load(std::memory_order_relaxed));
    return std::max<SteadyClock::duration>(
        floor, std::chrono::duration_cast<SteadyClock::duration>(
                   per_token * service_->options().stall_timeout_multiple));
  }

  // Whether a worker of the attempt's model other than its own may take a request now.
  static bool AnotherUsable(const Attempt& a) {
    for (const auto& e : *a.pool().endpoints()) {
      if (e.get() != a.endpoint() && e->usable()) return true;
    }
    return false;
  }

  void StartStallWatch() {
    if (service_->options().stall_timeout_min <= absl::ZeroDuration()) return;  // off
    std::lock_guard<std::mutex> l(stall_mu_);
    if (stall_alarm_ != nullptr || stall_cancelled_) return;
    SetStallAlarm(StallTimeout());
  }

  // stall_mu_ held. A new alarm each time: one must not be set again from its own callback.
  void SetStallAlarm(SteadyClock::duration after) {
    stall_alarm_ = std::make_unique<grpc::Alarm>();
    refs_.fetch_add(1, std::memory_order_relaxed);
    stall_alarm_->Set(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(after),
                      [this](bool ok) {
                        OnStallAlarm(ok);
                        Unref();
                      });
  }

  void CancelStallWatch() {
    // As CancelHedge: the callback runs with ok=false on a gRPC thread, never inside Cancel.
    std::lock_guard<std::mutex> l(stall_mu_);
    stall_cancelled_ = true;
    if (stall_alarm_ != nullptr) stall_alarm_->Cancel();
  }

  void OnStallAlarm(bool ok) {
    if (!ok) return;
    const SteadyClock::duration timeout = StallTimeout();
    SteadyClock::duration next = timeout;
    Attempt* stalled = nullptr;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (done_ || cancelled_) return;
      if (committed_ != nullptr && !committed_->stalled()) {
        if (const auto since = committed_->reading_since()) {
          const SteadyClock::duration waited = SteadyClock::now() - *since;
          if (waited >= timeout) {
            stalled = committed_;
          } else {
            next = timeout - waited;
          }
        }
      } else if (committed_ == nullptr) {
        // Between a failover and its first token: the new worker re-prefills what the first
        // one did, so it gets the stall multiple of the answer's first-token time (at least the
        // floor); a worker that hangs before answering must not hold the stream to its deadline.
        const SteadyClock::duration first = FirstTokenTimeout();
        for (Attempt* a : live_) {
          if (a->lost() || a->stalled()) continue;
          if (!a->continuation()) {
            // Before the answer's first token a long prefill is no stall: only a worker known
            // to be silent (probes timing out, streams stalling) is given up, and only while
            // another worker of the model can take the request, instead of waiting for it until
            // the deadline. With none, waiting is the better bet: a worker that resumes answers.
            if (a->endpoint()->unresponsive() && AnotherUsable(*a)) {
              stalled = a;
              break;
            }
            next = std::min(next, absl::ToChronoNanoseconds(service_->options().stall_timeout_min));
            continue;
          }
          const SteadyClock::duration waited = SteadyClock::now() - a->created();
          if (waited >= first) {
            stalled = a;
            break;
          }
          next = std::min(next, first - waited);
        }
      }
      if (stalled != nullptr) {
        stalled->MarkStalled();
        stalled->Ref();
      }
    }
    if (stalled != nullptr) {
      service_->metrics().CountStall(stalled->model());
      spdlog::warn(
          "request_id={} stalled: no token from {} within the stall timeout; failing "
          "over",
          admission_.request_id, stalled->endpoint()->address());
      stalled->CancelAndUnref();
    }
    // Keeps watching: the failover's stream, once it answers, is committed in turn.
    std::lock_guard<std::mutex> l(stall_mu_);
    if (!stall_cancelled_) SetStallAlarm(next);
  }

  void CancelHedge() {
    // Cancel only an alarm that was set; the callback then runs with ok=false (on a gRPC thread,
    // never inside Cancel, so holding hedge_mu_ here cannot deadlock with it).
    std::lock_guard<std::mutex> l(hedge_mu_);
    hedge_cancelled_ = true;
    if (hedge_armed_) hedge_alarm_.Cancel();
  }

  // Token accounting from a worker chunk.
  void Track(const WorkerGenerateChunk& chunk) {
    const auto now = SteadyClock::now();
    // The first attempt's prompt count is the caller's prompt; a failover's includes the prefix.
    if (chunk.prompt_tokens() > 0 && prompt_tokens_ == 0) prompt_tokens_ = chunk.prompt_tokens();
    if (chunk.queue_seconds() > 0 && queue_seconds_ == 0) queue_seconds_ = chunk.queue_seconds();
    if (chunk.tokens() > 0) {
      if (completion_tokens_ == 0) {
        first_token_ = now;
        first_token_ns_.store(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now - arrival_).count(),
            std::memory_order_relaxed);
      }
      if (completion_tokens_ > 0) {
        inter_token_ns_.store(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now - first_token_).count() /
                (completion_tokens_ + chunk.tokens() - 1),
            std::memory_order_relaxed);
      }
      last_token_ = now;
      completion_tokens_ += chunk.tokens();
    }
  }

  void FillFinal(tandem::v1::Usage* usage, tandem::v1::Timings* timings,
                 tandem::v1::Recovery* recovery) const {
    usage->set_prompt_tokens(prompt_tokens_);
    usage->set_completion_tokens(completion_tokens_);
    usage->set_total_tokens(prompt_tokens_ + completion_tokens_);
    timings->set_queue_seconds(queue_seconds_);
    if (completion_tokens_ > 0) {
      timings->set_time_to_first_token_seconds(Seconds(first_token_ - arrival_));
    }
    timings->set_total_seconds(Seconds(SteadyClock::now() - arrival_));
    std::lock_guard<std::mutex> l(mu_);
    if (!HasRecovery(recovery_)) return;
    *recovery = recovery_;
    if (!disclosure_.workers) recovery->clear_final_worker();
  }

  // Metrics and the end log line; exactly once per call.
  void Record(const grpc::Status& ended) {
    const grpc::Status status = AsCallerSawIt(ended);
    const auto now = SteadyClock::now();
    const auto& d = admission_.decision;
    // A request refused after routing (no usable worker, a tenant's models) counts under the
    // model that was decided; one refused before, under "none".
    const bool routed = started_ || !d.model.empty();
    const std::string& model = routed ? d.model : kNone;
    const std::string& klass = routed || d.shed ? d.request_class : kNone;
    service_->metrics().CountRequest(model, klass, GrpcCodeName(status.error_code()));
    if (model_metrics_ != nullptr && started_) {  // Dispatch incremented inflight
      model_metrics_->inflight->Decrement();
      model_metrics_->request_duration->Observe(Seconds(now - arrival_));
      if (completion_tokens_ > 0) {
        model_metrics_->time_to_first_token->Observe(Seconds(first_token_ - arrival_));
      }
      if (completion_tokens_ > 1) {
        model_metrics_->time_per_output_token->Observe(Seconds(last_token_ - first_token_) /
                                                       (completion_tokens_ - 1));
      }
      model_metrics_->prompt_tokens->Increment(prompt_tokens_);
      model_metrics_->completion_tokens->Increment(completion_tokens_);
    }
    std::string recovery;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (HasRecovery(recovery_)) {
        recovery =
            absl::StrCat(" retries=", recovery_.retries(), " failovers=", recovery_.failovers(),
                         " hedged=", recovery_.hedged() ? "yes" : "no",
                         " final_worker=", recovery_.final_worker());
      }
    }
    if (started_) service_->retry_budget().RequestEnded();
    if (caller_.tenant != nullptr) {
      GatewayMetrics::Tenant& tm = caller_.tenant->metrics();
      service_->metrics().CountTenantRequest(tm.label, GrpcCodeName(status.error_code()));
      tm.prompt_tokens->Increment(prompt_tokens_);
      tm.completion_tokens->Increment(completion_tokens_);
      if (tenant_admitted_) {
        tm.request_duration->Observe(Seconds(now - arrival_));
        if (completion_tokens_ > 0)
          tm.time_to_first_token->Observe(Seconds(first_token_ - arrival_));
        // What the request did not use of its reservation goes back to the tenant's bucket.
        const int64_t used = std::max<int64_t>(admission_.features.prompt_tokens, prompt_tokens_) +
                             completion_tokens_;
        caller_.tenant->Release(reserved_tokens_ - used);
      }
    }
    // A request refused before dispatch (invalid, unauthenticated, over quota, draining) is
    // logged within --rejected_log_per_second: it costs the caller nothing but the attempt.
    int64_t suppressed = 0;
    if (started_ || service_->rejected_log().Allow(&suppressed)) {
      spdlog::info(
          "request_id={} rpc={} end model={} class={} status={} prompt_tokens={} "
          "completion_tokens={} duration_ms={:.3f}{}{}{}{}",
          admission_.request_id, rpc_, model, klass, GrpcCodeName(status.error_code()),
          prompt_tokens_, completion_tokens_, Seconds(now - arrival_) * 1e3, recovery,
          status.ok() ? "" : " message=",
          status.ok() ? "" : QuoteForLog(status.error_message(), kMaxLoggedMessageBytes),
          suppressed > 0 ? absl::StrCat(" (", suppressed, " refusals not logged)") : "");
    }
    // The slot goes back now, for the next waiter; the drain's count (CallEnded) only in the
    // destructor, so a drain waiting for it never sees the queue still in use.
    if (slot_held_.load()) queue_->Release();
  }

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // The caller's deadline passing cancels the call (OnCancel, then the attempts end CANCELLED),
  // but the caller sees DEADLINE_EXCEEDED: metrics and the log say what the caller saw. The
  // caller's own timer fires first, and its cancel can arrive just before ours: within 100 ms of
  // the deadline a cancel is the deadline (as the worker decides).
  grpc::Status AsCallerSawIt(const grpc::Status& status) const {
    if (status.error_code() == grpc::StatusCode::CANCELLED &&
        std::chrono::system_clock::now() + std::chrono::milliseconds(100) >= context_->deadline()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "the caller's deadline passed (" + status.error_message() + ")");
    }
    return status;
  }

  GatewayService* const service_;
  grpc::CallbackServerContext* const context_;
  // The caller's call, referenced for as long as this object lives: an attempt's ClientContext
  // keeps only a raw pointer to it (for deadline and cancellation propagation) until its call
  // is created in Start, and a hedge may start on the alarm's thread just after the caller's
  // call finished (its first copy answered) and gRPC released it.
  grpc_call* const server_call_;
  GenerateRequest request_;
  const absl::Status parsed_;
  const char* const rpc_;
  const SteadyClock::time_point arrival_;
  Admission admission_;
  Disclosure disclosure_;  // set once the caller is known

  int32_t prompt_tokens_ = 0;
  int32_t completion_tokens_ = 0;
  double queue_seconds_ = 0;
  SteadyClock::time_point first_token_;
  SteadyClock::time_point last_token_;

 private:
  static inline const std::string kNone = "none";

  void OnAttemptChunk(Attempt* a) {
    std::vector<Attempt*> losers;
    bool committed_now = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (committed_ != a) {
        committed_now = true;
        if (a->lost() || committed_ != nullptr || done_) {
          // A copy that lost the race (already cancelled): drain it to its end. Lost stays lost
          // when the winner then fails: a failover continues the answer, not this copy.
          a->Read();
          return;
        }
        committed_ = a;
        recovery_.set_final_worker(a->endpoint()->address());
        recovery_.set_final_model(a->model());
        for (Attempt* o : live_) {
          if (o == a) continue;
          o->MarkLost();
          o->Ref();
          losers.push_back(o);
        }
        if (recovery_.hedged() && !hedge_decided_) {
          // The race's first token; a failover committing later is not a hedge outcome.
          hedge_decided_ = true;
          // The race is decided: the winner is an ordinary attempt now, and its unit of the
          // hedge budget is free for another request's rescue.
          for (Attempt* o : live_) ReleaseHedgeUnit(o);
          recovery_.set_hedge_won(a->hedge());
          service_->metrics().CountHedge(a->model(), a->hedge());
          recovery_.add_events(absl::StrCat(a->hedge() ? "hedge" : "first attempt",
                                            " answered first: ", Shown(a->endpoint())));
        }
      }
      const WorkerGenerateChunk& chunk = a->chunk();
      absl::StrAppend(&relayed_text_, chunk.text());
      relayed_tokens_ += chunk.tokens();
    }
    for (Attempt* o : losers) o->CancelAndUnref();
    if (committed_now) {
      CancelHedge();  // a first token came: no hedge needed any more
      StartStallWatch();
    }
    Track(a->chunk());
    Relay(a->chunk());
  }

  void OnAttemptDone(Attempt* a, const grpc::Status& status) {
    const auto now = std::chrono::system_clock::now();
    a->endpoint()->AddOutstanding(-1);
    // A deadline of ours (the caller's or the default, less the offset) passing is not the
    // worker's fault.
    // Stalled only when the caller did not go away meanwhile: its cancel or deadline is not the
    // worker's fault.
    const bool stalled = a->stalled() && status.error_code() == grpc::StatusCode::CANCELLED &&
                         !context_->IsCancelled() && !CallerCancelled();
    a->endpoint()->RecordCall(stalled ? CallOutcome::kStalled
                                      : ClassifyCall(status.error_code(), now >= worker_deadline_),
                              SteadyClock::now());
    // A stalled stream is recovered as a dead worker's would be.
    const grpc::Status ended =
        stalled ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "stalled: no token within the stall timeout (--stall_timeout_min, "
                               "--stall_timeout_multiple)")
                : status;
    Attempt* next = nullptr;
    bool complete = false;
    bool by_length = false;
    grpc::Status outcome = ended;
    {
      std::lock_guard<std::mutex> l(mu_);
      ReleaseHedgeUnit(a);
      live_.erase(std::find(live_.begin(), live_.end(), a));
      const bool was_committed = committed_ == a;
      if (was_committed) committed_ = nullptr;
      if (done_ || a->lost() || (!was_committed && committed_ != nullptr)) {
        // The call is over, or this copy lost the race: nothing to decide.
      } else if (ended.ok() && was_committed) {
        done_ = complete = true;
      } else if (std::any_of(live_.begin(), live_.end(),
                             [](const Attempt* o) { return !o->lost(); })) {
        // Failed before its first chunk while a hedge copy still races: that one carries on.
        // (A committed attempt failing with only lost copies left recovers below.)
        failed_.push_back(a->endpoint_ref());
      } else if (relayed_tokens_ > 0 &&
                 relayed_tokens_ >= admission_.worker_request.sampling().max_tokens()) {
        // The worker died after its last token but before its end of stream: the answer is
        // whole, ended by length. Another attempt would add a token beyond max_tokens.
        done_ = complete = by_length = true;
      } else {
        failed_.push_back(a->endpoint_ref());
        next = Recover(a, ended, &outcome);
        if (next == nullptr) done_ = complete = true;
      }
    }
    if (next != nullptr) next->Start();
    if (complete) {
      CancelHedge();
      CancelStallWatch();
      if (by_length) {
        WorkerGenerateChunk last;
        last.set_finish_reason(tandem::v1::FINISH_REASON_LENGTH);
        Relay(last);
        outcome = grpc::Status::OK;
      }
      Complete(outcome);
    }
    Unref();
  }

  // After the last live attempt failed: another attempt (a retry when nothing was relayed yet, a
  // mid-stream failover otherwise), or nullptr with the call's final status in `outcome`.
  // mu_ held.
  Attempt* Recover(const Attempt* failed, const grpc::Status& status, grpc::Status* outcome) {
    const grpc::StatusCode code = status.error_code();
    const bool caller_gone =
        cancelled_ || context_->IsCancelled() ||
        std::chrono::system_clock::now() >= std::min(context_->deadline(), worker_deadline_);
    const CallOutcome kind = ClassifyCall(code, true);
    // Safe to repeat: the worker failed (not the request), or its queue was full.
    const bool retryable = !caller_gone && (kind == CallOutcome::kWorkerFault ||
                                            code == grpc::StatusCode::RESOURCE_EXHAUSTED);
    if (!retryable) return nullptr;
    const std::string failure =
        absl::StrCat(Shown(failed->endpoint()), " ", GrpcCodeName(code), ": ", WorkerError(status));
    if (attempts_ >= service_->options().max_attempts) {
      recovery_.add_events(absl::StrCat(failure, "; no attempts left (--max_attempts)"));
      *outcome = grpc::Status(
          code, absl::StrCat(WorkerError(status), " (after ", attempts_, " attempts)"));
      return nullptr;
    }
    std::vector<const Endpoint*> exclude;
    for (const auto& e : failed_) exclude.push_back(e.get());
    absl::StatusOr<Target> target = service_->intake().PickTarget(admission_, exclude);
    if (!target.ok()) {
      recovery_.add_events(absl::StrCat(failure, "; nowhere else to go"));
      *outcome = grpc::Status(code, absl::StrCat(WorkerError(status), "; no other worker: ",
                                                 ForCaller(target.status()).message()));
      return nullptr;
    }
    // A mid-stream failover is not budgeted: its attempt continues only what is left of the
    // answer, so it adds a re-prefill, not a second decode, and --max_attempts bounds it. A
    // retry (nothing streamed yet) redoes everything, and a fleet failing fast makes many.
    if (relayed_tokens_ == 0 && !service_->retry_budget().TryRetry(SteadyClock::now())) {
      service_->metrics().CountRetryBudgetExhausted();
      recovery_.add_events(absl::StrCat(failure, "; retry budget exhausted"));
      *outcome = grpc::Status(
          code, absl::StrCat(status.error_message(), " (retry budget exhausted; not retried)"));
      return nullptr;
    }
    tandem::v1::WorkerGenerateRequest request = admission_.worker_request;
    int32_t max_tokens = request.sampling().max_tokens();
    if (relayed_tokens_ > 0) {
      // Mid-stream: the new worker continues the partial answer as the assistant's own text.
      auto* prefix = request.add_messages();
      prefix->set_role("assistant");
      prefix->add_content()->set_text(relayed_text_);
      request.set_continue_final_message(true);
      max_tokens = std::max(1, max_tokens - relayed_tokens_);
      recovery_.set_failovers(recovery_.failovers() + 1);
      service_->metrics().CountFailover(failed->model(), target->pool->name());
      recovery_.add_events(absl::StrCat("failover after ", relayed_tokens_, " tokens: ", failure,
                                        " -> ", target->pool->name(), " at ",
                                        Shown(target->endpoint.get())));
    } else {
      recovery_.set_retries(recovery_.retries() + 1);
      service_->metrics().CountRetry(
          target->pool->name(),
          code == grpc::StatusCode::RESOURCE_EXHAUSTED ? "resource_exhausted" : "worker_error");
      recovery_.add_events(absl::StrCat("retry: ", failure, " -> ", target->pool->name(), " at ",
                                        Shown(target->endpoint.get())));
    }
    if (target->max_output_tokens > 0) max_tokens = std::min(max_tokens, target->max_output_tokens);
    request.mutable_sampling()->set_max_tokens(max_tokens);
    spdlog::warn(
        "request_id={} {}", admission_.request_id,
        QuoteForLog(recovery_.events(recovery_.events_size() - 1), kMaxLoggedMessageBytes));
    Attempt* a = new Attempt(this, std::move(*target), std::move(request), /*hedge=*/false);
    live_.push_back(a);
    refs_.fetch_add(1, std::memory_order_relaxed);
    ++attempts_;
    return a;
  }

  // mu_ held.
  void ReleaseHedgeUnit(Attempt* a) {
    if (!a->holds_hedge_unit()) return;
    a->set_holds_hedge_unit(false);
    service_->retry_budget().ReleaseHedge();
  }

  // A worker's error message as the caller may see it: transport errors name the peer's address.
  std::string WorkerError(const grpc::Status& status) const {
    return disclosure_.workers ? status.error_message() : "the worker failed";
  }
  // An endpoint choice's error as the caller may see it: Pick lists every endpoint and why.
  absl::Status ForCaller(const absl::Status& status) const {
    if (disclosure_.workers || status.code() != absl::StatusCode::kUnavailable) return status;
    return absl::UnavailableError(
        absl::StrCat("model '", admission_.decision.model, "' has no usable worker; retry later"));
  }
  bool CallerCancelled() const {
    std::lock_guard<std::mutex> l(mu_);
    return cancelled_;
  }

  // An endpoint's address as the caller may see it.
  std::string Shown(const Endpoint* e) const {
    return disclosure_.workers ? e->address() : std::string("a worker");
  }

  void OnHedgeAlarm(bool ok) {
    Attempt* hedge = nullptr;
    if (ok) {
      std::lock_guard<std::mutex> l(mu_);
      if (!done_ && !cancelled_ && committed_ == nullptr && live_.size() == 1 &&
          attempts_ < service_->options().max_attempts) {
        std::vector<const Endpoint*> exclude = {live_[0]->endpoint()};
        for (const auto& e : failed_) exclude.push_back(e.get());
        absl::StatusOr<Target> target = service_->intake().PickTarget(admission_, exclude);
        if (target.ok() && service_->retry_budget().TryHedge()) {
          recovery_.set_hedged(true);
          recovery_.add_events(
              absl::StrCat("hedge: no first token after ", admission_.decision.hedge_after_seconds,
                           "s -> ", target->pool->name(), " at ", Shown(target->endpoint.get())));
          tandem::v1::WorkerGenerateRequest request = admission_.worker_request;
          if (target->max_output_tokens > 0 &&
              request.sampling().max_tokens() > target->max_output_tokens) {
            request.mutable_sampling()->set_max_tokens(target->max_output_tokens);
          }
          hedge = new Attempt(this, std::move(*target), std::move(request), /*hedge=*/true);
          hedge->set_holds_hedge_unit(true);
          live_.push_back(hedge);
          refs_.fetch_add(1, std::memory_order_relaxed);
          ++attempts_;
        } else if (target.ok()) {
          service_->metrics().CountRetryBudgetExhausted();
          recovery_.set_hedge_refused(true);
          recovery_.add_events(absl::StrCat(
              "hedge refused: no first token after ", admission_.decision.hedge_after_seconds,
              "s, but the retry budget's hedges are all in flight (--retry_budget_ratio)"));
          spdlog::warn(
              "request_id={} {}", admission_.request_id,
              QuoteForLog(recovery_.events(recovery_.events_size() - 1), kMaxLoggedMessageBytes));
        } else {
          recovery_.add_events(absl::StrCat("hedge skipped: no first token after ",
                                            admission_.decision.hedge_after_seconds,
                                            "s, but no other worker can take the request"));
        }
      }
    }
    if (hedge != nullptr) hedge->Start();
    Unref();
  }

  GatewayMetrics::Model* model_metrics_ = nullptr;
  bool started_ = false;
  TenantRegistry::Caller caller_;
  bool tenant_admitted_ = false;
  int64_t reserved_tokens_ = 0;
  // Counted in the service's in-flight calls (drain waits for it).
  bool counted_ = false;
  // Holds a FairQueue slot (set on the thread that granted it).
  std::atomic<bool> slot_held_{false};
  FairQueue::Waiter waiter_;
  FairQueue* queue_ = nullptr;  // the decided model's; set in Begin before any wait
  SteadyClock::time_point queued_at_;
  grpc::Alarm queue_alarm_;
  grpc::Alarm grant_alarm_;     // runs OnGranted (waiter_.grant)
  std::mutex queue_mu_;         // orders Begin's queueing before OnGranted
  absl::Duration retry_after_;  // zero: no retry advice (SetRetryAfter)
  std::string quota_subject_;
  std::chrono::system_clock::time_point attempt_deadline_;
  // attempt_deadline_ less --worker_deadline_offset: when workers are told to stop.
  std::chrono::system_clock::time_point worker_deadline_;
  std::mutex hedge_mu_;  // orders hedge_alarm_'s Set before any Cancel
  grpc::Alarm hedge_alarm_;
  bool hedge_armed_ = false;                  // guarded by hedge_mu_
  bool hedge_cancelled_ = false;              // guarded by hedge_mu_
  std::mutex stall_mu_;                       // orders stall alarms' Set before any Cancel
  std::unique_ptr<grpc::Alarm> stall_alarm_;  // guarded by stall_mu_; null until the first chunk
  bool stall_cancelled_ = false;              // guarded by stall_mu_
  // This stream's mean time per token so far (0 before its second token), for the stall watch.
  std::atomic<int64_t> inter_token_ns_{0};
  // The answer's time to first token (0 before it), for a failover's first-token timeout.
  std::atomic<int64_t> first_token_ns_{0};
  std::atomic<int> refs_{1};

  mutable std::mutex mu_;
  std::vector<Attempt*> live_;                     // guarded by mu_
  Attempt* committed_ = nullptr;                   // guarded by mu_
  std::vector<std::shared_ptr<Endpoint>> failed_;  // guarded by mu_
  std::string relayed_text_;                       // guarded by mu_
  int32_t relayed_tokens_ = 0;                     // guarded by mu_
  int attempts_ = 0;                               // guarded by mu_
  bool done_ = false;                              // guarded by mu_
  bool hedge_decided_ = false;                     // guarded by mu_
  bool cancelled_ = false;                         // guarded by mu_
  tandem::v1::Recovery recovery_;                  // guarded by mu_
};

}  // namespace

// A copy of a request sent to another model to measure it; the answer is read and discarded.
// Owns itself: deleted in OnDone.
class ShadowCall final : public grpc::ClientReadReactor<WorkerGenerateChunk> {
 public:
  ShadowCall(GatewayService* service, std::shared_ptr<Endpoint> endpoint, std::string model,
             const Admission& admission, absl::Duration timeout)
      : service_(service),
        endpoint_(std::move(endpoint)),
        model_(std::move(model)),
        request_class_(admission.decision.request_class),
        request_(admission.worker_request),
        start_(SteadyClock::now()) {
    // Cut so that the suffixed id still passes the worker's check (at most kMaxRequestIdBytes).
    request_.set_request_id(absl::StrCat(
        admission.request_id.substr(0, kMaxRequestIdBytes - std::strlen(kShadowSuffix)),
        kShadowSuffix));
    context_.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
    context_.AddMetadata("x-request-id", request_.request_id());
    endpoint_->AddOutstanding(1);
    endpoint_->client().Generate(&context_, &request_, this);
    StartRead(&chunk_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    tokens_ += chunk_.tokens();
    StartRead(&chunk_);
  }

  void Cancel() { context_.TryCancel(); }

  void OnDone(const grpc::Status& status) override {
    service_->ShadowEnded(this);
    GatewayMetrics::Model* m = service_->metrics().ForModel(model_);
    if (m != nullptr) {
      m->shadow_duration->Observe(Seconds(SteadyClock::now() - start_));
      m->shadow_completion_tokens->Increment(tokens_);
    }
    service_->metrics().CountShadow(model_, request_class_, GrpcCodeName(status.error_code()));
    endpoint_->AddOutstanding(-1);
    service_->CallEnded();
    delete this;
  }

 private:
  GatewayService* const service_;
  const std::shared_ptr<Endpoint> endpoint_;
  const std::string model_;
  const std::string request_class_;
  tandem::v1::WorkerGenerateRequest request_;
  grpc::ClientContext context_;
  WorkerGenerateChunk chunk_;
  int64_t tokens_ = 0;
  const SteadyClock::time_point start_;
};

namespace {

class UnaryCall final : public grpc::ServerUnaryReactor, public GenerationCall {
 public:
  UnaryCall(GatewayService* service, grpc::CallbackServerContext* context,
            const grpc::ByteBuffer* request, grpc::ByteBuffer* response)
      : GenerationCall(service, context, request, "Generate"), response_bytes_(response) {
    absl::Status s = Begin();
    if (!s.ok()) {
      const grpc::Status status = ToGrpcStatus(s);
      Record(status);
      Finish(Detailed(status));
    }
  }

  void OnCancel() override { CancelAll(); }
  void OnDone() override { Unref(); }

 private:
  void Relay(const WorkerGenerateChunk& chunk) override {
    response_.mutable_text()->append(chunk.text());
    if (chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      response_.set_finish_reason(chunk.finish_reason());
    }
    Resume();
  }

  void Complete(const grpc::Status& status) override {
    if (status.ok()) {
      response_.set_request_id(admission_.request_id);
      FillRoute(admission_, disclosure_, response_.mutable_route());
      FillFinal(response_.mutable_usage(), response_.mutable_timings(),
                response_.mutable_recovery());
      if (!HasRecovery(response_.recovery())) response_.clear_recovery();
      SerializeResponse(response_, response_bytes_);
    }
    Record(status);
    Finish(Detailed(status));
  }

  tandem::v1::GenerateResponse response_;
  grpc::ByteBuffer* const response_bytes_;
};

class StreamCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public GenerationCall {
 public:
  StreamCall(GatewayService* service, grpc::CallbackServerContext* context,
             const grpc::ByteBuffer* request)
      : GenerationCall(service, context, request, "GenerateStream") {
    absl::Status s = Begin();
    if (!s.ok()) {
      const grpc::Status status = ToGrpcStatus(s);
      Record(status);
      Finish(Detailed(status));
    }
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> l(mu_);
    write_in_flight_ = false;
    if (!ok) client_gone_ = true;
    const bool upstream_done = upstream_done_;
    l.unlock();
    if (upstream_done) {
      FinishOnce();
      return;
    }
    // The client is gone: stop the workers; the reads then end and release the holds.
    if (!ok) CancelAll();
    Resume();
  }
  void OnCancel() override { CancelAll(); }
  void OnDone() override { Unref(); }

 private:
  void Relay(const WorkerGenerateChunk& chunk) override {
    out_.Clear();
    if (first_) {
      first_ = false;
      out_.set_request_id(admission_.request_id);
      FillRoute(admission_, disclosure_, out_.mutable_route());
    }
    out_.set_text(chunk.text());
    if (chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      out_.set_finish_reason(chunk.finish_reason());
      FillFinal(out_.mutable_usage(), out_.mutable_timings(), out_.mutable_recovery());
      if (!HasRecovery(out_.recovery())) out_.clear_recovery();
    }
    SerializeResponse(out_, &out_bytes_);
    {
      std::lock_guard<std::mutex> l(mu_);
      write_in_flight_ = true;
    }
    StartWrite(&out_bytes_);
  }

  void Complete(const grpc::Status& status) override {
    std::unique_lock<std::mutex> l(mu_);
    upstream_done_ = true;
    upstream_status_ = status;
    if (write_in_flight_) return;  // OnWriteDone finishes
    l.unlock();
    FinishOnce();
  }

  void FinishOnce() {
    bool client_gone;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (finished_) return;
      finished_ = true;
      client_gone = client_gone_;
    }
    // A stream the client stopped reading did not succeed, whatever the worker said.
    const grpc::Status status =
        client_gone && upstream_status_.ok()
            ? grpc::Status(grpc::StatusCode::CANCELLED, "the client went away")
            : upstream_status_;
    Record(status);
    Finish(Detailed(status));
  }

  tandem::v1::GenerateStreamChunk out_;
  grpc::ByteBuffer out_bytes_;  // out_ as sent; one write is in flight at a time
  bool first_ = true;
  std::mutex mu_;
  bool write_in_flight_ = false;  // guarded by mu_
  bool upstream_done_ = false;    // guarded by mu_
  bool finished_ = false;         // guarded by mu_
  bool client_gone_ = false;      // guarded by mu_
  grpc::Status upstream_status_;
};

}  // namespace

GatewayService::GatewayService(const Intake* intake, const WorkerPools* pools,
                               GatewayMetrics* metrics, GatewayServiceOptions options)
    : intake_(intake),
      pools_(pools),
      metrics_(metrics),
      options_(options),
      retry_budget_(options.retry_budget_ratio, options.retry_budget_min),
      rejected_log_(options.rejected_log_per_second, 2 * options.rejected_log_per_second) {}

void GatewayService::StartShadow(const Admission& a, const std::string& model) {
  ModelPool* pool = pools_->Find(model);
  const char* refused = nullptr;
  absl::StatusOr<std::shared_ptr<Endpoint>> endpoint = absl::UnavailableError("no pool");
  if (pool == nullptr) {
    refused = "UNAVAILABLE";
  } else if (a.features.image_count > 0 && !pool->Status().capabilities().vision()) {
    refused = "INVALID_ARGUMENT";  // the shadow model cannot take this request
  } else if (endpoint = pool->Pick(pools_->pick()); !endpoint.ok()) {
    refused = "UNAVAILABLE";
  }
  if (refused != nullptr) {
    metrics_->CountShadow(model, a.decision.request_class, refused);
    return;
  }
  CallStarted();  // draining waits for shadows too
  std::lock_guard<std::mutex> l(shadow_mu_);
  if (draining()) {
    metrics_->CountShadow(model, a.decision.request_class, "UNAVAILABLE");
    CallEnded();
    return;
  }
  // Registered under the lock before it can finish, so StartDraining can cancel it.
  shadows_.insert(new ShadowCall(this, *endpoint, model, a, options_.shadow_timeout));
}

void GatewayService::ShadowEnded(ShadowCall* call) {
  std::lock_guard<std::mutex> l(shadow_mu_);
  shadows_.erase(call);
}

void GatewayService::StartDraining() {
  draining_.store(true, std::memory_order_relaxed);
  // Shadows only measure; they need not delay the drain.
  std::lock_guard<std::mutex> l(shadow_mu_);
  for (ShadowCall* s : shadows_) s->Cancel();
}

grpc::ServerUnaryReactor* GatewayService::Generate(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return new UnaryCall(this, context, request, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GatewayService::GenerateStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new StreamCall(this, context, request);
}

std::string ApiKeyFromMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& md) {
  if (auto it = md.find("authorization"); it != md.end()) {
    const absl::string_view v(it->second.data(), it->second.size());
    constexpr absl::string_view kBearer = "Bearer ";
    if (v.size() > kBearer.size() && absl::EqualsIgnoreCase(v.substr(0, kBearer.size()), kBearer)) {
      return std::string(v.substr(kBearer.size()));
    }
    // Present but not a bearer token: treated as a (wrong) key, never as "no key".
    return std::string(v);
  }
  if (auto it = md.find("x-api-key"); it != md.end()) {
    return std::string(it->second.data(), it->second.size());
  }
  return "";
}

FairQueue* GatewayService::QueueFor(const std::string& model) const {
  if (options_.queues == nullptr) return nullptr;
  auto it = options_.queues->find(model);
  return it == options_.queues->end() ? nullptr : it->second.get();
}

Disclosure GatewayService::DisclosureFor(const TenantRegistry::Caller& caller) const {
  // Without a tenants file every caller is the operator's.
  const bool full = options_.tenants == nullptr || !options_.tenants->enabled() ||
                    (caller.spec != nullptr && caller.spec->admin);
  return Disclosure{.explain = full, .workers = full || options_.expose_worker_addresses};
}

absl::StatusOr<TenantRegistry::Caller> GatewayService::Authenticate(
    const grpc::CallbackServerContext* context) const {
  if (options_.tenants == nullptr) return TenantRegistry::Caller{};
  return options_.tenants->Authenticate(ApiKeyFromMetadata(context->client_metadata()));
}

grpc::ServerUnaryReactor* GatewayService::Route(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request_bytes,
                                                grpc::ByteBuffer* response_bytes) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<TenantRegistry::Caller> caller = Authenticate(context);
  if (!caller.ok()) {
    reactor->Finish(ToGrpcStatus(caller.status()));
    return reactor;
  }
  GenerateRequest request;
  Admission admission;
  absl::Status s = ParseRequest(*request_bytes, &request);
  if (s.ok()) {
    s = intake_->Admit(request, MetadataRequestId(context), context->deadline(), true, &admission,
                       caller->spec);
  }
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  const Disclosure disclosure = DisclosureFor(*caller);
  tandem::v1::RouteResponse response;
  response.set_request_id(admission.request_id);
  FillRoute(admission, disclosure, response.mutable_route());
  for (auto& [name, value] : router::DescribeFeatures(admission.features)) {
    (*response.mutable_features())[name] = value;
  }
  // Every rule's conditions: the operator's policy, which may name other tenants.
  if (disclosure.explain) {
    for (const auto& t : admission.decision.trace) {
      auto* r = response.add_rules();
      r->set_rule(t.rule);
      r->set_matched(t.matched);
      r->set_detail(t.detail);
    }
  }
  SerializeResponse(response, response_bytes);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GatewayService::ListModels(grpc::CallbackServerContext* context,
                                                     const tandem::v1::ListModelsRequest*,
                                                     tandem::v1::ListModelsResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<TenantRegistry::Caller> caller = Authenticate(context);
  if (!caller.ok()) {
    reactor->Finish(ToGrpcStatus(caller.status()));
    return reactor;
  }
  for (const auto& [name, pool] : pools_->pools()) {
    // A tenant sees the models it may use.
    if (caller->spec == nullptr || caller->spec->models.empty() ||
        caller->spec->models.contains(name)) {
      *response->add_models() = pool->Status();
    }
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void GatewayService::CallStarted() {
  std::lock_guard<std::mutex> l(mu_);
  ++inflight_;
}

void GatewayService::CallEnded() {
  std::lock_guard<std::mutex> l(mu_);
  if (--inflight_ == 0) idle_cv_.notify_all();
}

int64_t GatewayService::inflight() const {
  std::lock_guard<std::mutex> l(mu_);
  return inflight_;
}

void GatewayService::RefusedWhileDraining() {
  last_refused_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                         std::memory_order_relaxed);
}

void GatewayService::WaitQuiet(std::chrono::steady_clock::duration quiet,
                               std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto last = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(last_refused_ns_.load(std::memory_order_relaxed)));
    const auto until = std::min(last + quiet, deadline);
    if (std::chrono::steady_clock::now() >= until) return;
    std::this_thread::sleep_until(until);
  }
}

bool GatewayService::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  return idle_cv_.wait_until(l, deadline, [&] { return inflight_ == 0; });
}

}  // namespace tandem::gateway
