#include "gateway/intake/intake.h"

#include <algorithm>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/call_metadata.h"
#include "common/log_text.h"
#include "router/reasoning_decision.h"

namespace tandem::gateway {

absl::Status ValidateHints(const tandem::v1::RoutingHints& hints) {
  if (!tandem::v1::Objective_IsValid(hints.objective())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hints.objective: %d is not an Objective (0 unspecified, 1 accuracy, 2 latency)",
        static_cast<int>(hints.objective())));
  }
  // A model name is a short token (as in ListModels); an unknown one is echoed in the router's
  // error, so this also bounds that echo.
  if (!hints.model().empty() && !IsPlainToken(hints.model(), kMaxModelNameBytes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hints.model: %s is not a model name (1 to %d visible ASCII characters; see ListModels)",
        QuoteForLog(hints.model()), kMaxModelNameBytes));
  }
  return ValidateReasoning(hints.reasoning(), "hints.reasoning");
}

const std::string& CallerRequestId(const tandem::v1::GenerateRequest& request,
                                   const std::string& metadata_request_id) {
  return !request.request_id().empty() ? request.request_id() : metadata_request_id;
}

std::string LoggableRequestId(const tandem::v1::GenerateRequest& request,
                              const std::string& metadata_request_id) {
  const std::string& id = CallerRequestId(request, metadata_request_id);
  return ValidateRequestId(id).ok() ? id : NewRequestId();
}

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%016x", rng());
}

void SetWorkerReasoning(const router::RouteDecision& d, tandem::v1::ReasoningOptions* out) {
  out->Clear();
  switch (d.reasoning) {
    case router::ReasoningMode::kOn:
      out->set_mode(tandem::v1::REASONING_MODE_ON);
      break;
    case router::ReasoningMode::kOff:
      out->set_mode(tandem::v1::REASONING_MODE_OFF);
      break;
    default:
      break;
  }
  out->set_thinking_budget_tokens(d.thinking_budget);
}

absl::Status Intake::ValidateRequest(const tandem::v1::GenerateRequest& request) const {
  const size_t bytes = request.ByteSizeLong();
  if (static_cast<int64_t>(bytes) > options_.max_request_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request: %d bytes exceeds the limit of %d bytes (--max_request_bytes)",
                        bytes, options_.max_request_bytes));
  }
  if (absl::Status s = ValidateMessages(request.messages(), options_.limits); !s.ok()) return s;
  // The model's own max_tokens limit is checked once the model is known.
  if (absl::Status s = ValidateSampling(request.sampling(), 0, options_.limits); !s.ok()) return s;
  if (absl::Status s = ValidateTools(request.tools(), options_.limits); !s.ok()) return s;
  if (absl::Status s = ValidateLabels(request.labels(), options_.limits); !s.ok()) return s;
  if (absl::Status s = ValidateHints(request.hints()); !s.ok()) return s;
  if (!request.session_id().empty() && !IsPlainToken(request.session_id(), Sessions::kMaxIdBytes)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("session_id: %s is not a session id (1 to %d visible ASCII characters)",
                        QuoteForLog(request.session_id()), Sessions::kMaxIdBytes));
  }
  if (options_.max_tokens_limit > 0 &&
      request.sampling().max_tokens() > options_.max_tokens_limit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.max_tokens: %d exceeds the gateway's limit of %d "
                        "(--max_tokens_limit)",
                        request.sampling().max_tokens(), options_.max_tokens_limit));
  }
  return absl::OkStatus();
}

void Intake::CountNearThresholds(const tandem::v1::GenerateRequest& request,
                                 const router::Router& router, Admission* out) const {
  if (counter_ == nullptr) return;
  std::vector<int64_t> thresholds = router.PromptTokenThresholds();
  thresholds.push_back(options_.max_prompt_tokens);
  if (out->tenant != nullptr && out->tenant->limits.tokens_per_second > 0) {
    // A reservation (prompt plus max_tokens) larger than the burst is refused.
    const int64_t max_tokens = request.sampling().has_max_tokens() ? request.sampling().max_tokens()
                                                                   : options_.default_max_tokens;
    thresholds.push_back(static_cast<int64_t>(out->tenant->limits.burst_tokens) - max_tokens);
  }
  if (!counter_->Near(out->features.prompt_tokens, thresholds)) return;
  out->features.prompt_tokens = counter_->Count(request);
  out->features.prompt_tokens_exact = true;
}

absl::Status Intake::Route(const router::Router& router,
                           std::chrono::system_clock::time_point deadline, bool trace,
                           Admission* out) const {
  if (options_.max_prompt_tokens > 0 && out->features.prompt_tokens > options_.max_prompt_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "messages: %s%d prompt tokens exceeds the gateway's limit of %d (--max_prompt_tokens)",
        out->features.prompt_tokens_exact ? "" : "about ", out->features.prompt_tokens,
        options_.max_prompt_tokens));
  }
  out->features.split_key = std::hash<std::string>{}(out->request_id);
  if (!IsNoDeadline(deadline)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::system_clock::now());
    out->features.deadline_ms = std::max<int64_t>(0, left.count());
  }
  static const router::SignalSnapshot kNoSignals;
  const std::shared_ptr<const router::SignalSnapshot> signals =
      signals_ != nullptr ? signals_->Current() : nullptr;
  absl::StatusOr<router::RouteDecision> decision =
      router.Route(out->features, signals != nullptr ? *signals : kNoSignals, trace);
  if (!decision.ok()) return decision.status();
  out->decision = std::move(*decision);
  if (out->decision.shed) {
    out->retry_after_seconds = out->decision.retry_after_seconds;
    // The rule's name only: its reason lists the conditions, which may name other tenants
    // (Route explains them to admins).
    return absl::ResourceExhaustedError(
        absl::StrFormat("shed by rule '%s' of policy %s; retry after %gs", out->decision.rule,
                        out->decision.policy_version, out->decision.retry_after_seconds));
  }
  return absl::OkStatus();
}

bool TenantMayUse(const policies::TenantSpec* tenant, const std::string& model) {
  return tenant == nullptr || tenant->models.empty() || tenant->models.contains(model);
}

absl::Status KeepToTenantModels(const policies::TenantSpec* tenant, const std::string& pinned_model,
                                router::RouteDecision* d) {
  if (tenant == nullptr || tenant->models.empty()) return absl::OkStatus();
  // A shadow copy would carry the tenant's prompt to a model it may not use.
  if (!d->shadow.empty() && !TenantMayUse(tenant, d->shadow)) d->shadow.clear();
  // The rule's candidates in its order: its model, then its fallbacks (each once).
  std::vector<std::string> allowed, refused;
  std::vector<std::string> candidates = {d->model};
  for (const std::string& m : d->fallback) {
    if (std::find(candidates.begin(), candidates.end(), m) == candidates.end()) {
      candidates.push_back(m);
    }
  }
  for (std::string& m : candidates) {
    (TenantMayUse(tenant, m) ? allowed : refused).push_back(std::move(m));
  }
  const bool primary_allowed = refused.empty() || refused.front() != d->model;
  // A model the caller pinned is its own choice: serving another instead would hide the refusal.
  const bool pinned = !pinned_model.empty() && pinned_model == d->model;
  if (allowed.empty() || (!primary_allowed && pinned)) {
    const std::string how = pinned ? "pinned by hints.model, rule" : "chosen by rule";
    std::vector<std::string> fallbacks(refused.begin() + 1, refused.end());
    return absl::PermissionDeniedError(
        absl::StrFormat("tenant '%s' may not use model '%s' (%s '%s')%s; its models: %s",
                        tenant->name, d->model, how, d->rule,
                        fallbacks.empty() || pinned
                            ? ""
                            : absl::StrCat(" nor its fallback", fallbacks.size() > 1 ? "s" : "",
                                           " '", absl::StrJoin(fallbacks, "', '"), "'"),
                        absl::StrJoin(tenant->models, ", ")));
  }
  if (!primary_allowed) {
    absl::StrAppend(&d->reason, "; tenant '", tenant->name, "' may not use '", d->model,
                    "': its fallback '", allowed.front(), "'");
    d->model = allowed.front();
  }
  // Every later attempt (retry, failover, hedge, a fallback after a queue wait) picks among these.
  d->fallback.assign(allowed.begin() + 1, allowed.end());
  return absl::OkStatus();
}

absl::Status Intake::CheckModel(const tandem::v1::GenerateRequest& request, Admission* out) const {
  out->pool = pools_->Find(out->decision.model);
  if (out->pool == nullptr) {
    return absl::UnavailableError(
        absl::StrFormat("model '%s' chosen by rule '%s' has no workers configured (--workers)",
                        out->decision.model, out->decision.rule));
  }
  // Model-specific checks use what the model's workers reported.
  const ModelFacts facts = out->pool->Facts();
  if (facts.known && out->features.image_count > 0 && !facts.vision) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "messages: %d image(s) given, but model '%s' (rule '%s') does not accept images",
        out->features.image_count, out->decision.model, out->decision.rule));
  }
  const int32_t limit = facts.max_output_tokens;
  if (facts.known && request.sampling().has_max_tokens() &&
      request.sampling().max_tokens() > limit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.max_tokens: %d exceeds the limit of model '%s' (%d)",
                        request.sampling().max_tokens(), out->decision.model, limit));
  }
  return absl::OkStatus();
}

absl::Status Intake::Decide(const tandem::v1::GenerateRequest& request,
                            const std::string& metadata_request_id,
                            std::chrono::system_clock::time_point deadline, Admission* out,
                            std::shared_ptr<const policies::TenantSpec> tenant, bool trace) const {
  out->tenant = std::move(tenant);
  out->request_id = CallerRequestId(request, metadata_request_id);
  if (out->request_id.empty()) out->request_id = NewRequestId();
  // Checked first: the id names the request in every log line, and goes to the worker as
  // metadata, where gRPC aborts the process on a byte a header may not carry.
  if (absl::Status s = ValidateRequestId(out->request_id); !s.ok()) {
    out->request_id = NewRequestId();
    return s;
  }
  if (absl::Status s = ValidateRequest(request); !s.ok()) return s;
  // Images count by the sizes their headers declare (the router reads no images).
  out->features = router::ExtractFeatures(request, ImageTokenCounts(request));
  out->features.second_opinion_asked = out->second_opinion_asked;
  out->features.second_opinion_class = out->second_opinion_class;
  // An authenticated caller's tenant is who it is, whatever its `tenant` label says: policies
  // that route by tenant must not be steerable by a label.
  if (out->tenant != nullptr) out->features.tenant = out->tenant->name;
  if (!request.session_id().empty()) {
    if (sessions_ != nullptr) {
      out->session_key = Sessions::Key(out->features.tenant, request.session_id());
      out->session_before = sessions_->Lookup(out->session_key, request.session_token());
    }
    // A session on a model the tenant may no longer use (its tenants entry changed) moves on,
    // instead of every turn being refused: the caller never asked for that model.
    if (!TenantMayUse(out->tenant.get(), out->session_before.model)) {
      out->session_before.model.clear();
    }
    out->features.session_model = out->session_before.model;
    out->features.session_turn = out->session_before.turns + 1;
  }
  // One snapshot decides the whole request, whatever reloads happen meanwhile.
  const std::shared_ptr<const router::Router> router = router_->Current();
  out->router = router;
  CountNearThresholds(request, *router, out);
  AddPrefixHits(request, *router, out);
  if (absl::Status s = Route(*router, deadline, trace, out); !s.ok()) return s;
  // Before the session's fields: `switched` compares the model the turn will go to.
  if (absl::Status s =
          KeepToTenantModels(out->tenant.get(), out->features.pinned_model, &out->decision);
      !s.ok()) {
    return s;
  }
  if (!request.session_id().empty()) {
    out->session.set_id(request.session_id());
    out->session.set_turn(out->features.session_turn);
    out->session.set_source(out->session_before.source);
    out->session.set_switched(!out->session_before.model.empty() &&
                              out->session_before.model != out->decision.model);
  }
  if (out->tenant != nullptr) {
    router::CapThinking(out->tenant->limits.max_thinking_tokens, out->tenant->name, &out->decision);
  }
  return CheckModel(request, out);
}

absl::Status Intake::Admit(const tandem::v1::GenerateRequest& request,
                           const std::string& metadata_request_id,
                           std::chrono::system_clock::time_point deadline, Admission* out,
                           std::shared_ptr<const policies::TenantSpec> tenant) const {
  if (absl::Status s =
          Decide(request, metadata_request_id, deadline, out, std::move(tenant), /*trace=*/false);
      !s.ok()) {
    return s;
  }
  if (out->prefix.empty() && PicksByPrefix(*out)) {
    out->prefix = PromptPrefixOf(PrefixPartition(*out), request);
  }
  absl::StatusOr<Target> target = PickTarget(*out, {});
  if (!target.ok()) return target.status();
  if (target->pool != out->pool) {
    out->fell_back_from = out->decision.model;
    out->decision.reason = absl::StrFormat("%s; fell back from '%s' (no usable worker)",
                                           out->decision.reason, out->decision.model);
    out->decision.model = target->pool->name();
    out->pool = target->pool;
  }
  out->endpoint = target->endpoint;
  if (std::string_view(target->pick.rule) == "prefix") {
    absl::StrAppendFormat(&out->decision.reason, "; worker by prefix (~%d prompt tokens cached)",
                          target->pick.prefix_hit_tokens);
  }

  auto& w = out->worker_request;
  w.set_request_id(out->request_id);
  *w.mutable_messages() = request.messages();
  *w.mutable_tools() = request.tools();
  *w.mutable_sampling() = request.sampling();
  if (!request.sampling().has_max_tokens()) {
    const int32_t model_limit = target->max_output_tokens;
    w.mutable_sampling()->set_max_tokens(model_limit > 0
                                             ? std::min(options_.default_max_tokens, model_limit)
                                             : options_.default_max_tokens);
  }
  SetWorkerReasoning(out->decision, w.mutable_reasoning());
  w.set_cache_partition(PrefixPartition(*out));
  return absl::OkStatus();
}

void Intake::RecordSession(Admission* a) const {
  if (a->session.id().empty() || sessions_ == nullptr) return;
  sessions_->Record(a->session_key, a->session_before, a->decision.model, &a->session);
}

PickStrategy Intake::PickRule(const Admission& a, const std::string& model) const {
  if (a.router != nullptr) {
    // Validated when the policy loaded; the flag's rule otherwise.
    if (absl::StatusOr<PickStrategy> s = ParsePickStrategy(a.router->WorkerPick(model)); s.ok()) {
      return *s;
    }
  }
  return pools_->pick(model);
}

std::string Intake::PrefixPartition(const Admission& a) const {
  // The authenticated tenant only: the request's `tenant` label grants nothing.
  return options_.shared_prefix_cache || a.tenant == nullptr ? "" : a.tenant->name;
}

void Intake::AddPrefixHits(const tandem::v1::GenerateRequest& request, const router::Router& router,
                           Admission* out) const {
  if (!router.ReadsPrefixHits()) return;
  out->prefix = PromptPrefixOf(PrefixPartition(*out), request);
  for (const auto& [model, pool] : pools_->pools()) {
    out->features.prefix_hit_tokens[model] = pool->ExpectedHitTokens(out->prefix);
  }
}

bool Intake::PicksByPrefix(const Admission& a) const {
  if (PickRule(a, a.decision.model) == PickStrategy::kPrefix) return true;
  for (const std::string& model : a.decision.fallback) {
    if (PickRule(a, model) == PickStrategy::kPrefix) return true;
  }
  return false;
}

absl::StatusOr<Target> Intake::PickTarget(const Admission& a,
                                          const std::vector<const Endpoint*>& exclude) const {
  absl::Status first;
  const auto try_model = [&](const std::string& model, bool primary) -> std::optional<Target> {
    ModelPool* pool = pools_->Find(model);
    if (pool == nullptr) return std::nullopt;
    const ModelFacts facts = pool->Facts();
    const int32_t limit = facts.max_output_tokens;
    if (!primary) {
      // A fallback must be able to take the request as it is.
      if (a.features.image_count > 0 && !facts.vision) return std::nullopt;
      if (a.features.max_tokens > 0 && a.features.max_tokens > limit) return std::nullopt;
    }
    PickInfo info;
    absl::StatusOr<std::shared_ptr<Endpoint>> e =
        pool->Pick(PickRule(a, model), exclude, &a.prefix, &info);
    if (!e.ok()) {
      if (first.ok()) first = e.status();
      return std::nullopt;
    }
    return Target{pool, std::move(*e), limit, info};
  };
  // Decide already kept the decision to the tenant's models; checked again here because every
  // attempt (the first, retries, failovers, hedges) is dispatched to what this returns.
  const policies::TenantSpec* tenant = a.tenant.get();
  if (TenantMayUse(tenant, a.decision.model)) {
    if (auto t = try_model(a.decision.model, true)) return *t;
  }
  for (const std::string& model : a.decision.fallback) {
    if (model == a.decision.model || !TenantMayUse(tenant, model)) continue;
    if (auto t = try_model(model, false)) return *t;
  }
  if (!TenantMayUse(tenant, a.decision.model) && first.ok()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "tenant '%s' may not use model '%s', and no fallback it may use has a usable worker",
        tenant->name, a.decision.model));
  }
  return first.ok() ? absl::UnavailableError(
                          absl::StrFormat("model '%s' has no usable worker", a.decision.model))
                    : first;
}

}  // namespace tandem::gateway
