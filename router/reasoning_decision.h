#pragma once

#include <cstdint>
#include <string>

#include "router/policy.h"
#include "router/request_features.h"
#include "router/route_decision.h"
#include "router/signal_snapshot.h"

namespace tandem::router {

// Decides the request's reasoning (thinking on or off, and its budget in tokens) once its rule is
// known. The caller's explicit choice (a mode, or a budget) wins; otherwise the deciding rule's
// `reasoning` action, its budget shrunk by a live signal; otherwise the model's own default
// (both models think). Sets d->reasoning, d->thinking_budget and d->reasoning_source.
// `action` may be null (no rule, or the built-in router).
void DecideReasoning(const RequestFeatures& f, const ReasoningAction* action,
                     const std::string& rule, const SignalSnapshot& signals, RouteDecision* d);

// The rule's budget at the signal's current value: `budget_tokens` up to `shrink.from`, falling
// linearly to `shrink.min_tokens` at `shrink.to` and beyond; the full budget while the signal
// has no value (fail open: a missing metric must not starve thinking).
int32_t ShrunkBudget(const ReasoningAction& action, const SignalSnapshot& signals);

// A tenant's cap on thinking tokens (0: none). A request that may think (on, or the model's
// default) gets at most `max_tokens`; one with thinking off is left alone.
void CapThinking(int32_t max_tokens, const std::string& tenant, RouteDecision* d);

// "on (budget 4096 tokens) by rule 'math'", for explanations and logs.
std::string DescribeReasoning(const RouteDecision& d);

}  // namespace tandem::router
