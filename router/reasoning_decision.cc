#include "router/reasoning_decision.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::router {

int32_t ShrunkBudget(const ReasoningAction& a, const SignalSnapshot& signals) {
  if (a.shrink_signal.empty() || a.shrink_to <= a.shrink_from) return a.budget_tokens;
  auto it = signals.values.find(a.shrink_signal);
  if (it == signals.values.end() || !std::isfinite(it->second)) return a.budget_tokens;
  const double t =
      std::clamp((it->second - a.shrink_from) / (a.shrink_to - a.shrink_from), 0.0, 1.0);
  const double budget = a.budget_tokens - t * (a.budget_tokens - a.shrink_min_tokens);
  return static_cast<int32_t>(std::lround(budget));
}

void DecideReasoning(const RequestFeatures& f, const ReasoningAction* action,
                     const std::string& rule, const SignalSnapshot& signals, RouteDecision* d) {
  if (f.reasoning != ReasoningMode::kDefault || f.thinking_budget > 0) {
    d->reasoning = f.reasoning;
    d->thinking_budget = f.reasoning == ReasoningMode::kOff ? 0 : f.thinking_budget;
    d->reasoning_source = "caller";
    return;
  }
  if (action == nullptr || !action->set) {
    d->reasoning = ReasoningMode::kDefault;
    d->thinking_budget = 0;
    d->reasoning_source = "model default";
    return;
  }
  d->reasoning = action->on ? ReasoningMode::kOn : ReasoningMode::kOff;
  d->thinking_budget = action->on ? ShrunkBudget(*action, signals) : 0;
  d->reasoning_source = absl::StrCat("rule '", rule, "'");
  if (action->on && d->thinking_budget != action->budget_tokens) {
    absl::StrAppendFormat(&d->reasoning_source, " (budget %d shrunk to %d by signal.%s)",
                          action->budget_tokens, d->thinking_budget, action->shrink_signal);
  }
}

void CapThinking(int32_t max_tokens, const std::string& tenant, RouteDecision* d) {
  if (max_tokens <= 0 || d->reasoning == ReasoningMode::kOff) return;
  if (d->thinking_budget > 0 && d->thinking_budget <= max_tokens) return;
  d->thinking_budget = max_tokens;
  absl::StrAppendFormat(&d->reasoning_source, "; budget capped at %d by tenant '%s'", max_tokens,
                        tenant);
}

std::string DescribeReasoning(const RouteDecision& d) {
  std::string out = ReasoningModeName(d.reasoning);
  if (d.thinking_budget > 0) absl::StrAppend(&out, " (budget ", d.thinking_budget, " tokens)");
  absl::StrAppend(&out, " by ", d.reasoning_source);
  return out;
}

}  // namespace tandem::router
