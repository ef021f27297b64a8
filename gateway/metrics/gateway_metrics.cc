#include "gateway/metrics/gateway_metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/metric_families.h"

namespace tandem::gateway {
namespace {

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
    : requests_(CounterFamily(
          r, "tandem_gateway_requests_total",
          "Requests finished, by model, request class, gRPC status code and the API they came "
          "by (grpc or openai).")),
      decisions_(CounterFamily(
          r, "tandem_gateway_route_decisions_total",
          "Routing decisions, by chosen model, class, deciding rule, policy version and the "
          "decided reasoning (on, off, or default: the model's own).")),
      shadows_(CounterFamily(r, "tandem_gateway_shadow_requests_total",
                             "Shadow copies of requests (answer discarded), by shadow model, the "
                             "request's class and gRPC status code.")),
      second_opinions_(CounterFamily(
          r, "tandem_gateway_second_opinions_total",
          "Requests the learned classifier was unsure of whose class the policy asked a model "
          "(classifier.second_opinion), by that model, the class the request then got, and "
          "result: answered, no_answer, timeout, error, unavailable or cancelled.")),
      second_opinion_duration_(
          HistogramFamily(r, "tandem_gateway_second_opinion_duration_seconds",
                          "Time a second opinion took, from asking to the answer or giving up.")
              .Add({}, Histogram::BucketBoundaries{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                                                   5})),
      policy_info_(GaugeFamily(r, "tandem_policy_info",
                               "1 for the live routing policy; labels identify it.")),
      endpoint_ready_(GaugeFamily(r, "tandem_gateway_endpoint_ready",
                                  "1 when the worker endpoint's last active health probe passed.")),
      endpoint_breaker_(GaugeFamily(r, "tandem_gateway_endpoint_breaker_state",
                                    "Circuit breaker of the endpoint: 0 closed, 1 open (ejected), "
                                    "2 half-open (next probe decides).")),
      endpoint_ejections_(CounterFamily(r, "tandem_gateway_endpoint_ejections_total",
                                        "Times the endpoint was ejected by outlier detection.")),
      dns_resolutions_(CounterFamily(r, "tandem_gateway_dns_resolutions_total",
                                     "Re-resolutions of dns: worker endpoints, by result.")),
      scrapes_(CounterFamily(r, "tandem_gateway_worker_scrapes_total",
                             "Scrapes of worker /metrics for routing signals, by result.")),
      signal_value_(GaugeFamily(r, "tandem_gateway_signal_value",
                                "Current value of a policy signal (NaN when it has none).")),
      signal_stale_(GaugeFamily(r, "tandem_gateway_signal_stale",
                                "1 when the policy signal's value is older than its stale_after.")),
      signal_age_(GaugeFamily(r, "tandem_gateway_signal_age_seconds",
                              "Seconds since the policy signal was last refreshed.")),
      signal_errors_(CounterFamily(r, "tandem_gateway_signal_refresh_errors_total",
                                   "Failed refreshes of a policy signal (query error, no data).")),
      trigger_active_(
          GaugeFamily(r, "tandem_gateway_trigger_active", "1 while the policy trigger is on.")),
      trigger_transitions_(CounterFamily(r, "tandem_gateway_trigger_transitions_total",
                                         "Times the policy trigger turned on or off.")),
      retries_(CounterFamily(r, "tandem_gateway_retries_total",
                             "Requests retried before anything was streamed, by the model retried "
                             "on and the reason.")),
      retry_budget_exhausted_(CounterFamily(r, "tandem_gateway_retry_budget_exhausted_total",
                                            "Retries and hedges refused by the retry budget.")
                                  .Add({})),
      failovers_(CounterFamily(r, "tandem_gateway_midstream_failovers_total",
                               "Answers continued on another worker after their worker failed "
                               "mid-stream, by the model that failed and the one that continued.")),
      stalls_(CounterFamily(r, "tandem_gateway_stream_stalls_total",
                            "Streams whose worker sent no token within the stall timeout, by the "
                            "model of that worker; each was failed over mid-answer.")),
      hedges_(CounterFamily(r, "tandem_gateway_hedges_total",
                            "Hedged copies sent (no first token after the rule's delay), by model "
                            "and outcome (won: the hedge answered first).")),
      shed_(CounterFamily(r, "tandem_gateway_shed_requests_total",
                          "Requests refused with RESOURCE_EXHAUSTED by a policy shed rule.")),
      fallbacks_(CounterFamily(r, "tandem_gateway_fallbacks_total",
                               "Requests admitted to a fallback model because the decided one had "
                               "no usable worker, by decided and serving model.")),
      picks_(CounterFamily(r, "tandem_gateway_endpoint_picks_total",
                           "Worker endpoints picked, by rule: prefix (the one expected to hold "
                           "the prompt's prefix), load (the least loaded), random2 (power of "
                           "two), round_robin.")),
      pick_hit_tokens_(CounterFamily(r, "tandem_gateway_expected_prefix_hit_tokens_total",
                                     "Prompt tokens (estimated) the picked endpoints were "
                                     "expected to hold in their prefix caches.")),
      decision_duration_(
          HistogramFamily(r, "tandem_gateway_route_decision_duration_seconds",
                          "Time to admit a request: validation, features, the routing decision "
                          "(learned classifier included) and the endpoint pick.")
              .Add({}, Histogram::BucketBoundaries{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4,
                                                   2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2})),
      tenant_requests_(
          CounterFamily(r, "tandem_gateway_tenant_requests_total",
                        "Generation requests finished, by tenant and gRPC status code.")),
      tenant_throttled_(CounterFamily(r, "tandem_gateway_tenant_throttled_total",
                                      "Requests refused with RESOURCE_EXHAUSTED by a tenant quota "
                                      "or the dispatch queue, by tenant and reason.")),
      tenant_tokens_(CounterFamily(r, "tandem_gateway_tenant_tokens_total",
                                   "Tokens of finished requests, by tenant and kind (prompt, "
                                   "completion), as counted by the workers.")),
      tenant_inflight_(
          GaugeFamily(r, "tandem_gateway_tenant_inflight_requests",
                      "Requests admitted for the tenant and not finished, queued ones included.")),
      tenant_queued_(GaugeFamily(r, "tandem_gateway_tenant_queued_requests",
                                 "Requests of the tenant waiting for a dispatch slot.")),
      tenant_duration_(
          HistogramFamily(r, "tandem_gateway_tenant_request_duration_seconds",
                          "Time from arrival to the end of the response of the tenant's requests "
                          "that passed its quotas (queue waits included).")),
      tenant_ttft_(HistogramFamily(r, "tandem_gateway_tenant_time_to_first_token_seconds",
                                   "Time from arrival to the first text relayed, of the tenant's "
                                   "requests (queue waits included).")),
      auth_failures_(
          CounterFamily(r, "tandem_gateway_auth_failures_total",
                        "Calls refused UNAUTHENTICATED or PERMISSION_DENIED, by reason.")),
      queue_wait_(HistogramFamily(r, "tandem_gateway_queue_wait_seconds",
                                  "Time requests waited for a dispatch slot (--max_inflight).")
                      .Add({}, kDurationBuckets)),
      session_turns_family_(CounterFamily(
          r, "tandem_gateway_session_turns_total",
          "Turns of named sessions routed, by where the session's previous model was known from: "
          "token (the caller's route token), table (this replica's session table), new (neither: "
          "a first turn, or a miss). Sticky hits are token + table.")),
      session_turns_{&session_turns_family_.Add({{"source", "token"}}),
                     &session_turns_family_.Add({{"source", "table"}}),
                     &session_turns_family_.Add({{"source", "new"}})},
      session_switches_(CounterFamily(r, "tandem_gateway_session_model_switches_total",
                                      "Turns of a session routed to another model than its "
                                      "previous turn (a rule moved it, or its model was down).")
                            .Add({})),
      sessions_(GaugeFamily(r, "tandem_gateway_sessions",
                            "Sessions this replica remembers (--max_sessions bounds them).")
                    .Add({})),
      session_evictions_family_(
          CounterFamily(r, "tandem_gateway_session_evictions_total",
                        "Sessions forgotten, by reason: ttl (idle past --session_ttl) or "
                        "capacity (the least recently used, past --max_sessions).")),
      session_evictions_{&session_evictions_family_.Add({{"reason", "ttl"}}),
                         &session_evictions_family_.Add({{"reason", "capacity"}})},
      prompt_counts_family_(CounterFamily(
          r, "tandem_gateway_prompt_token_counts_total",
          "Admitted requests by how their prompt size was known: tokenizer (counted exactly, its "
          "estimate being near a threshold; --tokenizer) or estimate.")),
      prompt_counted_(prompt_counts_family_.Add({{"source", "tokenizer"}})),
      prompt_estimated_(prompt_counts_family_.Add({{"source", "estimate"}})),
      reloads_ok_(
          CounterFamily(r, "tandem_policy_reloads_total", "Policy reload attempts, by result.")
              .Add({{"result", "ok"}})),
      reloads_error_(CounterFamily(r, "tandem_policy_reloads_total").Add({{"result", "error"}})),
      tenants_reloads_ok_(CounterFamily(r, "tandem_gateway_tenants_reloads_total",
                                        "Tenants file (--tenants) reload attempts, by result.")
                              .Add({{"result", "ok"}})),
      tenants_reloads_error_(
          CounterFamily(r, "tandem_gateway_tenants_reloads_total").Add({{"result", "error"}})),
      decision_log_written_(CounterFamily(r, "tandem_gateway_decision_log_records_total",
                                          "Decision-log records, by outcome (dropped: the writer "
                                          "was more than --decision_log_queue records behind).")
                                .Add({{"outcome", "written"}})),
      decision_log_dropped_(CounterFamily(r, "tandem_gateway_decision_log_records_total")
                                .Add({{"outcome", "dropped"}})),
      http_connections_refused_(
          CounterFamily(r, "tandem_gateway_http_connections_refused_total",
                        "HTTP front connections refused (503 and closed) because "
                        "--http_max_connections were open and none was idle to close instead.")
              .Add({})),
      http_connections_(GaugeFamily(r, "tandem_gateway_http_connections",
                                    "HTTP front connections open, counted against "
                                    "--http_max_connections.")
                            .Add({})),
      http_idle_connections_(GaugeFamily(r, "tandem_gateway_http_idle_connections",
                                         "Of the HTTP front's open connections, those idle "
                                         "(between requests, or lingering after a last answer): "
                                         "what a full front closes for a new client.")
                                 .Add({})) {
  GaugeFamily(r, "tandem_gateway_info", "Constant 1; labels describe the gateway build.")
      .Add({{"version", version}})
      .Set(1);

  AddModels(r, models);
  SeedSeries(models, classes);
}

void GatewayMetrics::AddModels(prometheus::Registry& r, const std::vector<std::string>& models) {
  auto& duration = HistogramFamily(r, "tandem_gateway_request_duration_seconds",
                                   "Time from arrival at the gateway to the end of the response.");
  auto& ttft =
      HistogramFamily(r, "tandem_gateway_time_to_first_token_seconds",
                      "Time from arrival at the gateway to the first generated text relayed.");
  auto& tpot = HistogramFamily(r, "tandem_gateway_time_per_output_token_seconds",
                               "Mean time per generated token after the first, per request.");
  auto& inflight = GaugeFamily(r, "tandem_gateway_inflight_requests",
                               "Requests dispatched to a worker and not yet finished.");
  auto& queued = GaugeFamily(r, "tandem_gateway_queued_requests",
                             "Requests waiting in the gateway for one of the model's dispatch "
                             "slots (--max_inflight, --dispatch_headroom).");
  auto& prompt = CounterFamily(r, "tandem_gateway_prompt_tokens_total",
                               "Prompt tokens of served requests, as counted by the workers.");
  auto& completion = CounterFamily(r, "tandem_gateway_completion_tokens_total",
                                   "Tokens generated for served requests.");
  auto& ready = GaugeFamily(r, "tandem_gateway_ready_workers",
                            "Worker endpoints of the model that are ready.");
  auto& shadow_duration = HistogramFamily(r, "tandem_gateway_shadow_duration_seconds",
                                          "Duration of shadow copies, start to last chunk.");
  auto& shadow_tokens = CounterFamily(r, "tandem_gateway_shadow_completion_tokens_total",
                                      "Tokens generated for shadow copies (discarded).");
  auto& workers =
      GaugeFamily(r, "tandem_gateway_workers", "Worker endpoints configured for the model.");
  auto& cached = CounterFamily(r, "tandem_gateway_cached_prompt_tokens_total",
                               "Prompt tokens of served requests that the workers resumed from "
                               "their prefix caches instead of computing.");
  for (const std::string& m : models) {
    const prometheus::Labels l = {{"model_name", m}};
    models_[m] = Model{&duration.Add(l, kDurationBuckets),
                       &ttft.Add(l, kTtftBuckets),
                       &tpot.Add(l, kTpotBuckets),
                       &inflight.Add(l),
                       &queued.Add(l),
                       &prompt.Add(l),
                       &completion.Add(l),
                       &ready.Add(l),
                       &workers.Add(l),
                       &shadow_duration.Add(l, kDurationBuckets),
                       &shadow_tokens.Add(l),
                       &cached.Add(l)};
  }
}

// Series that exist before their first event, so that rates and error ratios have a zero to start
// from.
void GatewayMetrics::SeedSeries(const std::vector<std::string>& models,
                                const std::vector<std::string>& classes) {
  for (const std::string& m : models) {
    for (const std::string& c : classes) {
      Child(requests_, &GatewayMetrics::request_children_, "code", m, c, "OK");
    }
    for (const char* result : {"ok", "error"}) {
      Labelled(scrapes_, {{"model_name", m}, {"result", result}});
    }
    for (const char* reason : {"worker_error", "resource_exhausted"}) {
      Labelled(retries_, {{"model_name", m}, {"reason", reason}});
    }
    for (const char* outcome : {"won", "lost"}) {
      Labelled(hedges_, {{"model_name", m}, {"outcome", outcome}});
    }
    Labelled(stalls_, {{"model_name", m}});
    for (const char* rule : {"prefix", "load", "random2", "round_robin"}) {
      Labelled(picks_, {{"model_name", m}, {"rule", rule}});
    }
    Labelled(pick_hit_tokens_, {{"model_name", m}});
    for (const std::string& to : models) {
      Labelled(failovers_, {{"from_model", m}, {"to_model", to}});
      if (to != m) Labelled(fallbacks_, {{"from_model", m}, {"to_model", to}});
    }
  }
  for (const std::string& c : classes) Labelled(shed_, {{"class", c}});
  for (const char* reason : {"missing_key", "unknown_key", "model_denied", "admin_denied"}) {
    Labelled(auth_failures_, {{"reason", reason}});
  }
  // Refusals before routing, so error-ratio alerts have a series from the start.
  for (const char* code : {"INVALID_ARGUMENT", "UNAVAILABLE", "RESOURCE_EXHAUSTED"}) {
    Child(requests_, &GatewayMetrics::request_children_, "code", "none", "none", code, "grpc");
  }
}

GatewayMetrics::Model* GatewayMetrics::ForModel(const std::string& model) {
  auto it = models_.find(model);
  return it == models_.end() ? nullptr : &it->second;
}

prometheus::Counter& GatewayMetrics::Child(prometheus::Family<prometheus::Counter>& family,
                                           ChildCache GatewayMetrics::*cache,
                                           const char* third_label, const std::string& model,
                                           const std::string& request_class,
                                           const std::string& third, const char* api) {
  const std::string_view api_view = api != nullptr ? api : "";
  absl::MutexLock l(&mu_);
  ChildCache& children = this->*cache;
  auto it = children.find(std::make_tuple(std::string_view(model), std::string_view(request_class),
                                          std::string_view(third), api_view));
  if (it != children.end()) return *it->second;
  prometheus::Labels labels = {
      {"model_name", model}, {"class", request_class}, {third_label, third}};
  if (api != nullptr) labels.emplace("api", api);
  prometheus::Counter& c = family.Add(labels);
  children.emplace(std::make_tuple(model, request_class, third, std::string(api_view)), &c);
  return c;
}

void GatewayMetrics::CountRequest(const std::string& model, const std::string& request_class,
                                  const char* code, const char* api) {
  Child(requests_, &GatewayMetrics::request_children_, "code", model, request_class, code, api)
      .Increment();
}

void GatewayMetrics::CountShadow(const std::string& model, const std::string& request_class,
                                 const char* code) {
  Child(shadows_, &GatewayMetrics::shadow_children_, "code", model, request_class, code)
      .Increment();
}

void GatewayMetrics::CountSecondOpinion(const std::string& model, const std::string& request_class,
                                        const char* result) {
  Child(second_opinions_, &GatewayMetrics::second_opinion_children_, "result", model, request_class,
        result)
      .Increment();
}

void GatewayMetrics::CountDecision(const std::string& model, const std::string& request_class,
                                   const std::string& rule, const std::string& policy_version,
                                   const std::string& reasoning) {
  absl::MutexLock l(&mu_);
  auto it = decision_children_.find(std::make_tuple(
      std::string_view(model), std::string_view(request_class), std::string_view(rule),
      std::string_view(policy_version), std::string_view(reasoning)));
  if (it == decision_children_.end()) {
    prometheus::Counter& c = decisions_.Add({{"model_name", model},
                                             {"class", request_class},
                                             {"rule", rule},
                                             {"policy_version", policy_version},
                                             {"reasoning", reasoning}});
    it = decision_children_
             .emplace(std::make_tuple(model, request_class, rule, policy_version, reasoning), &c)
             .first;
  }
  it->second->Increment();
}

prometheus::Counter& GatewayMetrics::Labelled(prometheus::Family<prometheus::Counter>& family,
                                              const prometheus::Labels& labels) {
  std::string key;
  for (const auto& [k, v] : labels) absl::StrAppend(&key, k, "=", v, std::string(1, '\0'));
  absl::MutexLock l(&mu_);
  auto it = labelled_.find({&family, key});
  if (it != labelled_.end()) return *it->second;
  prometheus::Counter& c = family.Add(labels);
  labelled_.emplace(std::make_pair(&family, key), &c);
  return c;
}

void GatewayMetrics::AddEndpoint(const std::string& model, const std::string& address) {
  absl::MutexLock l(&mu_);
  auto& e = endpoints_[{model, address}];
  if (e.refs++ > 0) return;
  const prometheus::Labels labels = {{"model_name", model}, {"endpoint", address}};
  e.ready = &endpoint_ready_.Add(labels);
  e.breaker = &endpoint_breaker_.Add(labels);
  e.ejections = &endpoint_ejections_.Add(labels);
}

void GatewayMetrics::RemoveEndpoint(const std::string& model, const std::string& address) {
  absl::MutexLock l(&mu_);
  auto it = endpoints_.find({model, address});
  if (it == endpoints_.end() || --it->second.refs > 0) return;
  endpoint_ready_.Remove(it->second.ready);
  endpoint_breaker_.Remove(it->second.breaker);
  endpoint_ejections_.Remove(it->second.ejections);
  endpoints_.erase(it);
}

void GatewayMetrics::SetEndpointState(const std::string& model, const std::string& address,
                                      bool ready, int breaker_state) {
  absl::MutexLock l(&mu_);
  auto it = endpoints_.find({model, address});
  if (it == endpoints_.end()) return;
  it->second.ready->Set(ready ? 1 : 0);
  it->second.breaker->Set(breaker_state);
}

void GatewayMetrics::CountEjection(const std::string& model, const std::string& address) {
  absl::MutexLock l(&mu_);
  auto it = endpoints_.find({model, address});
  if (it != endpoints_.end()) it->second.ejections->Increment();
}

void GatewayMetrics::CountDnsResolution(const std::string& model, bool ok) {
  Labelled(dns_resolutions_, {{"model_name", model}, {"result", ok ? "ok" : "error"}}).Increment();
}

void GatewayMetrics::CountScrape(const std::string& model, bool ok) {
  Labelled(scrapes_, {{"model_name", model}, {"result", ok ? "ok" : "error"}}).Increment();
}

GatewayMetrics::Signal GatewayMetrics::ForSignal(const std::string& name) {
  absl::MutexLock l(&mu_);
  auto it = signals_.find(name);
  if (it != signals_.end()) return it->second;
  const prometheus::Labels labels = {{"signal", name}};
  Signal s{&signal_value_.Add(labels), &signal_stale_.Add(labels), &signal_age_.Add(labels),
           &signal_errors_.Add(labels)};
  s.value->Set(std::nan(""));
  signals_.emplace(name, s);
  return s;
}

GatewayMetrics::Trigger GatewayMetrics::ForTrigger(const std::string& name) {
  absl::MutexLock l(&mu_);
  auto it = triggers_.find(name);
  if (it != triggers_.end()) return it->second;
  const prometheus::Labels labels = {{"trigger", name}};
  Trigger t{&trigger_active_.Add(labels), &trigger_transitions_.Add(labels)};
  triggers_.emplace(name, t);
  return t;
}

void GatewayMetrics::CountRetry(const std::string& model, const char* reason) {
  Labelled(retries_, {{"model_name", model}, {"reason", reason}}).Increment();
}

void GatewayMetrics::CountRetryBudgetExhausted() { retry_budget_exhausted_.Increment(); }

void GatewayMetrics::CountFailover(const std::string& from_model, const std::string& to_model) {
  Labelled(failovers_, {{"from_model", from_model}, {"to_model", to_model}}).Increment();
}

void GatewayMetrics::CountStall(const std::string& model) {
  Labelled(stalls_, {{"model_name", model}}).Increment();
}

void GatewayMetrics::CountHedge(const std::string& model, bool won) {
  Labelled(hedges_, {{"model_name", model}, {"outcome", won ? "won" : "lost"}}).Increment();
}

void GatewayMetrics::CountPick(const std::string& model, const char* rule, int64_t hit_tokens) {
  Labelled(picks_, {{"model_name", model}, {"rule", rule}}).Increment();
  if (hit_tokens > 0) {
    Labelled(pick_hit_tokens_, {{"model_name", model}}).Increment(static_cast<double>(hit_tokens));
  }
}

void GatewayMetrics::CountFallback(const std::string& from_model, const std::string& to_model) {
  Labelled(fallbacks_, {{"from_model", from_model}, {"to_model", to_model}}).Increment();
}

void GatewayMetrics::CountShed(const std::string& request_class) {
  Labelled(shed_, {{"class", request_class}}).Increment();
}

void GatewayMetrics::CountPolicyReload(bool ok) { (ok ? reloads_ok_ : reloads_error_).Increment(); }

void GatewayMetrics::CountTenantsReload(bool ok) {
  (ok ? tenants_reloads_ok_ : tenants_reloads_error_).Increment();
}

void GatewayMetrics::SetLivePolicy(const std::string& version, const std::string& sha256) {
  absl::MutexLock l(&mu_);
  if (live_policy_ != nullptr) policy_info_.Remove(live_policy_);
  live_policy_ = &policy_info_.Add({{"version", version}, {"sha256", sha256}});
  live_policy_->Set(1);
  // Decision series carry the policy version; keeping every version ever loaded would grow
  // without bound over a long life of reloads, so only the last few keep their series.
  if (std::find(recent_versions_.begin(), recent_versions_.end(), version) ==
      recent_versions_.end()) {
    recent_versions_.push_back(version);
  }
  while (recent_versions_.size() > kDecisionVersionsKept) {
    const std::string old = recent_versions_.front();
    recent_versions_.pop_front();
    for (auto it = decision_children_.begin(); it != decision_children_.end();) {
      if (std::get<3>(it->first) == old) {
        decisions_.Remove(it->second);
        it = decision_children_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

GatewayMetrics::Tenant GatewayMetrics::ForTenant(const std::string& name, int max_labels) {
  absl::MutexLock l(&mu_);
  auto known = tenant_labels_.find(name);
  std::string label;
  if (known != tenant_labels_.end()) {
    label = known->second;
  } else {
    label = static_cast<int>(tenants_.size()) < max_labels ? name : "other";
    tenant_labels_.emplace(name, label);
  }
  auto it = tenants_.find(label);
  if (it != tenants_.end()) return it->second;
  const prometheus::Labels labels = {{"tenant", label}};
  Tenant t{label,
           &tenant_inflight_.Add(labels),
           &tenant_queued_.Add(labels),
           &tenant_tokens_.Add({{"tenant", label}, {"kind", "prompt"}}),
           &tenant_tokens_.Add({{"tenant", label}, {"kind", "completion"}}),
           &tenant_duration_.Add(labels, kDurationBuckets),
           &tenant_ttft_.Add(labels, kTtftBuckets)};
  tenant_requests_.Add({{"tenant", label}, {"code", "OK"}});
  for (const char* reason : {"requests", "tokens", "concurrency", "queue_full", "queue_timeout"}) {
    tenant_throttled_.Add({{"tenant", label}, {"reason", reason}});
  }
  tenants_.emplace(label, t);
  return t;
}

void GatewayMetrics::CountTenantRequest(const std::string& label, const char* code) {
  Labelled(tenant_requests_, {{"tenant", label}, {"code", code}}).Increment();
}

void GatewayMetrics::CountThrottled(const std::string& label, const char* reason) {
  Labelled(tenant_throttled_, {{"tenant", label}, {"reason", reason}}).Increment();
}

void GatewayMetrics::CountSessionTurn(const char* source, bool switched, size_t remembered) {
  const std::string_view s(source);
  session_turns_[s == "token" ? 0 : s == "table" ? 1 : 2]->Increment();
  if (switched) session_switches_.Increment();
  sessions_.Set(static_cast<double>(remembered));
}

void GatewayMetrics::CountSessionEviction(const char* reason) {
  session_evictions_[std::string_view(reason) == "ttl" ? 0 : 1]->Increment();
}

void GatewayMetrics::CountAuthFailure(const char* reason) {
  Labelled(auth_failures_, {{"reason", reason}}).Increment();
}

}  // namespace tandem::gateway
