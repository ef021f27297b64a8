#include "gateway/gateway_metrics.h"

namespace tandem::gateway {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// OpenTelemetry GenAI time-to-first-token buckets (seconds).
const Histogram::BucketBoundaries kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                                  0.25,  0.5,   0.75, 1,    2.5,  5,    7.5,  10};
// OpenTelemetry GenAI time-per-output-token buckets, extended down to 1 ms.
const Histogram::BucketBoundaries kTpotBuckets = {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025,
                                                  0.05,  0.075,  0.1,   0.15,   0.2,  0.3,
                                                  0.4,   0.5,    0.75,  1,      2.5};
// From 100 us (the gateway's own overhead) to minutes (long generations).
const Histogram::BucketBoundaries kDurationBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25,   0.5,     1,      2.5,   5,      10,    20,   40,    80,   160};

}  // namespace

GatewayMetrics::GatewayMetrics(prometheus::Registry& r, const std::vector<std::string>& models,
                               const std::vector<std::string>& classes, const std::string& version)
    : requests_(BuildCounter()
                    .Name("tandem_gateway_requests_total")
                    .Help("Requests finished, by model, request class and gRPC status code.")
                    .Register(r)),
      decisions_(BuildCounter()
                     .Name("tandem_gateway_route_decisions_total")
                     .Help("Routing decisions, by chosen model, class, deciding rule and policy "
                           "version.")
                     .Register(r)),
      shadows_(BuildCounter()
                   .Name("tandem_gateway_shadow_requests_total")
                   .Help("Shadow copies of requests (answer discarded), by shadow model, the "
                         "request's class and gRPC status code.")
                   .Register(r)),
      policy_info_(BuildGauge()
                       .Name("tandem_policy_info")
                       .Help("1 for the live routing policy; labels identify it.")
                       .Register(r)),
      reloads_ok_(BuildCounter()
                      .Name("tandem_policy_reloads_total")
                      .Help("Policy reload attempts, by result.")
                      .Register(r)
                      .Add({{"result", "ok"}})),
      reloads_error_(BuildCounter()
                         .Name("tandem_policy_reloads_total")
                         .Register(r)
                         .Add({{"result", "error"}})),
      decision_log_written_(BuildCounter()
                                .Name("tandem_gateway_decision_log_records_total")
                                .Help("Decision-log records, by outcome (dropped: the writer "
                                      "was more than --decision_log_queue records behind).")
                                .Register(r)
                                .Add({{"outcome", "written"}})),
      decision_log_dropped_(BuildCounter()
                                .Name("tandem_gateway_decision_log_records_total")
                                .Register(r)
                                .Add({{"outcome", "dropped"}})) {
  auto& duration = BuildHistogram()
                       .Name("tandem_gateway_request_duration_seconds")
                       .Help("Time from arrival at the gateway to the end of the response.")
                       .Register(r);
  auto& ttft = BuildHistogram()
                   .Name("tandem_gateway_time_to_first_token_seconds")
                   .Help("Time from arrival at the gateway to the first generated text relayed.")
                   .Register(r);
  auto& tpot = BuildHistogram()
                   .Name("tandem_gateway_time_per_output_token_seconds")
                   .Help("Mean time per generated token after the first, per request.")
                   .Register(r);
  auto& inflight = BuildGauge()
                       .Name("tandem_gateway_inflight_requests")
                       .Help("Requests dispatched to a worker and not yet finished.")
                       .Register(r);
  auto& prompt = BuildCounter()
                     .Name("tandem_gateway_prompt_tokens_total")
                     .Help("Prompt tokens of served requests, as counted by the workers.")
                     .Register(r);
  auto& completion = BuildCounter()
                         .Name("tandem_gateway_completion_tokens_total")
                         .Help("Tokens generated for served requests.")
                         .Register(r);
  auto& ready = BuildGauge()
                    .Name("tandem_gateway_ready_workers")
                    .Help("Worker endpoints of the model that are ready.")
                    .Register(r);
  auto& shadow_duration = BuildHistogram()
                              .Name("tandem_gateway_shadow_duration_seconds")
                              .Help("Duration of shadow copies, start to last chunk.")
                              .Register(r);
  auto& shadow_tokens = BuildCounter()
                            .Name("tandem_gateway_shadow_completion_tokens_total")
                            .Help("Tokens generated for shadow copies (discarded).")
                            .Register(r);
  auto& workers = BuildGauge()
                      .Name("tandem_gateway_workers")
                      .Help("Worker endpoints configured for the model.")
                      .Register(r);
  BuildGauge()
      .Name("tandem_gateway_info")
      .Help("Constant 1; labels describe the gateway build.")
      .Register(r)
      .Add({{"version", version}})
      .Set(1);

  for (const std::string& m : models) {
    const prometheus::Labels l = {{"model_name", m}};
    models_[m] = Model{&duration.Add(l, kDurationBuckets),
                       &ttft.Add(l, kTtftBuckets),
                       &tpot.Add(l, kTpotBuckets),
                       &inflight.Add(l),
                       &prompt.Add(l),
                       &completion.Add(l),
                       &ready.Add(l),
                       &workers.Add(l),
                       &shadow_duration.Add(l, kDurationBuckets),
                       &shadow_tokens.Add(l)};
    for (const std::string& c : classes) Child(requests_, request_children_, "code", m, c, "OK");
  }
  // Refusals before routing, so error-ratio alerts have a series from the start.
  for (const char* code : {"INVALID_ARGUMENT", "UNAVAILABLE", "RESOURCE_EXHAUSTED"}) {
    Child(requests_, request_children_, "code", "none", "none", code);
  }
}

GatewayMetrics::Model* GatewayMetrics::ForModel(const std::string& model) {
  auto it = models_.find(model);
  return it == models_.end() ? nullptr : &it->second;
}

prometheus::Counter& GatewayMetrics::Child(prometheus::Family<prometheus::Counter>& family,
                                           std::map<Key, prometheus::Counter*>& cache,
                                           const char* third_label, const std::string& model,
                                           const std::string& request_class,
                                           const std::string& third) {
  std::lock_guard<std::mutex> l(mu_);
  Key key = std::make_tuple(model, request_class, third);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  prometheus::Counter& c =
      family.Add({{"model_name", model}, {"class", request_class}, {third_label, third}});
  cache.emplace(std::move(key), &c);
  return c;
}

void GatewayMetrics::CountRequest(const std::string& model, const std::string& request_class,
                                  const char* code) {
  Child(requests_, request_children_, "code", model, request_class, code).Increment();
}

void GatewayMetrics::CountShadow(const std::string& model, const std::string& request_class,
                                 const char* code) {
  Child(shadows_, shadow_children_, "code", model, request_class, code).Increment();
}

void GatewayMetrics::CountDecision(const std::string& model, const std::string& request_class,
                                   const std::string& rule, const std::string& policy_version) {
  std::lock_guard<std::mutex> l(mu_);
  auto key = std::make_tuple(model, request_class, rule, policy_version);
  auto it = decision_children_.find(key);
  if (it == decision_children_.end()) {
    prometheus::Counter& c = decisions_.Add({{"model_name", model},
                                             {"class", request_class},
                                             {"rule", rule},
                                             {"policy_version", policy_version}});
    it = decision_children_.emplace(std::move(key), &c).first;
  }
  it->second->Increment();
}

void GatewayMetrics::CountPolicyReload(bool ok) { (ok ? reloads_ok_ : reloads_error_).Increment(); }

void GatewayMetrics::SetLivePolicy(const std::string& version, const std::string& sha256) {
  std::lock_guard<std::mutex> l(mu_);
  if (live_policy_ != nullptr) policy_info_.Remove(live_policy_);
  live_policy_ = &policy_info_.Add({{"version", version}, {"sha256", sha256}});
  live_policy_->Set(1);
}

}  // namespace tandem::gateway
