#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/request_validation.h"
#include "gateway/intake/prompt_token_counter.h"
#include "gateway/intake/router_holder.h"
#include "gateway/intake/sessions.h"
#include "gateway/pool/worker_pools.h"
#include "gateway/signals/signal_engine.h"
#include "policies/tenant_config.h"
#include "router/router.h"
#include "tandem/v1/gateway.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

struct IntakeOptions {
  // Requests larger than this (serialized) are refused with INVALID_ARGUMENT.
  int64_t max_request_bytes = 32ll << 20;
  // max_tokens when the request sets none (capped at the model's limit).
  int32_t default_max_tokens = 1024;
  RequestLimits limits;
  // Estimated prompt tokens beyond which a request is refused (0: only the model's context).
  int64_t max_prompt_tokens = 0;
  // Largest max_tokens accepted, whatever the model allows (0: the model's limit only).
  int32_t max_tokens_limit = 0;
  // Workers' prefix caches shared by all tenants (else each tenant's prompts match only its
  // own: one tenant cannot time whether another's prompt is cached).
  bool shared_prefix_cache = false;
};

// Everything decided about a request before it is dispatched.
struct Admission {
  std::string request_id;
  router::RequestFeatures features;
  router::RouteDecision decision;
  ModelPool* pool = nullptr;
  // Null after Decide (set by Admit).
  std::shared_ptr<Endpoint> endpoint;
  // For the chosen model; its max_tokens is capped again for any other model tried.
  tandem::v1::WorkerGenerateRequest worker_request;
  // Set when a shed rule refused the request.
  double retry_after_seconds = 0;
  // The decided model when admission fell back to another (empty otherwise).
  std::string fell_back_from;
  // The policy's second-opinion model was asked (GenerationCall), and the class it answered
  // (empty: none in time): Admit again routes with them.
  bool second_opinion_asked = false;
  std::string second_opinion_class;
  // The caller's tenant (null without tenants): its `models` bound every attempt.
  std::shared_ptr<const policies::TenantSpec> tenant;
  // The named session's state before this turn, and after it (RecordSession records the turn and
  // signs its token; Decide alone fills what the turn would be, without a token).
  std::string session_key;  // Sessions::Key of the caller's tenant and the session id
  SessionLookup session_before;
  tandem::v1::SessionInfo session;
  // The prompt's prefix chain, for models picked by prefix and policies that read
  // prefix_hit_tokens (empty when neither does).
  PromptPrefix prefix;
  // The policy snapshot that decided: its models' worker_pick rules pick every attempt's worker.
  std::shared_ptr<const router::Router> router;
};

// Where one attempt of a request goes.
struct Target {
  ModelPool* pool = nullptr;
  std::shared_ptr<Endpoint> endpoint;
  // The model's max_output_tokens as its workers report it (0 when unknown).
  int32_t max_output_tokens = 0;
  PickInfo pick;  // why this endpoint
};

// Validation, routing and endpoint choice, shared by Generate, GenerateStream and Route.
// Thread-safe and non-blocking.
class Intake {
 public:
  // `signals` may be null (no live signals: static values only, triggers off); `sessions` may be
  // null (session ids are validated, and routing sees each turn as a session's first).
  // `counter` may be null (prompts are only estimated).
  Intake(const RouterHolder* router, const WorkerPools* pools, IntakeOptions options,
         const SignalEngine* signals = nullptr, Sessions* sessions = nullptr,
         const PromptTokenCounter* counter = nullptr)
      : router_(router),
        pools_(pools),
        options_(options),
        signals_(signals),
        sessions_(sessions),
        counter_(counter) {}

  // Validates and routes the request without choosing a worker: the Route RPC's answer (a dry
  // run), and the first half of Admit. `out->request_id` is set even on error (taken from the
  // request, then from `metadata_request_id`, else generated). `deadline` is the call's
  // (system_clock max for none); it becomes the deadline_ms feature. With `tenant`, the
  // decision is kept to its `models` (KeepToTenantModels): a decided model outside them gives
  // way to the rule's first fallback within them, and none left is PERMISSION_DENIED.
  // `trace`: explain every rule considered (the Route RPC); Admit explains only the deciding one.
  absl::Status Decide(const tandem::v1::GenerateRequest& request,
                      const std::string& metadata_request_id,
                      std::chrono::system_clock::time_point deadline, Admission* out,
                      std::shared_ptr<const policies::TenantSpec> tenant = nullptr,
                      bool trace = true) const;

  // Decide, then the first endpoint (falling back to the decision's fallbacks, within the
  // tenant's models, when the model has no usable worker) and the worker request.
  absl::Status Admit(const tandem::v1::GenerateRequest& request,
                     const std::string& metadata_request_id,
                     std::chrono::system_clock::time_point deadline, Admission* out,
                     std::shared_ptr<const policies::TenantSpec> tenant = nullptr) const;

  // Records an admitted turn of a named session (its model, its turn) and signs its token into
  // `a->session`. Called once the request has passed its tenant's quotas, so a refused turn does
  // not count; a turn refused later (queue full or timed out) or served elsewhere by a failover
  // keeps the admitted model.
  void RecordSession(Admission* a) const;

  // A usable endpoint for another attempt of an admitted request: the decided model first, then
  // its fallbacks in order, skipping `exclude` (endpoints that already failed it, or the one a
  // hedge races), models the tenant may not use, and models that cannot take the request
  // (images, max_tokens).
  absl::StatusOr<Target> PickTarget(const Admission& admission,
                                    const std::vector<const Endpoint*>& exclude) const;

  const IntakeOptions& options() const { return options_; }

 private:
  // How `model`'s worker is picked: the deciding policy's models.NAME.worker_pick, else the
  // gateway's --endpoint_pick.
  PickStrategy PickRule(const Admission& a, const std::string& model) const;
  // Some model the request may go to is picked by prefix (its prefix chain is then built).
  bool PicksByPrefix(const Admission& a) const;
  // The cache partition the request's prefixes belong to: the authenticated tenant, or one for
  // all with --shared_prefix_cache.
  std::string PrefixPartition(const Admission& a) const;
  // prefix_hit_tokens.MODEL for every model served, when the router reads them.
  void AddPrefixHits(const tandem::v1::GenerateRequest& request, const router::Router& router,
                     Admission* out) const;
  // Size, messages, sampling, labels and hints, before the request is routed.
  absl::Status ValidateRequest(const tandem::v1::GenerateRequest& request) const;
  // The prompt-size limit, the request's routing features that depend on the call, and the
  // router's decision (RESOURCE_EXHAUSTED when a rule sheds it).
  absl::Status Route(const router::Router& router, std::chrono::system_clock::time_point deadline,
                     bool trace, Admission* out) const;
  // Replaces the estimated prompt tokens by the tokenizer's count when the estimate is near a
  // threshold of the router, --max_prompt_tokens or the tenant's token burst.
  void CountNearThresholds(const tandem::v1::GenerateRequest& request, const router::Router& router,
                           Admission* out) const;
  // Whether the decided model (already within the tenant's models) can take the request
  // (workers configured, images, max_tokens).
  absl::Status CheckModel(const tandem::v1::GenerateRequest& request, Admission* out) const;

  const RouterHolder* const router_;
  const WorkerPools* const pools_;
  const IntakeOptions options_;
  const SignalEngine* const signals_;
  Sessions* const sessions_;
  const PromptTokenCounter* const counter_;
};

// Longest hints.model accepted.
inline constexpr size_t kMaxModelNameBytes = 64;

// INVALID_ARGUMENT for an objective or reasoning mode outside its enum, a negative thinking
// budget, or a hints.model that is not a model name.
absl::Status ValidateHints(const tandem::v1::RoutingHints& hints);

// Whether `tenant` (null: no tenants file) may use `model`: its `models`, all when empty.
bool TenantMayUse(const policies::TenantSpec* tenant, const std::string& model);

// Keeps a decision to the tenant's models: the rule's candidates (its model, then its fallbacks)
// are filtered, the first one left becomes the model (the reason says so) and the rest its
// fallbacks; a shadow to a model outside them is dropped. PERMISSION_DENIED naming every
// candidate when none is left, or when the caller pinned (`pinned_model`, hints.model) a model
// it may not use. Without a tenant, or with one that may use every model, nothing changes.
absl::Status KeepToTenantModels(const policies::TenantSpec* tenant, const std::string& pinned_model,
                                router::RouteDecision* d);

// The worker's reasoning options for a decision (mode and thinking budget).
void SetWorkerReasoning(const router::RouteDecision& d, tandem::v1::ReasoningOptions* out);

// The caller's request id: the field, else the x-request-id metadata value; empty when neither.
const std::string& CallerRequestId(const tandem::v1::GenerateRequest& request,
                                   const std::string& metadata_request_id);
// The caller's request id when it is valid (ValidateRequestId), else a new one.
std::string LoggableRequestId(const tandem::v1::GenerateRequest& request,
                              const std::string& metadata_request_id);

// 16 random hex digits.
std::string NewRequestId();

}  // namespace tandem::gateway
