#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "router/hashed_classifier.h"

namespace tandem::router {

// A routing policy: immutable once loaded (policies/ builds it from YAML and validates it;
// the router only reads it). Field names, operators and semantics: policies/README.md.

enum class Op { kEq, kNe, kGt, kGe, kLt, kLe, kIn, kNotIn, kPresent };

// The field a predicate reads, resolved once when the policy is parsed (router::LookupField), so
// that a decision does not compare field names.
enum class Field : uint8_t {
  kUnknown,  // not resolved: looked up by name at each test
  kPromptTokens,
  kPromptBytes,
  kImageCount,
  kImageTokens,
  kNumMessages,
  kNumTurns,
  kToolCount,
  kAgentSteps,
  kSystemPromptBytes,
  kMaxTokens,
  kConfidence,
  kCodeCues,
  kMathCues,
  kReasoningCues,
  kStructuredOutputCues,
  kDeadlineMs,
  kSessionTurn,
  kObjective,
  kReasoning,
  kClass,
  kHintModel,
  kTenant,
  kLastRole,
  kSessionModel,
  kLabel,            // label.KEY
  kSignal,           // signal.NAME
  kTrigger,          // trigger.NAME
  kPrefixHitTokens,  // prefix_hit_tokens.MODEL
};

// One test of one field, e.g. prompt_tokens > 32768 or label.tenant in [a, b].
struct Predicate {
  std::string field;
  Field id = Field::kUnknown;
  std::string key;  // KEY or NAME of label., signal. and trigger. fields
  Op op = Op::kEq;
  // The operand: numbers for numeric fields, strings for string fields; `set` for in/not_in;
  // `flag` for present.
  double number = 0;
  std::string text;
  std::vector<std::string> set;
  bool flag = true;
  bool numeric = false;
};

// All of `all` hold, and (when `any` is not empty) at least one alternative of `any` holds, an
// alternative holding when all its predicates do. Empty matches all.
struct Condition {
  std::vector<Predicate> all;
  std::vector<std::vector<Predicate>> any;
  bool MatchesEverything() const { return all.empty() && any.empty(); }
};

struct ModelSpec {
  std::string name;
  bool vision = false;
  int64_t max_context_tokens = 0;
  // US dollars per million tokens.
  double input_cost_per_million = 0;
  double output_cost_per_million = 0;
  // Worker endpoints (HOST:PORT) of the model's pool, read at gateway start-up.
  std::vector<std::string> endpoints;
  // How the gateway picks one of its workers (Router::WorkerPick); empty: --endpoint_pick.
  std::string worker_pick;
};

// Transparent classification tier: the first matching entry names the class.
struct ClassRule {
  std::string name;
  Condition when;
  std::string request_class;
};

struct WeightedModel {
  std::string model;
  int weight = 100;  // percent
};

// Hedging (latency class, opt-in per rule): when the first token has not arrived after a delay, a
// second copy goes to another replica (or the first fallback model) and the slower is cancelled.
struct Hedge {
  bool enabled = false;
  // Fixed delay; with `after_signal`, the delay used while that signal has no value.
  double after_seconds = 0;
  // The delay is this signal's value (seconds, e.g. a p95 TTFT), clamped to [min, max].
  std::string after_signal;
  double min_seconds = 0.01;
  double max_seconds = 10;
};

// Thinking for the requests a rule routes, when the caller left it to the default.
struct ReasoningAction {
  bool set = false;
  bool on = true;
  // Thinking tokens when on; 0 for no budget beyond max_tokens.
  int32_t budget_tokens = 0;
  // While this signal rises from `shrink_from` to `shrink_to`, the budget falls linearly to
  // `shrink_min_tokens` (e.g. a model's queue per worker: think less while it is saturated).
  std::string shrink_signal;
  double shrink_from = 0;
  double shrink_to = 0;
  int32_t shrink_min_tokens = 0;
};

struct Action {
  // Refuse with RESOURCE_EXHAUSTED and a retry hint instead of queueing (load shedding).
  bool shed = false;
  double retry_after_seconds = 1;
  Hedge hedge;
  // One entry for `route`, several for `split` (weights sum to 100).
  std::vector<WeightedModel> targets;
  // Route to the model pinned in the request's hints (rules using it test hint.model present).
  bool to_pinned = false;
  // Route to the model of the session's previous turn (session.model). When the session has
  // none this policy knows, the rule does not match and evaluation goes on.
  bool to_session = false;
  // Copy of the request sent to this model too; its answer is discarded (measurement only).
  std::string shadow;
  // Models to try, in order, when the chosen one has no ready worker.
  std::vector<std::string> fallback;
  ReasoningAction reasoning;
};

struct Rule {
  std::string name;
  Condition when;
  Action action;
};

// Where a signal's value comes from.
enum class SignalSource {
  kStatic,   // a constant from the policy
  kScrape,   // the gateway's own scrape of the model's workers' /metrics
  kPromQL,   // an instant query against a Prometheus server's HTTP API
  kGateway,  // this gateway's own dispatch state for a model (its fair queue)
  kSum,      // the sum of other signals' current values
};

// What a kGateway signal reads, per model.
enum class GatewayMetric {
  kQueued,    // requests waiting in this gateway for a dispatch slot of the model
  kInflight,  // requests this gateway has dispatched to the model's workers, not yet finished
};

// How scraped samples of one model's workers become one number.
enum class Aggregate {
  kSum,  // gauges: sum over ready workers
  kMax,
  kMin,
  kAvg,
  kRate,      // counters: per-second increase over `window`, summed over workers
  kQuantile,  // histograms: the `quantile` of observations in the last `window`
};

// A named live value that conditions test as signal.NAME.
struct SignalSpec {
  std::string name;
  SignalSource source = SignalSource::kStatic;
  double static_value = 0;
  // Scrape: the model whose workers are read, the sample name (a histogram's base name for
  // kQuantile) and the labels a sample must carry.
  std::string model;
  std::string metric;
  std::map<std::string, std::string> labels;
  Aggregate aggregate = Aggregate::kSum;
  double quantile = 0.95;
  double window_seconds = 30;
  // Gateway: `model` and what is read; aggregate kSum (the total) or kAvg (per usable worker).
  GatewayMetric gateway_metric = GatewayMetric::kQueued;
  // Sum: the signals added (none of them a sum). Terms without a value count as 0; the sum has
  // no value when none of them has one.
  std::vector<std::string> terms;
  // PromQL: the expression (must yield one series or a scalar) and how often it is evaluated.
  std::string query;
  double interval_seconds = 1;
  // Staleness: a value older than `stale_after_seconds` is stale (0 = three refresh intervals).
  // A stale value is still used for `hold_seconds`; then it is absent, and triggers on it are
  // forced off (fail open) or on (fail closed).
  double stale_after_seconds = 0;
  double hold_seconds = 0;
  bool fail_closed = false;
};

// One side of a hysteresis band: signal OP value.
struct Threshold {
  Op op = Op::kGt;
  double value = 0;
};

// A boolean with hysteresis over one signal: it turns on when `enter` holds, off when `exit`
// holds, and keeps each state for at least `min_dwell_seconds`. Conditions test trigger.NAME
// (on or off). The state lives in the gateway; the router reads it from the signal snapshot.
struct TriggerSpec {
  std::string name;
  std::string signal;
  Threshold enter;
  Threshold exit;
  double min_dwell_seconds = 0;
};

struct Policy {
  // Operator-chosen version string, shown on every decision metric.
  std::string version;
  // SHA-256 of the file's bytes, hex; with a classifier, of that and the model's SHA-256.
  std::string sha256;
  std::map<std::string, ModelSpec> models;
  std::vector<std::string> classes;
  std::vector<ClassRule> classify;
  // Learned tier, consulted when no classify entry matches; null when the policy has none. Its
  // classes are policy classes. Below min_confidence the default class is used instead.
  std::shared_ptr<const HashedClassifier> classifier;
  std::string classifier_path;
  double classifier_min_confidence = 0;
  // The second opinion (classifier.second_opinion): when the learned tier is below
  // min_confidence, the gateway asks this model (empty: never) to classify the request itself,
  // within this many seconds; without an answer the default class stands.
  std::string second_opinion_model;
  double second_opinion_timeout_seconds = 0;
  std::string default_class;
  std::vector<Rule> rules;
  std::map<std::string, SignalSpec> signals;
  std::map<std::string, TriggerSpec> triggers;
};

}  // namespace tandem::router
