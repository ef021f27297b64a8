#include "gateway/intake.h"

#include <algorithm>
#include <functional>
#include <random>

#include "absl/strings/str_format.h"
#include "common/utf8.h"

namespace tandem::gateway {

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%016x", rng());
}

absl::Status Intake::Admit(const tandem::v1::GenerateRequest& request,
                           const std::string& metadata_request_id,
                           std::chrono::system_clock::time_point deadline, bool dry_run,
                           Admission* out) const {
  out->request_id = !request.request_id().empty()  ? request.request_id()
                    : !metadata_request_id.empty() ? metadata_request_id
                                                   : NewRequestId();
  if (out->request_id.size() > 128 || !IsValidUtf8(out->request_id)) {
    out->request_id = NewRequestId();
    return absl::InvalidArgumentError("request_id: must be valid UTF-8 of at most 128 bytes");
  }
  const size_t bytes = request.ByteSizeLong();
  if (static_cast<int64_t>(bytes) > options_.max_request_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("request: %d bytes exceeds the limit of %d bytes (--max_request_bytes)",
                        bytes, options_.max_request_bytes));
  }
  if (absl::Status s = ValidateMessages(request.messages(), options_.limits); !s.ok()) return s;
  // The model's own max_tokens limit is checked once the model is known.
  if (absl::Status s = ValidateSampling(request.sampling(), 0, options_.limits); !s.ok()) return s;
  for (const auto& [key, value] : request.labels()) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return absl::InvalidArgumentError("labels: keys and values must be valid UTF-8");
    }
  }

  out->features = router::ExtractFeatures(request);
  out->features.split_key = std::hash<std::string>{}(out->request_id);
  // gRPC reports "no deadline" as a time far in the future, not always exactly max().
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::system_clock::now());
  if (deadline != std::chrono::system_clock::time_point::max() &&
      left < std::chrono::hours(24 * 365)) {
    out->features.deadline_ms = std::max<int64_t>(0, left.count());
  }
  // One snapshot decides the whole request, whatever reloads happen meanwhile.
  const std::shared_ptr<const router::Router> router = router_->Current();
  absl::StatusOr<router::RouteDecision> decision = router->Route(out->features);
  if (!decision.ok()) return decision.status();
  out->decision = std::move(*decision);
  out->pool = pools_->Find(out->decision.model);
  if (out->pool == nullptr) {
    return absl::UnavailableError(
        absl::StrFormat("model '%s' chosen by rule '%s' has no workers configured (--workers)",
                        out->decision.model, out->decision.rule));
  }

  // Model-specific checks use what the model's workers reported.
  const tandem::v1::ModelStatus status = out->pool->Status();
  const bool known = !status.model_id().empty();
  if (known && out->features.image_count > 0 && !status.capabilities().vision()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "messages: %d image(s) given, but model '%s' (rule '%s') does not accept images",
        out->features.image_count, out->decision.model, out->decision.rule));
  }
  int32_t limit = status.capabilities().max_output_tokens();
  if (known && request.sampling().has_max_tokens() && request.sampling().max_tokens() > limit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling.max_tokens: %d exceeds the limit of model '%s' (%d)",
                        request.sampling().max_tokens(), out->decision.model, limit));
  }
  if (dry_run) return absl::OkStatus();

  absl::StatusOr<Endpoint*> endpoint = out->pool->Pick();
  // The policy's fallback order, skipping models that could not take this request.
  for (const std::string& model : out->decision.fallback) {
    if (endpoint.ok()) break;
    ModelPool* pool = pools_->Find(model);
    if (pool == nullptr) continue;
    const tandem::v1::ModelStatus fb = pool->Status();
    if (out->features.image_count > 0 && !fb.capabilities().vision()) continue;
    if (request.sampling().has_max_tokens() &&
        request.sampling().max_tokens() > fb.capabilities().max_output_tokens()) {
      continue;
    }
    absl::StatusOr<Endpoint*> e = pool->Pick();
    if (!e.ok()) continue;
    out->decision.reason = absl::StrFormat("%s; fell back from '%s': %s", out->decision.reason,
                                           out->decision.model, endpoint.status().message());
    out->decision.model = model;
    out->pool = pool;
    limit = fb.capabilities().max_output_tokens();
    endpoint = e;
  }
  if (!endpoint.ok()) return endpoint.status();
  out->endpoint = *endpoint;

  auto& w = out->worker_request;
  w.set_request_id(out->request_id);
  *w.mutable_messages() = request.messages();
  *w.mutable_sampling() = request.sampling();
  if (!request.sampling().has_max_tokens()) {
    w.mutable_sampling()->set_max_tokens(limit > 0 ? std::min(options_.default_max_tokens, limit)
                                                   : options_.default_max_tokens);
  }
  *w.mutable_reasoning() = request.hints().reasoning();
  return absl::OkStatus();
}

}  // namespace tandem::gateway
