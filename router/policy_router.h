#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "router/policy.h"
#include "router/router.h"

namespace tandem::router {

enum class FieldKind { kNumber, kString };

// The model name a shedding decision carries (no model serves it).
inline constexpr char kShedModel[] = "none";

// The kind of a condition field, or nullopt when the name is not a field. Fields: prompt_tokens,
// prompt_bytes, image_count, num_messages, num_turns, tool_count, agent_steps,
// system_prompt_bytes, max_tokens, confidence, code_cues, math_cues, reasoning_cues,
// structured_output_cues, deadline_ms, session.turn, signal.NAME (numbers); objective, reasoning,
// class, hint.model, tenant (the authenticated one), last_role, session.model, label.KEY,
// trigger.NAME (on or off) (strings); prefix_hit_tokens.MODEL (a number).
std::optional<FieldKind> KindOfField(const std::string& field);

// The same with the field's id and, for label., signal., trigger. and prefix_hit_tokens. fields,
// its key.
struct FieldInfo {
  Field id = Field::kUnknown;
  FieldKind kind = FieldKind::kNumber;
  std::string key;
};
std::optional<FieldInfo> LookupField(std::string_view field);

// Decides with a policy: classify (first matching class rule, else the default class), then the
// first matching rule's action. Pure: the policy is immutable and shared; safe on any thread.
class PolicyRouter final : public Router {
 public:
  explicit PolicyRouter(std::shared_ptr<const Policy> policy);

  using Router::Route;
  absl::StatusOr<RouteDecision> Route(const RequestFeatures& features,
                                      const SignalSnapshot& signals, bool trace) const override;
  const Policy& policy() const { return *policy_; }
  // The operands of every prompt_tokens condition of the policy.
  std::vector<int64_t> PromptTokenThresholds() const override { return thresholds_; }
  std::string WorkerPick(const std::string& model) const override {
    auto it = policy_->models.find(model);
    return it == policy_->models.end() ? "" : it->second.worker_pick;
  }
  bool ReadsPrefixHits() const override { return reads_prefix_hits_; }

 private:
  const std::shared_ptr<const Policy> policy_;
  std::vector<int64_t> thresholds_;
  bool reads_prefix_hits_ = false;
};

}  // namespace tandem::router
