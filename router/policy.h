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

// One test of one field, e.g. prompt_tokens > 32768 or label.tenant in [a, b].
struct Predicate {
  std::string field;
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

struct Action {
  // One entry for `route`, several for `split` (weights sum to 100).
  std::vector<WeightedModel> targets;
  // Route to the model pinned in the request's hints (rules using it test hint.model present).
  bool to_pinned = false;
  // Copy of the request sent to this model too; its answer is discarded (measurement only).
  std::string shadow;
  // Models to try, in order, when the chosen one has no ready worker.
  std::vector<std::string> fallback;
};

struct Rule {
  std::string name;
  Condition when;
  Action action;
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
  std::string default_class;
  std::vector<Rule> rules;
  // Declared signals and the values used until live values arrive (next issue).
  std::map<std::string, double> signals;
};

}  // namespace tandem::router
