#include "router/builtin_router.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "router/reasoning_decision.h"

namespace tandem::router {
namespace {

const char* ClassOf(const BuiltinRouterConfig& c, const std::string& model) {
  if (model == c.accuracy_model) return "accuracy_critical";
  if (model == c.latency_model) return "latency_critical";
  return "default";
}

}  // namespace

absl::StatusOr<RouteDecision> BuiltinRouter::Route(const RequestFeatures& f, const SignalSnapshot&,
                                                   bool) const {
  RouteDecision d;
  auto decide = [&](std::string rule, std::string model, std::string klass, std::string reason) {
    d.trace.push_back({rule, true, reason});
    d.rule = std::move(rule);
    d.model = std::move(model);
    d.request_class = std::move(klass);
    d.reason = std::move(reason);
    DecideReasoning(f, nullptr, d.rule, {}, &d);
    return d;
  };
  auto skip = [&](std::string rule, std::string detail) {
    d.trace.push_back({std::move(rule), false, std::move(detail)});
  };

  if (!f.pinned_model.empty()) {
    if (!config_.models.contains(f.pinned_model)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("hints.model: unknown model '%s'", f.pinned_model));
    }
    return decide("pin", f.pinned_model, "pinned",
                  absl::StrFormat("the caller pinned model '%s'", f.pinned_model));
  }
  skip("pin", "no model pinned");

  if (f.image_count > 0) {
    return decide("vision", config_.vision_model, ClassOf(config_, config_.vision_model),
                  absl::StrFormat("%d image(s) in the input; '%s' accepts images", f.image_count,
                                  config_.vision_model));
  }
  skip("vision", "no image input");

  if (f.prompt_tokens > config_.long_context_tokens) {
    return decide("long_context", config_.long_context_model, "long_context",
                  absl::StrFormat("prompt of ~%d tokens exceeds the long-context threshold %d",
                                  f.prompt_tokens, config_.long_context_tokens));
  }
  skip("long_context", absl::StrFormat("prompt of ~%d tokens is within the threshold %d",
                                       f.prompt_tokens, config_.long_context_tokens));

  if (f.objective == Objective::kAccuracy) {
    return decide("objective_accuracy", config_.accuracy_model, "accuracy_critical",
                  "the caller asked for accuracy");
  }
  skip("objective_accuracy", absl::StrCat("objective is ", ObjectiveName(f.objective)));

  if (f.objective == Objective::kLatency) {
    return decide("objective_latency", config_.latency_model, "latency_critical",
                  "the caller asked for low latency");
  }
  skip("objective_latency", absl::StrCat("objective is ", ObjectiveName(f.objective)));

  return decide("default", config_.default_model, ClassOf(config_, config_.default_model),
                absl::StrFormat("no rule matched; default model '%s'", config_.default_model));
}

}  // namespace tandem::router
