#pragma once

#include <set>
#include <string>

#include "router/router.h"

namespace tandem::router {

struct BuiltinRouterConfig {
  // Every model name the gateway serves; pins must name one.
  std::set<std::string> models = {"qwen", "nemotron"};
  std::string accuracy_model = "qwen";
  std::string latency_model = "nemotron";
  // Image input goes here (must accept images).
  std::string vision_model = "qwen";
  // Prompts above long_context_tokens go here.
  std::string long_context_model = "nemotron";
  int64_t long_context_tokens = 32768;
  // When no rule matches.
  std::string default_model = "qwen";
};

// The foundation's fixed rule set, evaluated in order, first match wins:
//   pin -> vision -> long_context -> objective_accuracy -> objective_latency -> default.
class BuiltinRouter final : public Router {
 public:
  explicit BuiltinRouter(BuiltinRouterConfig config) : config_(std::move(config)) {}
  using Router::Route;
  std::vector<int64_t> PromptTokenThresholds() const override {
    return {config_.long_context_tokens};
  }
  // Its trace is a handful of fixed strings: built whatever `trace` says.
  absl::StatusOr<RouteDecision> Route(const RequestFeatures& features,
                                      const SignalSnapshot& signals, bool trace) const override;

 private:
  const BuiltinRouterConfig config_;
};

}  // namespace tandem::router
