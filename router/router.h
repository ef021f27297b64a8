#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "router/request_features.h"
#include "router/route_decision.h"
#include "router/signal_snapshot.h"

namespace tandem::router {

// Decides which model serves a request. Implementations are pure functions of their inputs and
// their own immutable configuration: safe to call from any thread, never blocking.
class Router {
 public:
  virtual ~Router() = default;
  // Errors only when no configured model can serve the request (e.g. images and no vision
  // model): FAILED_PRECONDITION or INVALID_ARGUMENT with the reason.
  // `signals` is the live snapshot the decision reads signal.NAME and trigger.NAME from.
  // `trace`: explain every rule considered (RouteDecision::trace: the Route RPC, replay, tests);
  // without it only the deciding rule is explained (in `reason`), which is what serving needs
  // and several times cheaper.
  virtual absl::StatusOr<RouteDecision> Route(const RequestFeatures& features,
                                              const SignalSnapshot& signals, bool trace) const = 0;
  absl::StatusOr<RouteDecision> Route(const RequestFeatures& features,
                                      const SignalSnapshot& signals) const {
    return Route(features, signals, true);
  }
  // The prompt sizes (tokens) at which the decision changes: the gateway counts a prompt exactly
  // when its estimate is near one of them.
  virtual std::vector<int64_t> PromptTokenThresholds() const { return {}; }
  // How the gateway picks among `model`'s workers, as the policy says it (models.NAME.
  // worker_pick: least_outstanding, power_of_two, round_robin or prefix); empty: the gateway's
  // own --endpoint_pick.
  virtual std::string WorkerPick(const std::string& model) const {
    (void)model;
    return "";
  }
  // Whether a decision reads RequestFeatures::prefix_hit_tokens, which the gateway then works
  // out for every request (a hash of the prompt and a lookup per model).
  virtual bool ReadsPrefixHits() const { return false; }
  // With no live signals (tests, replay, tandemctl): static values only, triggers off.
  absl::StatusOr<RouteDecision> Route(const RequestFeatures& features) const {
    return Route(features, SignalSnapshot{}, true);
  }
};

}  // namespace tandem::router
