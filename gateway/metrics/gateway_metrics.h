#pragma once

#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tandem::gateway {

// Every metric the gateway exports, defined here and nowhere else. Units: seconds and tokens.
// model_name and class are "none" for requests refused before a model was chosen.
class GatewayMetrics {
 public:
  // Per-model series, created up front so they exist at 0.
  struct Model {
    prometheus::Histogram* request_duration;
    prometheus::Histogram* time_to_first_token;
    prometheus::Histogram* time_per_output_token;
    prometheus::Gauge* inflight;
    prometheus::Gauge* queued;  // waiting for a dispatch slot
    prometheus::Counter* prompt_tokens;
    prometheus::Counter* completion_tokens;
    prometheus::Gauge* ready_workers;
    prometheus::Gauge* workers;
    // Shadow copies sent to this model (answers discarded).
    prometheus::Histogram* shadow_duration;
    prometheus::Counter* shadow_completion_tokens;
    // Of prompt_tokens, those the workers resumed from their prefix caches.
    prometheus::Counter* cached_prompt_tokens;
  };

  GatewayMetrics(prometheus::Registry& registry, const std::vector<std::string>& models,
                 const std::vector<std::string>& classes, const std::string& version);

  // nullptr for an unknown model.
  Model* ForModel(const std::string& model);
  // `api`: the front the request came by, "grpc" or "openai".
  void CountRequest(const std::string& model, const std::string& request_class, const char* code,
                    const char* api) ABSL_LOCKS_EXCLUDED(mu_);
  // A shadow copy finished (or could not start) with `code`.
  void CountShadow(const std::string& model, const std::string& request_class, const char* code)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A second opinion (classifier.second_opinion) asked of `model` ended with `result`
  // (answered, no_answer, timeout, error, unavailable, cancelled), the request then of
  // `request_class`.
  void CountSecondOpinion(const std::string& model, const std::string& request_class,
                          const char* result) ABSL_LOCKS_EXCLUDED(mu_);
  prometheus::Histogram& second_opinion_duration() { return second_opinion_duration_; }
  // `reasoning`: the decided thinking mode, "on", "off" or "default" (the model's own).
  void CountDecision(const std::string& model, const std::string& request_class,
                     const std::string& rule, const std::string& policy_version,
                     const std::string& reasoning = "default") ABSL_LOCKS_EXCLUDED(mu_);
  // Policy reloads by result ("ok" or "error"), and the live policy's identity.
  void CountPolicyReload(bool ok);
  void SetLivePolicy(const std::string& version, const std::string& sha256)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Tenants-file reloads (--tenants) by result ("ok" or "error").
  void CountTenantsReload(bool ok);
  // Worker endpoints: created when an endpoint joins a pool, removed when DNS drops it.
  void AddEndpoint(const std::string& model, const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveEndpoint(const std::string& model, const std::string& address)
      ABSL_LOCKS_EXCLUDED(mu_);
  void SetEndpointState(const std::string& model, const std::string& address, bool ready,
                        int breaker_state) ABSL_LOCKS_EXCLUDED(mu_);
  void CountEjection(const std::string& model, const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  void CountDnsResolution(const std::string& model, bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  void CountScrape(const std::string& model, bool ok) ABSL_LOCKS_EXCLUDED(mu_);

  // Policy signals and triggers; series are created (at 0) when a policy declaring them loads.
  struct Signal {
    prometheus::Gauge* value;
    prometheus::Gauge* stale;
    prometheus::Gauge* age;
    prometheus::Counter* errors;
  };
  Signal ForSignal(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  struct Trigger {
    prometheus::Gauge* active;
    prometheus::Counter* transitions;
  };
  Trigger ForTrigger(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);

  // Resilience: retries (before anything was streamed), retries refused by the budget,
  // mid-stream failovers, hedges sent and won, requests shed by policy.
  void CountRetry(const std::string& model, const char* reason) ABSL_LOCKS_EXCLUDED(mu_);
  void CountRetryBudgetExhausted();
  void CountFailover(const std::string& from_model, const std::string& to_model)
      ABSL_LOCKS_EXCLUDED(mu_);
  void CountHedge(const std::string& model, bool won) ABSL_LOCKS_EXCLUDED(mu_);
  void CountStall(const std::string& model) ABSL_LOCKS_EXCLUDED(mu_);
  void CountShed(const std::string& request_class) ABSL_LOCKS_EXCLUDED(mu_);
  // A worker endpoint of `model` was picked by `rule` (PickInfo::rule) expecting `hit_tokens`
  // of the prompt in its prefix cache.
  void CountPick(const std::string& model, const char* rule, int64_t hit_tokens)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Admission fell back from the decided model (no usable worker) to another.
  void CountFallback(const std::string& from_model, const std::string& to_model)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Time to admit a request: validation, features, the routing decision, the endpoint pick.
  prometheus::Histogram& decision_duration() { return decision_duration_; }

  // Tenants (gateway/intake/tenants.h). The tenant label is bounded: the first `max_labels` tenant
  // names seen get their own, later ones share "other".
  struct Tenant {
    std::string label;
    prometheus::Gauge* inflight;  // admitted and not finished (queued included)
    prometheus::Gauge* queued;    // waiting for a dispatch slot
    prometheus::Counter* prompt_tokens;
    prometheus::Counter* completion_tokens;
    // Requests that passed the tenant's quotas, from arrival: queue waits included.
    prometheus::Histogram* request_duration;     // to the end of the response
    prometheus::Histogram* time_to_first_token;  // to the first text relayed
  };
  Tenant ForTenant(const std::string& name, int max_labels) ABSL_LOCKS_EXCLUDED(mu_);
  void CountTenantRequest(const std::string& label, const char* code) ABSL_LOCKS_EXCLUDED(mu_);
  // reason: requests, tokens, concurrency, queue_full, queue_timeout.
  void CountThrottled(const std::string& label, const char* reason) ABSL_LOCKS_EXCLUDED(mu_);
  // reason: missing_key, unknown_key, model_denied, admin_denied.
  void CountAuthFailure(const char* reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Time requests waited for a dispatch slot (--max_inflight), granted or not.
  prometheus::Histogram& queue_wait() { return queue_wait_; }

  // A turn of a named session was routed: `source` is where its previous model was known from
  // ("token", "table", "new"), `switched` whether this turn moved it; `remembered` the sessions
  // the replica now holds.
  void CountSessionTurn(const char* source, bool switched, size_t remembered);
  // reason: ttl, capacity.
  void CountSessionEviction(const char* reason);
  // An admitted request's prompt size was counted by the tokenizer (near a threshold) or
  // estimated.
  void CountPromptTokens(bool exact) { (exact ? prompt_counted_ : prompt_estimated_).Increment(); }

  // Decision-log records written and dropped (writer behind).
  prometheus::Counter& decision_log_written() { return decision_log_written_; }
  prometheus::Counter& decision_log_dropped() { return decision_log_dropped_; }
  // HTTP front connections refused: --http_max_connections open and none idle to evict
  // (HttpServerOptions::on_connection_refused feeds it).
  prometheus::Counter& http_connections_refused() { return http_connections_refused_; }
  // HTTP front connections open, counted against --http_max_connections
  // (HttpServerOptions::on_connections_changed feeds it).
  prometheus::Gauge& http_connections() { return http_connections_; }
  // Of them, idle: between requests or lingering after a last answer, so evictable.
  prometheus::Gauge& http_idle_connections() { return http_idle_connections_; }

 private:
  // Orders tuples of strings and of string_views alike, so that a hit (every request) is looked
  // up by string_views, without copying the labels.
  struct ViewLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Views(a) < Views(b);
    }
    template <typename Tuple>
    static auto Views(const Tuple& t) {
      return std::apply([](const auto&... s) { return std::make_tuple(std::string_view(s)...); },
                        t);
    }
  };
  using Key = std::tuple<std::string, std::string, std::string, std::string>;
  using ChildCache = std::map<Key, prometheus::Counter*, ViewLess>;
  // `cache` names the member (guarded by mu_) that caches the family's children.
  void AddModels(prometheus::Registry& r, const std::vector<std::string>& models);
  void SeedSeries(const std::vector<std::string>& models, const std::vector<std::string>& classes);
  prometheus::Counter& Child(prometheus::Family<prometheus::Counter>& family,
                             ChildCache GatewayMetrics::*cache, const char* third_label,
                             const std::string& model, const std::string& request_class,
                             const std::string& third, const char* api = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& decisions_;
  prometheus::Family<prometheus::Counter>& shadows_;
  prometheus::Family<prometheus::Counter>& second_opinions_;
  prometheus::Histogram& second_opinion_duration_;
  prometheus::Family<prometheus::Gauge>& policy_info_;
  prometheus::Family<prometheus::Gauge>& endpoint_ready_;
  prometheus::Family<prometheus::Gauge>& endpoint_breaker_;
  prometheus::Family<prometheus::Counter>& endpoint_ejections_;
  prometheus::Family<prometheus::Counter>& dns_resolutions_;
  prometheus::Family<prometheus::Counter>& scrapes_;
  prometheus::Family<prometheus::Gauge>& signal_value_;
  prometheus::Family<prometheus::Gauge>& signal_stale_;
  prometheus::Family<prometheus::Gauge>& signal_age_;
  prometheus::Family<prometheus::Counter>& signal_errors_;
  prometheus::Family<prometheus::Gauge>& trigger_active_;
  prometheus::Family<prometheus::Counter>& trigger_transitions_;
  prometheus::Family<prometheus::Counter>& retries_;
  prometheus::Counter& retry_budget_exhausted_;
  prometheus::Family<prometheus::Counter>& failovers_;
  prometheus::Family<prometheus::Counter>& stalls_;
  prometheus::Family<prometheus::Counter>& hedges_;
  prometheus::Family<prometheus::Counter>& shed_;
  prometheus::Family<prometheus::Counter>& fallbacks_;
  prometheus::Family<prometheus::Counter>& picks_;
  prometheus::Family<prometheus::Counter>& pick_hit_tokens_;
  prometheus::Histogram& decision_duration_;
  prometheus::Family<prometheus::Counter>& tenant_requests_;
  prometheus::Family<prometheus::Counter>& tenant_throttled_;
  prometheus::Family<prometheus::Counter>& tenant_tokens_;
  prometheus::Family<prometheus::Gauge>& tenant_inflight_;
  prometheus::Family<prometheus::Gauge>& tenant_queued_;
  prometheus::Family<prometheus::Histogram>& tenant_duration_;
  prometheus::Family<prometheus::Histogram>& tenant_ttft_;
  prometheus::Family<prometheus::Counter>& auth_failures_;
  prometheus::Histogram& queue_wait_;
  prometheus::Family<prometheus::Counter>& session_turns_family_;
  // By source: token, table, new.
  prometheus::Counter* session_turns_[3];
  prometheus::Counter& session_switches_;
  prometheus::Gauge& sessions_;
  prometheus::Family<prometheus::Counter>& session_evictions_family_;
  prometheus::Counter* session_evictions_[2];  // ttl, capacity
  prometheus::Family<prometheus::Counter>& prompt_counts_family_;
  prometheus::Counter& prompt_counted_;
  prometheus::Counter& prompt_estimated_;
  std::map<std::string, Tenant> tenants_ ABSL_GUARDED_BY(mu_);             // by label
  std::map<std::string, std::string> tenant_labels_ ABSL_GUARDED_BY(mu_);  // name -> label
  prometheus::Counter& reloads_ok_;
  prometheus::Counter& reloads_error_;
  prometheus::Counter& tenants_reloads_ok_;
  prometheus::Counter& tenants_reloads_error_;
  prometheus::Counter& decision_log_written_;
  prometheus::Counter& decision_log_dropped_;
  prometheus::Counter& http_connections_refused_;
  prometheus::Gauge& http_connections_;
  prometheus::Gauge& http_idle_connections_;
  prometheus::Gauge* live_policy_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<std::string, Model> models_;
  // Family::Add hashes every label and locks; this cache keeps the hot path to one lookup.
  absl::Mutex mu_;
  ChildCache request_children_ ABSL_GUARDED_BY(mu_);
  ChildCache shadow_children_ ABSL_GUARDED_BY(mu_);
  ChildCache second_opinion_children_ ABSL_GUARDED_BY(mu_);
  struct EndpointSeries {
    prometheus::Gauge* ready;
    prometheus::Gauge* breaker;
    prometheus::Counter* ejections;
    int refs = 0;  // a DNS re-resolution may briefly hold an old and a new endpoint object
  };
  std::map<std::pair<std::string, std::string>, EndpointSeries> endpoints_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Signal> signals_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Trigger> triggers_ ABSL_GUARDED_BY(mu_);
  // Counters with free-form small label sets, keyed by their label values joined with '\0'.
  prometheus::Counter& Labelled(prometheus::Family<prometheus::Counter>& family,
                                const prometheus::Labels& labels) ABSL_LOCKS_EXCLUDED(mu_);
  std::map<std::pair<void*, std::string>, prometheus::Counter*> labelled_ ABSL_GUARDED_BY(mu_);
  std::map<std::tuple<std::string, std::string, std::string, std::string, std::string>,
           prometheus::Counter*, ViewLess>
      decision_children_ ABSL_GUARDED_BY(mu_);
  // Policy versions whose decision series are kept, oldest first.
  static constexpr size_t kDecisionVersionsKept = 3;
  std::deque<std::string> recent_versions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway
