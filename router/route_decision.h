#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "router/request_features.h"

namespace tandem::router {

// One rule the router evaluated, and why it did or did not match.
struct RuleTrace {
  std::string rule;
  bool matched = false;
  std::string detail;
};

struct RouteDecision {
  std::string model;
  std::string request_class;
  std::string rule;
  std::string reason;
  // 1.0 for rule decisions; the learned classifier reports its own.
  double confidence = 1.0;
  // Every rule considered, in order; the last matched one decided.
  std::vector<RuleTrace> trace;
  // Version of the policy that decided ("builtin" for the built-in rules).
  std::string policy_version = "builtin";
  // Also send a copy here, answer discarded; empty for none.
  std::string shadow;
  // Models to try in order when `model` has no ready worker.
  std::vector<std::string> fallback;
  // Load shedding: refuse with RESOURCE_EXHAUSTED and this retry hint.
  bool shed = false;
  double retry_after_seconds = 0;
  // Hedge after this many seconds without a first token; 0 for no hedging.
  double hedge_after_seconds = 0;
  // Thinking for the worker: kDefault leaves the model's own default (see reasoning_decision.h).
  ReasoningMode reasoning = ReasoningMode::kDefault;
  // Thinking tokens when it may think; 0 for no budget.
  int32_t thinking_budget = 0;
  // Who decided: "caller", "rule 'NAME'" (with any live shrink), "model default"; a tenant's cap
  // is appended.
  std::string reasoning_source = "model default";
  // The learned tier's answer when it was consulted (empty otherwise).
  std::string learned_class;
  double learned_confidence = 0;
  // Set when the learned tier was unsure and the policy has a second opinion: the gateway asks
  // `model` (router/second_opinion.h's question over `classes`) within `timeout_seconds`, then
  // routes the request again with RequestFeatures::second_opinion_asked set. The decision as it
  // stands is what holds without an answer.
  struct SecondOpinion {
    std::string model;
    double timeout_seconds = 0;
    std::vector<std::string> classes;
  };
  std::optional<SecondOpinion> second_opinion;
};

}  // namespace tandem::router
