#include "gateway/dispatch/generation_call.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/call_metadata.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "common/log_text.h"
#include "common/proto_request.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {
namespace {

using SteadyClock = std::chrono::steady_clock;
using tandem::v1::WorkerGenerateChunk;

// The model and class label of a request refused before it was routed.
constexpr absl::string_view kNone = "none";

AttemptTarget ToAttemptTarget(Target target) {
  auto shared = std::make_shared<const Target>(std::move(target));
  return AttemptTarget{.model = shared->pool->name(),
                       .address = shared->endpoint->address(),
                       .max_output_tokens = shared->max_output_tokens,
                       .target = shared};
}

}  // namespace

GenerationCall::GenerationCall(Dispatcher* dispatcher, std::unique_ptr<CallerContext> caller,
                               const char* rpc)
    : dispatcher_(dispatcher),
      context_(std::move(caller)),
      rpc_(rpc),
      arrival_(SteadyClock::now()),
      usage_(arrival_),
      queue_wait_(this, &dispatcher->timers()),
      hedge_alarm_(&dispatcher->timers()),
      stall_alarm_(&dispatcher->timers()),
      attempts_(this) {}

GenerationCall::~GenerationCall() {
  // Here, not when the caller got its answer: a copy that lost a hedge race, or a pending
  // timer, may call into this object until its last reference goes, and a drain must wait for
  // that too.
  if (counted_) dispatcher_->CallEnded();
}

// ---- Dispatch ----

void GenerationCall::Dispatch(bool waited) {
  if (waited && !RepickAfterWait()) return;
  const auto& d = admission_.decision;
  if (model_metrics_ != nullptr) model_metrics_->inflight->Increment();
  dispatcher_->retry_budget().RequestStarted(SteadyClock::now());
  started_ = true;
  // The end line says all of this too: one info line per request (a log line costs a write).
  spdlog::debug("request_id={} rpc={} start model={} class={} rule={} worker={} tenant={}",
                admission_.request_id, rpc_, d.model, d.request_class, d.rule,
                admission_.endpoint->address(),
                caller_.tenant != nullptr ? caller_.tenant->name() : "-");
  const auto now = std::chrono::system_clock::now();
  SetDeadlines(now);
  StartFirstAttempt();
  if (d.hedge_after_seconds > 0) ArmHedge();
  if (!d.shadow.empty() && d.shadow != d.model) dispatcher_->StartShadow(admission_, d.shadow);
}

bool GenerationCall::RepickAfterWait() {
  absl::StatusOr<Target> target = dispatcher_->intake().PickTarget(admission_, {});
  if (!target.ok()) {
    Complete(ToGrpcStatus(ForCaller(target.status())));
    return false;
  }
  if (target->pool != admission_.pool) {
    // The decided model lost its workers during the wait: its fallback, capped as a failover to
    // it is.
    dispatcher_->metrics().CountFallback(admission_.pool->name(), target->pool->name());
    admission_.pool = target->pool;
    auto* sampling = admission_.worker_request.mutable_sampling();
    if (target->max_output_tokens > 0 && sampling->max_tokens() > target->max_output_tokens) {
      sampling->set_max_tokens(target->max_output_tokens);
    }
  }
  admission_.endpoint = target->endpoint;
  return true;
}

void GenerationCall::SetDeadlines(std::chrono::system_clock::time_point now) {
  // Every attempt shares one deadline: the caller's, or the default when it set none; never
  // more than --max_stream_duration from arrival.
  const DispatchOptions& options = dispatcher_->options();
  const auto caller_deadline = context_->deadline();
  const bool caller_set_none = IsNoDeadline(caller_deadline);
  attempt_deadline_ =
      std::min(caller_set_none ? now + absl::ToChronoMilliseconds(options.default_deadline)
                               : caller_deadline,
               now - (SteadyClock::now() - arrival_) +
                   absl::ToChronoMilliseconds(options.max_stream_duration));
  worker_deadline_ = attempt_deadline_ - absl::ToChronoMicroseconds(options.worker_deadline_offset);
}

void GenerationCall::StartFirstAttempt() {
  const DispatchOptions& dispatch_options = dispatcher_->options();
  GenerationAttempts::Options options{
      .request_id = admission_.request_id,
      .request = &admission_.worker_request,
      .max_attempts = dispatch_options.max_attempts,
      .hedge_after_seconds = admission_.decision.hedge_after_seconds,
      .show_workers = disclosure_.workers,
      .stall_timeout_min = absl::ToChronoNanoseconds(dispatch_options.stall_timeout_min),
      .stall_timeout_multiple = dispatch_options.stall_timeout_multiple,
      .arrival = arrival_};
  AttemptTarget first = ToAttemptTarget(Target{admission_.pool, admission_.endpoint, 0, {}});
  Attempt* a = nullptr;
  {
    absl::MutexLock l(&mu_);
    a = AddAttempt(attempts_.Start(std::move(options), std::move(first)));
  }
  a->Start();
  StartStallWatch();
}

void GenerationCall::ArmHedge() {
  // The first attempt already runs: its first token (or its end) may cancel the hedge on
  // another thread now (CallAlarm orders that after this). A hedge cancelled before this point
  // is not set at all: it would hold the call (and the drain) for hedge_after_seconds for
  // nothing.
  const auto delay = std::chrono::microseconds(
      static_cast<int64_t>(admission_.decision.hedge_after_seconds * 1e6));
  Ref();
  if (!hedge_alarm_.Arm(delay, [this](bool ok) {
        OnHedgeAlarm(ok);
        Unref();
      })) {
    Unref();
  }
}

// ---- Attempts ----

GenerationCall::Attempt* GenerationCall::AddAttempt(GenerationAttempts::NewAttempt start) {
  auto* a = new Attempt(this, std::move(start), context_->NewWorkerContext(), attempt_deadline_,
                        worker_deadline_);
  live_.push_back(a);
  Ref();
  return a;
}

std::vector<GenerationCall::Attempt*> GenerationCall::RefLive(
    const std::vector<GenerationAttempts::AttemptId>& ids) {
  std::vector<Attempt*> found;
  for (Attempt* a : live_) {
    if (std::find(ids.begin(), ids.end(), a->id()) == ids.end()) continue;
    a->Ref();
    found.push_back(a);
  }
  return found;
}

void GenerationCall::Resume() {
  Attempt* a = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (std::optional<GenerationAttempts::AttemptId> id = attempts_.ReadCommitted()) {
      auto it = std::find_if(live_.begin(), live_.end(),
                             [&](const Attempt* live) { return live->id() == *id; });
      if (it != live_.end()) a = *it;
    }
  }
  if (a != nullptr) a->Read();
}

void GenerationCall::CancelAll() {
  SecondOpinionCall* asking = nullptr;
  {
    absl::MutexLock l(&mu_);
    asking = second_opinion_;
    if (asking != nullptr) asking->Ref();
  }
  if (asking != nullptr) {
    asking->CancelAndUnref();  // OnSecondOpinion completes the call
    return;
  }
  if (queue_wait_.Leave()) {
    Complete(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while queued"));
    return;
  }
  std::vector<Attempt*> live;
  {
    absl::MutexLock l(&mu_);
    live = RefLive(attempts_.Cancel());
  }
  for (Attempt* a : live) a->CancelAndUnref();
  StopTimers();
}

void GenerationCall::OnAttemptChunk(Attempt* a) {
  GenerationAttempts::ChunkActions actions;
  std::vector<Attempt*> losers;
  {
    absl::MutexLock l(&mu_);
    actions = attempts_.OnChunk(a->id(), a->chunk());
    losers = RefLive(actions.cancel);
  }
  for (Attempt* o : losers) o->CancelAndUnref();
  if (!actions.relay) {
    a->Read();  // a copy that lost the race: drained to its end
    return;
  }
  if (actions.committed_now) {
    hedge_alarm_.Cancel();  // a first token came: no hedge needed any more
    StartStallWatch();
  }
  usage_.Track(a->chunk());
  Relay(a->chunk());
}

void GenerationCall::OnAttemptReadEnded(Attempt* a) {
  absl::MutexLock l(&mu_);
  attempts_.ReadEnded(a->id());
}

void GenerationCall::OnAttemptDone(Attempt* a, const grpc::Status& status) {
  const auto now = std::chrono::system_clock::now();
  a->endpoint()->AddOutstanding(-1);
  const bool stalled = EndedByStall(*a, status);
  // A deadline of ours (the caller's or the default, less the offset) passing is not the
  // worker's fault.
  a->endpoint()->RecordCall(
      stalled ? CallOutcome::kStalled : ClassifyCall(status.error_code(), now >= worker_deadline_),
      SteadyClock::now());
  GenerationAttempts::AttemptEnd end{
      .status = FromGrpcStatus(status),
      .worker_fault = ClassifyCall(status.error_code(), true) == CallOutcome::kWorkerFault,
      .stalled = stalled};
  GenerationAttempts::EndActions actions;
  Attempt* next = nullptr;
  {
    absl::MutexLock l(&mu_);
    live_.erase(std::find(live_.begin(), live_.end(), a));
    actions = attempts_.OnEnd(a->id(), std::move(end));
    if (actions.start.has_value()) next = AddAttempt(std::move(*actions.start));
  }
  if (next != nullptr) next->Start();
  CompleteIfDone(actions);
  Unref();
}

bool GenerationCall::EndedByStall(const Attempt& a, const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::CANCELLED) return false;
  {
    absl::MutexLock l(&mu_);
    if (!attempts_.CancelledForStall(a.id())) return false;
  }
  // Stalled only when the caller did not go away meanwhile: its cancel or deadline is not the
  // worker's fault.
  return !context_->IsCancelled();
}

void GenerationCall::CompleteIfDone(const GenerationAttempts::EndActions& actions) {
  if (!actions.complete.has_value()) return;
  StopTimers();
  if (actions.by_length) {
    WorkerGenerateChunk last;
    last.set_finish_reason(tandem::v1::FINISH_REASON_LENGTH);
    Relay(last);
  }
  Complete(ToGrpcStatus(*actions.complete));
}

// ---- Timers ----

void GenerationCall::OnHedgeAlarm(bool ok) {
  if (!ok) return;
  Attempt* hedge = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (std::optional<GenerationAttempts::NewAttempt> start = attempts_.OnHedgeDue()) {
      hedge = AddAttempt(std::move(*start));
    }
  }
  if (hedge != nullptr) hedge->Start();
}

// The stall watch: from dispatch, a timer checks every stall timeout that the committed
// attempt's worker has not kept a read waiting longer than that (before the first token: that
// the attempts' workers have not gone silent). A stalled attempt is cancelled and failed over
// mid-answer like a dead worker (OnAttemptDone), and counts against its endpoint
// (CallOutcome::kStalled), so a hung worker is ejected for new requests.
void GenerationCall::StartStallWatch() {
  if (dispatcher_->options().stall_timeout_min <= absl::ZeroDuration()) return;  // off
  SteadyClock::duration timeout;
  {
    absl::MutexLock l(&mu_);
    timeout = attempts_.StallTimeout();
  }
  SetStallAlarm(timeout, /*first=*/true);
}

void GenerationCall::SetStallAlarm(SteadyClock::duration after, bool first) {
  auto callback = [this](bool ok) {
    OnStallAlarm(ok);
    Unref();
  };
  Ref();
  const bool set = first ? stall_alarm_.Arm(after, std::move(callback))
                         : stall_alarm_.Rearm(after, std::move(callback));
  if (!set) Unref();
}

void GenerationCall::OnStallAlarm(bool ok) {
  if (!ok) return;
  GenerationAttempts::StallCheck check;
  std::vector<Attempt*> stalled;
  {
    absl::MutexLock l(&mu_);
    check = attempts_.CheckStalls();
    if (check.cancel.has_value()) stalled = RefLive({*check.cancel});
  }
  if (!check.watch_on) return;
  for (Attempt* a : stalled) a->CancelAndUnref();
  // Keeps watching: the failover's stream, once it answers, is committed in turn.
  SetStallAlarm(check.next, /*first=*/false);
}

void GenerationCall::StopTimers() {
  // Each pending callback runs now with ok=false and drops its reference.
  hedge_alarm_.Cancel();
  stall_alarm_.Cancel();
}

// ---- Accounting ----

void GenerationCall::FillFinal(tandem::v1::Usage* usage, tandem::v1::Timings* timings,
                               tandem::v1::Recovery* recovery) const {
  usage_.Fill(usage, timings);
  absl::MutexLock l(&mu_);
  if (!HasRecovery(attempts_.recovery())) return;
  *recovery = attempts_.recovery();
  if (!disclosure_.workers) recovery->clear_final_worker();
}

void GenerationCall::Record(const grpc::Status& ended) {
  const grpc::Status status = dispatcher_->AsCallerSawIt(ended, context_->deadline());
  const auto now = SteadyClock::now();
  const auto& d = admission_.decision;
  // A request refused after routing (no usable worker, a tenant's models) counts under the
  // model that was decided; one refused before, under "none".
  const bool routed = started_ || !d.model.empty();
  const std::string model = routed ? d.model : std::string(kNone);
  const std::string klass = routed || d.shed ? d.request_class : std::string(kNone);
  dispatcher_->metrics().CountRequest(model, klass, GrpcCodeName(status.error_code()),
                                      context_->api());
  if (model_metrics_ != nullptr && started_) {  // Dispatch incremented inflight
    model_metrics_->inflight->Decrement();
    usage_.ObserveModel(*model_metrics_, now);
  }
  std::string recovery;
  {
    absl::MutexLock l(&mu_);
    recovery = RecoveryForLog(attempts_.recovery());
  }
  if (started_) dispatcher_->retry_budget().RequestEnded();
  RecordTenant(status, now);
  // A request refused before dispatch (invalid, unauthenticated, over quota, draining) is
  // logged within --rejected_log_per_second: it costs the caller nothing but the attempt.
  int64_t suppressed = 0;
  if (started_ || dispatcher_->rejected_log().Allow(&suppressed)) {
    spdlog::info(
        "request_id={} rpc={} end model={} class={} status={} prompt_tokens={} "
        "completion_tokens={} duration_ms={:.3f} rule={} worker={} tenant={}{}{}{}{}",
        admission_.request_id, rpc_, model, klass, GrpcCodeName(status.error_code()),
        usage_.prompt_tokens(), usage_.completion_tokens(), Seconds(now - arrival_) * 1e3,
        d.rule.empty() ? "-" : d.rule,
        started_ && admission_.endpoint != nullptr ? admission_.endpoint->address() : "-",
        caller_.tenant != nullptr ? caller_.tenant->name() : "-", recovery,
        status.ok() ? "" : " message=",
        status.ok() ? "" : QuoteForLog(status.error_message(), kMaxLoggedMessageBytes),
        suppressed > 0 ? absl::StrCat(" (", suppressed, " refusals not logged)") : "");
  }
}

void GenerationCall::ReleaseSlot() {
  // The drain's count (CallEnded) only goes in the destructor, so a drain waiting for it never
  // sees the queue still in use.
  queue_wait_.ReleaseSlot();
}

void GenerationCall::RecordTenant(const grpc::Status& status, SteadyClock::time_point now) {
  if (caller_.tenant == nullptr) return;
  GatewayMetrics::Tenant& tm = caller_.tenant->metrics();
  dispatcher_->metrics().CountTenantRequest(tm.label, GrpcCodeName(status.error_code()));
  usage_.ObserveTenant(tm, now, tenant_admitted_);
  if (!tenant_admitted_) return;
  // What the request did not use of its reservation goes back to the tenant's bucket.
  const int64_t used =
      std::max<int64_t>(admission_.features.prompt_tokens, usage_.prompt_tokens()) +
      usage_.completion_tokens();
  caller_.tenant->Release(reserved_tokens_ - used);
}

void GenerationCall::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

absl::Status GenerationCall::ForCaller(const absl::Status& status) const {
  if (disclosure_.workers || status.code() != absl::StatusCode::kUnavailable) return status;
  return absl::UnavailableError(
      absl::StrCat("model '", admission_.decision.model, "' has no usable worker; retry later"));
}

// ---- GenerationAttempts::Environment ----

SteadyClock::time_point GenerationCall::Now() const { return SteadyClock::now(); }

absl::StatusOr<AttemptTarget> GenerationCall::PickTarget(
    const std::vector<const AttemptTarget*>& exclude) {
  std::vector<const Endpoint*> endpoints;
  endpoints.reserve(exclude.size());
  for (const AttemptTarget* t : exclude) endpoints.push_back(t->target->endpoint.get());
  absl::StatusOr<Target> target = dispatcher_->intake().PickTarget(admission_, endpoints);
  if (!target.ok()) return ForCaller(target.status());
  return ToAttemptTarget(*std::move(target));
}

bool GenerationCall::TryRetry() { return dispatcher_->retry_budget().TryRetry(SteadyClock::now()); }

bool GenerationCall::TryHedge() { return dispatcher_->retry_budget().TryHedge(); }

void GenerationCall::ReleaseHedge() { dispatcher_->retry_budget().ReleaseHedge(); }

bool GenerationCall::CallerGone() const {
  return context_->IsCancelled() ||
         std::chrono::system_clock::now() >= std::min(context_->deadline(), worker_deadline_);
}

bool GenerationCall::Unresponsive(const AttemptTarget& target) const {
  return target.target->endpoint->unresponsive();
}

bool GenerationCall::AnotherUsable(const AttemptTarget& target) const {
  for (const auto& e : *target.target->pool->endpoints()) {
    if (e.get() != target.target->endpoint.get() && e->usable()) return true;
  }
  return false;
}

void GenerationCall::CountRetry(const std::string& model, const char* reason) {
  dispatcher_->metrics().CountRetry(model, reason);
}

void GenerationCall::CountFailover(const std::string& from_model, const std::string& to_model) {
  dispatcher_->metrics().CountFailover(from_model, to_model);
}

void GenerationCall::CountHedge(const std::string& model, bool won) {
  dispatcher_->metrics().CountHedge(model, won);
}

void GenerationCall::CountRetryBudgetExhausted() {
  dispatcher_->metrics().CountRetryBudgetExhausted();
}

void GenerationCall::CountStall(const std::string& model) {
  dispatcher_->metrics().CountStall(model);
}

}  // namespace tandem::gateway
