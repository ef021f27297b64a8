#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "policies/yaml_reader.h"
#include "router/policy.h"
#include "router/policy_router.h"

namespace tandem::policies {

// The two halves of a policy rule, for the policy loader (policy_loader.h): its `when` (a
// classify entry's too) and its `action`. Errors go to the loader's list like its own, so a file
// still gets every mistake at once, in the order they are found. Each method takes the policy
// being built: rules may only name its models, signals and triggers, so those are parsed first.
class RuleParser : public YamlReader {
 public:
  // `classes` are the policy's declared classes (empty while `classes` itself has an error, and
  // then no class is checked); it must outlive the parser. `max_conditions` is
  // PolicyLimits::max_conditions.
  RuleParser(std::string file, std::vector<PolicyError>* errors,
             const std::set<std::string>* classes, int32_t max_conditions)
      : YamlReader(std::move(file), errors), classes_(*classes), max_conditions_(max_conditions) {}

  // A `when` map of field tests, all of which must hold, and `any` alternatives.
  void ParseCondition(const YAML::Node& node, const std::string& path, const router::Policy* p,
                      router::Condition* c);

  // Exactly one of route, split, route_to_pinned, route_to_session and shed, with shadow,
  // fallback, hedge and reasoning.
  void ParseAction(const YAML::Node& node, const std::string& path, const router::Policy* p,
                   router::Action* a);

  // Reports `model` unless the policy declares it. Signals name models too, so the loader uses
  // it as well. While the policy has no models (`models` has its own error) nothing is reported.
  void CheckModel(const YAML::Node& at, const std::string& path, const router::Policy* p,
                  const std::string& model);

 private:
  // Action parts, each reporting under `path` (the action's).
  void ParseShed(const YAML::Node& node, const std::string& path, router::Action* a);
  void ParseHedge(const YAML::Node& h, const std::string& path, const router::Policy* p,
                  router::Hedge* hedge);
  void ParseSplit(const YAML::Node& s, const std::string& path, const router::Policy* p,
                  std::vector<router::WeightedModel>* targets);
  void ParseFallback(const YAML::Node& f, const std::string& path, const router::Policy* p,
                     std::vector<std::string>* fallback);
  // route_to_pinned and route_to_session: only `true` means anything.
  void ParseTrueFlag(const YAML::Node& node, const std::string& path, bool* out);
  void ParseReasoning(const YAML::Node& node, const std::string& path, const router::Policy* p,
                      router::ReasoningAction* r);

  // Condition parts: an `any` list, one `field: test` and one operand.
  void ParseAlternatives(const YAML::Node& node, const std::string& path, const router::Policy* p,
                         router::Condition* c);
  void ParseField(const std::string& field, const YAML::Node& node, const std::string& path,
                  const YAML::Node& key, const router::Policy* p,
                  std::vector<router::Predicate>* out);
  // The field's kind, or nullopt (reported) when the field cannot be tested at all.
  std::optional<router::FieldKind> CheckField(const std::string& field, const std::string& path,
                                              const YAML::Node& key, const router::Policy* p);
  // The operand of one operator of a field's map, into `pr` (its field, kind and op already
  // set); false when it is not usable.
  bool ParseOperator(const YAML::Node& operand, const std::string& path, const router::Policy* p,
                     router::Predicate* pr);
  // A number, or a string checked against what the field can hold; false when unreadable.
  bool ParseOperand(const std::string& field, bool numeric, const YAML::Node& v,
                    const std::string& path, const router::Policy* p, router::Predicate* pr);

  // The tests a `when` map holds, as --max_rule_conditions counts them.
  static size_t CountConditions(const YAML::Node& fields, bool top = true);

  const std::set<std::string>& classes_;
  const int32_t max_conditions_;
};

}  // namespace tandem::policies
