#include "gateway/dispatch/dispatcher.h"

#include <algorithm>
#include <thread>

#include "absl/time/clock.h"
#include "common/steady_wait.h"
#include "gateway/dispatch/shadow_call.h"
#include "router/decision_record.h"

namespace tandem::gateway {

Dispatcher::Dispatcher(const Intake* intake, const WorkerPools* pools, GatewayMetrics* metrics,
                       DispatchOptions options)
    : intake_(intake),
      pools_(pools),
      metrics_(metrics),
      options_(options),
      access_(options.tenants, pools, options.expose_worker_addresses),
      retry_budget_(options.retry_budget_ratio, options.retry_budget_min),
      rejected_log_(options.rejected_log_per_second, 2 * options.rejected_log_per_second) {}

Dispatcher::~Dispatcher() = default;

FairQueue* Dispatcher::QueueFor(const std::string& model) const {
  if (options_.queues == nullptr) return nullptr;
  auto it = options_.queues->find(model);
  return it == options_.queues->end() ? nullptr : it->second.get();
}

grpc::Status Dispatcher::AsCallerSawIt(const grpc::Status& status,
                                       std::chrono::system_clock::time_point deadline) const {
  if (status.error_code() == grpc::StatusCode::CANCELLED &&
      std::chrono::system_clock::now() +
              absl::ToChronoMicroseconds(options_.deadline_cancel_window) >=
          deadline) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "the caller's deadline passed (" + status.error_message() + ")");
  }
  return status;
}

void Dispatcher::RecordDecision(const Admission& a) {
  const auto& d = a.decision;
  if (!a.fell_back_from.empty()) metrics_->CountFallback(a.fell_back_from, d.model);
  metrics_->CountPromptTokens(a.features.prompt_tokens_exact);
  metrics_->CountDecision(d.model, d.request_class, d.rule, d.policy_version,
                          router::ReasoningModeName(d.reasoning));
  if (options_.decision_log == nullptr) return;
  tandem::v1::DecisionRecord record = router::ToRecord(a.features, d);
  record.set_request_id(a.request_id);
  record.set_time_unix_seconds(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  // The text the learned tier read (bounded), so replay classifies exactly what live did.
  if (options_.log_prompt_text) record.set_prompt_text(a.features.classifier_text);
  options_.decision_log->Record(std::move(record));
}

std::shared_ptr<Endpoint> Dispatcher::PickEndpoint(const std::string& model) const {
  ModelPool* pool = pools_->Find(model);
  if (pool == nullptr) return nullptr;
  absl::StatusOr<std::shared_ptr<Endpoint>> endpoint = pool->Pick(pools_->pick(model));
  return endpoint.ok() ? *endpoint : nullptr;
}

void Dispatcher::StartShadow(const Admission& a, const std::string& model) {
  ModelPool* pool = pools_->Find(model);
  const char* refused = nullptr;
  absl::StatusOr<std::shared_ptr<Endpoint>> endpoint = absl::UnavailableError("no pool");
  if (pool == nullptr) {
    refused = "UNAVAILABLE";
  } else if (a.features.image_count > 0 && !pool->Facts().vision) {
    refused = "INVALID_ARGUMENT";  // the shadow model cannot take this request
  } else if (endpoint = pool->Pick(pools_->pick(model)); !endpoint.ok()) {
    refused = "UNAVAILABLE";
  }
  if (refused != nullptr) {
    metrics_->CountShadow(model, a.decision.request_class, refused);
    return;
  }
  CallStarted();  // draining waits for shadows too
  absl::MutexLock l(&shadow_mu_);
  if (draining()) {
    metrics_->CountShadow(model, a.decision.request_class, "UNAVAILABLE");
    CallEnded();
    return;
  }
  // Registered under the lock before it can finish, so StartDraining can cancel it.
  shadows_.insert(new ShadowCall(this, *endpoint, model, a, options_.shadow_timeout));
}

void Dispatcher::ShadowEnded(ShadowCall* call) {
  absl::MutexLock l(&shadow_mu_);
  shadows_.erase(call);
}

void Dispatcher::StartDraining() {
  draining_.store(true, std::memory_order_relaxed);
  // Shadows only measure; they need not delay the drain.
  absl::MutexLock l(&shadow_mu_);
  for (ShadowCall* s : shadows_) s->Cancel();
}

void Dispatcher::CallStarted() { inflight_.fetch_add(1, std::memory_order_relaxed); }

void Dispatcher::CallEnded() {
  if (inflight_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  absl::MutexLock l(&mu_);
  idle_cv_.SignalAll();
}

void Dispatcher::RefusedWhileDraining() {
  last_refused_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                         std::memory_order_relaxed);
}

void Dispatcher::WaitQuiet(std::chrono::steady_clock::duration quiet,
                           std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto last = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(last_refused_ns_.load(std::memory_order_relaxed)));
    const auto until = std::min(last + quiet, deadline);
    if (std::chrono::steady_clock::now() >= until) return;
    std::this_thread::sleep_until(until);
  }
}

bool Dispatcher::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  absl::MutexLock l(&mu_);
  while (inflight() != 0 && WaitUntil(idle_cv_, mu_, deadline)) {
  }
  return inflight() == 0;
}

}  // namespace tandem::gateway
