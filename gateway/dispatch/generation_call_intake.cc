// GenerationCall's intake: authentication, admission (and the classifier's second opinion), the
// tenant's quotas and the dispatch queue, up to the first attempt (generation_call.cc).
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/call_metadata.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "gateway/dispatch/generation_call.h"

namespace tandem::gateway {

// ---- Intake ----

absl::Status GenerationCall::Begin(const absl::Status& parsed) {
  // Named before anything can refuse the request, so every end line carries it (Admit
  // validates it, and replaces it when invalid).
  admission_.request_id = LoggableRequestId(request_, context_->RequestIdHeader());
  if (dispatcher_->draining()) {
    dispatcher_->RefusedWhileDraining();
    return absl::UnavailableError("gateway is draining; retry on another replica");
  }
  absl::StatusOr<TenantRegistry::Caller> caller =
      dispatcher_->access().Authenticate(context_->ApiKey());
  if (!caller.ok()) return caller.status();
  caller_ = std::move(*caller);
  disclosure_ = dispatcher_->access().DisclosureFor(caller_);
  if (!parsed.ok()) return parsed;
  if (request_.session_id().empty()) request_.set_session_id(context_->SessionIdHeader());
  if (request_.session_token().empty()) {
    request_.set_session_token(context_->SessionTokenHeader());
  }
  if (absl::Status s = Admit(); !s.ok()) return s;
  if (admission_.decision.second_opinion.has_value() && AskSecondOpinion()) {
    return absl::OkStatus();
  }
  return Proceed();
}

absl::Status GenerationCall::Proceed() {
  CountAdmitted();
  if (absl::Status s = ReserveTenantTokens(); !s.ok()) return s;
  dispatcher_->intake().RecordSession(&admission_);
  // Counted from here (or from a second opinion) so a drain waits for queued requests too.
  if (!counted_) {
    dispatcher_->CallStarted();
    counted_ = true;
  }
  return Enqueue();
}

bool GenerationCall::AskSecondOpinion() {
  const router::RouteDecision::SecondOpinion& ask = *admission_.decision.second_opinion;
  std::shared_ptr<Endpoint> endpoint = dispatcher_->PickEndpoint(ask.model);
  if (endpoint == nullptr) {
    dispatcher_->metrics().CountSecondOpinion(ask.model, admission_.decision.request_class,
                                              "unavailable");
    return false;
  }
  dispatcher_->CallStarted();  // a drain waits for the question too
  counted_ = true;
  Ref();  // dropped by OnSecondOpinion
  const SteadyClock::time_point asked = SteadyClock::now();
  SecondOpinionCall* call = SecondOpinionCall::Start(
      std::move(endpoint), ask, admission_.request_id, admission_.features.classifier_text,
      [this, asked](const std::string& request_class, const grpc::Status& status) {
        OnSecondOpinion(request_class, status, asked);
      });
  // Registered for CancelAll unless it has already answered (then it may be gone).
  absl::MutexLock l(&mu_);
  if (!second_opinion_answered_) second_opinion_ = call;
  return true;
}

void GenerationCall::OnSecondOpinion(const std::string& request_class, const grpc::Status& status,
                                     SteadyClock::time_point asked) {
  {
    absl::MutexLock l(&mu_);
    second_opinion_ = nullptr;
    second_opinion_answered_ = true;
  }
  GatewayMetrics& metrics = dispatcher_->metrics();
  metrics.second_opinion_duration().Observe(Seconds(SteadyClock::now() - asked));
  const std::string model = admission_.decision.second_opinion->model;
  const char* result = status.ok() ? (request_class.empty() ? "no_answer" : "answered")
                       : status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? "timeout"
                       : status.error_code() == grpc::StatusCode::CANCELLED         ? "cancelled"
                                                                                    : "error";
  if (context_->IsCancelled()) {
    metrics.CountSecondOpinion(model, admission_.decision.request_class, "cancelled");
    Complete(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while classified"));
    Unref();
    return;
  }
  // Routed again with the answer; without one, the policy's default class.
  admission_.second_opinion_asked = true;
  admission_.second_opinion_class = request_class;
  absl::Status s = Admit();
  metrics.CountSecondOpinion(model, admission_.decision.request_class, result);
  if (s.ok()) s = Proceed();
  if (!s.ok()) Complete(ToGrpcStatus(s));
  Unref();
}

absl::Status GenerationCall::Admit() {
  const auto admit_start = SteadyClock::now();
  absl::Status s = dispatcher_->intake().Admit(request_, context_->RequestIdHeader(),
                                               context_->deadline(), &admission_, caller_.spec);
  // Once per request: admitted again with a second opinion, it was timed the first time.
  if (!admission_.second_opinion_asked) {
    dispatcher_->metrics().decision_duration().Observe(Seconds(SteadyClock::now() - admit_start));
  }
  if (s.ok()) return s;
  if (admission_.retry_after_seconds > 0) {
    SetRetryAfter(admission_.retry_after_seconds);
    dispatcher_->metrics().CountShed(admission_.decision.request_class);
    dispatcher_->metrics().CountDecision(
        admission_.decision.model, admission_.decision.request_class, admission_.decision.rule,
        admission_.decision.policy_version);
  }
  if (s.code() == absl::StatusCode::kPermissionDenied) {
    dispatcher_->metrics().CountAuthFailure("model_denied");
  }
  return ForCaller(s);
}

void GenerationCall::CountAdmitted() {
  model_metrics_ = dispatcher_->metrics().ForModel(admission_.decision.model);
  dispatcher_->RecordDecision(admission_);
}

absl::Status GenerationCall::ReserveTenantTokens() {
  if (caller_.tenant == nullptr) return absl::OkStatus();
  // The reservation: the prompt (estimated) and every token the request may generate.
  reserved_tokens_ =
      admission_.features.prompt_tokens + admission_.worker_request.sampling().max_tokens();
  if (auto refusal = caller_.tenant->TryAdmit(reserved_tokens_, SteadyClock::now())) {
    dispatcher_->metrics().CountThrottled(caller_.tenant->metrics().label, refusal->reason);
    SetRetryAfter(refusal->retry_after_seconds, "tenant:" + caller_.tenant->name());
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s; retry after %.3fs", refusal->message, refusal->retry_after_seconds));
  }
  tenant_admitted_ = true;
  return absl::OkStatus();
}

absl::Status GenerationCall::Enqueue() {
  // The decided model's slots: fairness between tenants holds where that model's workers are
  // full, not only at the gateway's own limit.
  FairQueue* queue = dispatcher_->QueueFor(admission_.pool->name());
  if (queue == nullptr) {
    Dispatch(false);
    return absl::OkStatus();
  }
  const std::string tenant = caller_.tenant != nullptr ? caller_.tenant->name() : "anonymous";
  const int priority = caller_.spec != nullptr ? caller_.spec->priority : 1;
  GatewayMetrics::Model* model = dispatcher_->metrics().ForModel(admission_.pool->name());
  const QueueWait::Meters meters{
      .tenant_queued = caller_.tenant != nullptr ? caller_.tenant->metrics().queued : nullptr,
      .model_queued = model != nullptr ? model->queued : nullptr,
      .wait = &dispatcher_->metrics().queue_wait()};
  switch (
      queue_wait_.Join(queue, tenant, priority, dispatcher_->options().max_queue_wait, meters)) {
    case FairQueue::Result::kRun:
      Dispatch(false);
      break;
    case FairQueue::Result::kFull:
      return RefuseQueueFull(tenant);
    case FairQueue::Result::kQueued:
      break;
  }
  return absl::OkStatus();
}

absl::Status GenerationCall::RefuseQueueFull(const std::string& tenant) {
  if (caller_.tenant != nullptr) {
    dispatcher_->metrics().CountThrottled(caller_.tenant->metrics().label, "queue_full");
  }
  const double wait = absl::ToDoubleSeconds(dispatcher_->options().max_queue_wait) / 10;
  SetRetryAfter(wait, caller_.tenant != nullptr ? "tenant:" + caller_.tenant->name() : "");
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the gateway is at --max_inflight and tenant '%s' already has --max_queued requests "
      "waiting; retry after %.3fs",
      tenant, wait));
}

void GenerationCall::SetRetryAfter(double seconds, std::string quota_subject) {
  retry_advice_.Set(seconds, std::move(quota_subject), *context_);
}

// ---- The dispatch queue ----

void GenerationCall::OnSlotGranted() { Dispatch(true); }

void GenerationCall::OnQueueTimeout() {
  if (caller_.tenant != nullptr) {
    dispatcher_->metrics().CountThrottled(caller_.tenant->metrics().label, "queue_timeout");
  }
  SetRetryAfter(1);
  Complete(grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat("waited ", absl::FormatDuration(dispatcher_->options().max_queue_wait),
                   " for a dispatch slot (--max_queue_wait); the gateway is at "
                   "--max_inflight; retry after 1s")));
}

}  // namespace tandem::gateway
