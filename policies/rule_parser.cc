#include "policies/rule_parser.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace tandem::policies {
namespace {

using router::Op;
using router::Policy;
using router::Predicate;

}  // namespace

void RuleParser::CheckModel(const YAML::Node& at, const std::string& path, const Policy* p,
                            const std::string& model) {
  if (!p->models.empty() && !p->models.contains(model)) {
    Error(at, path, absl::StrCat("unknown model '", model, "'"));
  }
}

void RuleParser::ParseAction(const YAML::Node& node, const std::string& path, const Policy* p,
                             router::Action* a) {
  if (!Map(node, path,
           {"route", "split", "route_to_pinned", "route_to_session", "shed", "shadow", "fallback",
            "hedge", "reasoning"})) {
    return;
  }
  const int kinds = (node["route"] ? 1 : 0) + (node["split"] ? 1 : 0) +
                    (node["route_to_pinned"] ? 1 : 0) + (node["route_to_session"] ? 1 : 0) +
                    (node["shed"] ? 1 : 0);
  if (kinds != 1) {
    Error(node, path,
          "exactly one of route, split, route_to_pinned, route_to_session or shed is required");
  }
  if (node["shed"]) ParseShed(node, path, a);
  if (const YAML::Node& h = node["hedge"]) ParseHedge(h, path + ".hedge", p, &a->hedge);
  if (const YAML::Node& r = node["reasoning"]) {
    ParseReasoning(r, path + ".reasoning", p, &a->reasoning);
  }
  if (const YAML::Node& r = node["route"]) {
    router::WeightedModel t;
    if (String(r, path + ".route", &t.model)) {
      CheckModel(r, path + ".route", p, t.model);
      a->targets.push_back(t);
    }
  }
  if (const YAML::Node& s = node["split"]) ParseSplit(s, path + ".split", p, &a->targets);
  if (const YAML::Node& r = node["route_to_pinned"]) {
    ParseTrueFlag(r, path + ".route_to_pinned", &a->to_pinned);
  }
  if (const YAML::Node& r = node["route_to_session"]) {
    ParseTrueFlag(r, path + ".route_to_session", &a->to_session);
  }
  if (const YAML::Node& s = node["shadow"]) {
    if (String(s, path + ".shadow", &a->shadow)) {
      CheckModel(s, path + ".shadow", p, a->shadow);
      if (a->targets.size() == 1 && a->targets[0].model == a->shadow) {
        Error(s, path + ".shadow", "shadows the model the rule already routes to");
      }
    }
  }
  if (const YAML::Node& f = node["fallback"]) ParseFallback(f, path + ".fallback", p, &a->fallback);
}

// shed: {retry_after: DURATION}. `node` is the whole action: a shed request goes nowhere, so
// the keys about where it goes are errors.
void RuleParser::ParseShed(const YAML::Node& node, const std::string& path, router::Action* a) {
  const YAML::Node& sh = node["shed"];
  a->shed = true;
  const std::string spath = path + ".shed";
  if (Map(sh, spath, {"retry_after"}) && sh["retry_after"]) {
    Duration(sh["retry_after"], spath + ".retry_after", &a->retry_after_seconds);
  }
  for (const char* other : {"shadow", "fallback", "hedge", "reasoning"}) {
    if (node[other]) Error(node[other], path + "." + other, "has no meaning with shed");
  }
}

// hedge: {after: DURATION, after_signal: NAME, min: DURATION, max: DURATION}
void RuleParser::ParseHedge(const YAML::Node& h, const std::string& hpath, const Policy* p,
                            router::Hedge* hedge) {
  if (!Map(h, hpath, {"after", "after_signal", "min", "max"})) return;
  hedge->enabled = true;
  if (!h["after"] && !h["after_signal"]) {
    Error(h, hpath, "expected after (a duration) or after_signal (a signal of seconds)");
  }
  if (h["after"] && Duration(h["after"], hpath + ".after", &hedge->after_seconds) &&
      hedge->after_seconds <= 0) {
    Error(h["after"], hpath + ".after", "must be > 0");
  }
  if (h["after_signal"] &&
      String(h["after_signal"], hpath + ".after_signal", &hedge->after_signal) &&
      !p->signals.contains(hedge->after_signal)) {
    Error(h["after_signal"], hpath + ".after_signal",
          absl::StrCat("signal '", hedge->after_signal, "' is not declared in `signals`"));
  }
  if (h["min"]) Duration(h["min"], hpath + ".min", &hedge->min_seconds);
  if (h["max"]) Duration(h["max"], hpath + ".max", &hedge->max_seconds);
  if (hedge->min_seconds > hedge->max_seconds) {
    Error(h, hpath, "min is above max");
  }
}

// split: [{model, weight}, ...], integer percents summing to 100.
void RuleParser::ParseSplit(const YAML::Node& s, const std::string& path, const Policy* p,
                            std::vector<router::WeightedModel>* targets) {
  if (!s.IsSequence() || s.size() < 2) {
    Error(s, path, "expected a list of at least two {model, weight} entries");
    return;
  }
  int64_t sum = 0;
  std::set<std::string> seen;
  for (size_t i = 0; i < s.size(); ++i) {
    const std::string spath = absl::StrCat(path, "[", i, "]");
    if (!Map(s[i], spath, {"model", "weight"})) continue;
    router::WeightedModel t;
    int64_t w = 0;
    if (!s[i]["model"] || !s[i]["weight"]) {
      Error(s[i], spath, "model and weight are required");
      continue;
    }
    if (String(s[i]["model"], spath + ".model", &t.model)) {
      CheckModel(s[i]["model"], spath + ".model", p, t.model);
      if (!seen.insert(t.model).second) Error(s[i]["model"], spath + ".model", "duplicate model");
    }
    if (Integer(s[i]["weight"], spath + ".weight", 1, 100, &w)) t.weight = static_cast<int>(w);
    sum += w;
    targets->push_back(t);
  }
  if (sum != 100) Error(s, path, absl::StrCat("weights sum to ", sum, ", not 100"));
}

// fallback: [MODEL, ...], tried in order.
void RuleParser::ParseFallback(const YAML::Node& f, const std::string& path, const Policy* p,
                               std::vector<std::string>* fallback) {
  if (!f.IsSequence() || f.size() == 0) {
    Error(f, path, "expected a non-empty list of models");
    return;
  }
  for (size_t i = 0; i < f.size(); ++i) {
    std::string m;
    const std::string fpath = absl::StrCat(path, "[", i, "]");
    if (String(f[i], fpath, &m)) {
      CheckModel(f[i], fpath, p, m);
      fallback->push_back(m);
    }
  }
}

void RuleParser::ParseTrueFlag(const YAML::Node& node, const std::string& path, bool* out) {
  if (Bool(node, path, out) && !*out) {
    Error(node, path, "only `true` is meaningful; remove the key instead");
  }
}

// `reasoning: on|off` or {mode, budget, shrink: {signal, from, to, min}}.
void RuleParser::ParseReasoning(const YAML::Node& node, const std::string& path, const Policy* p,
                                router::ReasoningAction* r) {
  std::string mode;
  const bool scalar = node.IsScalar();
  if (scalar) {
    mode = node.Scalar();
  } else if (!Map(node, path, {"mode", "budget", "shrink"})) {
    return;
  } else if (!node["mode"]) {
    Error(node, path, "mode (on or off) is required");
    return;
  } else if (!String(node["mode"], path + ".mode", &mode)) {
    return;
  }
  const YAML::Node& at = scalar ? node : node["mode"];
  if (mode != "on" && mode != "off") {
    Error(at, scalar ? path : path + ".mode", "expected on or off");
    return;
  }
  r->set = true;
  r->on = mode == "on";
  if (scalar) return;
  int64_t v = 0;
  if (node["budget"] && Integer(node["budget"], path + ".budget", 1, 1 << 30, &v)) {
    r->budget_tokens = static_cast<int32_t>(v);
  }
  if (!r->on && (node["budget"] || node["shrink"])) {
    Error(node, path, "budget and shrink have no meaning with mode off");
  }
  const YAML::Node& sh = node["shrink"];
  if (!sh) return;
  const std::string spath = path + ".shrink";
  if (!Map(sh, spath, {"signal", "from", "to", "min"})) return;
  for (const char* key : {"signal", "from", "to", "min"}) {
    if (!sh[key]) Error(sh, spath, absl::StrCat(key, " is required"));
  }
  if (!node["budget"]) Error(sh, spath, "shrinks a budget: give budget too");
  if (sh["signal"] && String(sh["signal"], spath + ".signal", &r->shrink_signal) &&
      !p->signals.contains(r->shrink_signal)) {
    Error(sh["signal"], spath + ".signal",
          absl::StrCat("signal '", r->shrink_signal, "' is not declared in `signals`"));
  }
  if (sh["from"]) Number(sh["from"], spath + ".from", &r->shrink_from);
  if (sh["to"] && Number(sh["to"], spath + ".to", &r->shrink_to) &&
      r->shrink_to <= r->shrink_from) {
    Error(sh["to"], spath + ".to", "must be above from");
  }
  if (sh["min"] && Integer(sh["min"], spath + ".min", 0, 1 << 30, &v)) {
    r->shrink_min_tokens = static_cast<int32_t>(v);
    if (r->shrink_min_tokens > r->budget_tokens && r->budget_tokens > 0) {
      Error(sh["min"], spath + ".min", "is above budget");
    }
  }
}

void RuleParser::ParseCondition(const YAML::Node& node, const std::string& path, const Policy* p,
                                router::Condition* c) {
  if (!FreeMap(node, path)) return;
  if (node.size() == 0) Error(node, path, "empty `when`; remove it to match everything");
  if (const size_t n = CountConditions(node); n > static_cast<size_t>(max_conditions_)) {
    Error(node, path,
          absl::StrCat(n, " conditions, more than ", max_conditions_, " (--max_rule_conditions)"));
    return;
  }
  for (const auto& kv : node) {
    const std::string field = kv.first.Scalar();
    const std::string fpath = absl::StrCat(path, ".", field);
    if (field == "any") {
      ParseAlternatives(kv.second, fpath, p, c);
    } else {
      ParseField(field, kv.second, fpath, kv.first, p, &c->all);
    }
  }
}

// any: [{field: test, ...}, ...], at least two alternatives.
void RuleParser::ParseAlternatives(const YAML::Node& node, const std::string& path, const Policy* p,
                                   router::Condition* c) {
  if (!node.IsSequence() || node.size() < 2) {
    Error(node, path, "expected a list of at least two alternatives");
    return;
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node& alt = node[i];
    const std::string apath = absl::StrCat(path, "[", i, "]");
    if (!FreeMap(alt, apath)) continue;
    if (alt.size() == 0) {
      Error(alt, apath, "empty alternative");
      continue;
    }
    // One alternative: all its fields and operators must hold.
    std::vector<Predicate> alternative;
    for (const auto& akv : alt) {
      ParseField(akv.first.Scalar(), akv.second, absl::StrCat(apath, ".", akv.first.Scalar()),
                 akv.first, p, &alternative);
    }
    c->any.push_back(std::move(alternative));
  }
}

// `field: VALUE` (equality) or `field: {op: operand, ...}` (all must hold).
void RuleParser::ParseField(const std::string& field, const YAML::Node& node,
                            const std::string& path, const YAML::Node& key, const Policy* p,
                            std::vector<Predicate>* out) {
  const auto kind = CheckField(field, path, key, p);
  if (!kind) return;
  const bool numeric = *kind == router::FieldKind::kNumber;
  const router::FieldInfo info = *router::LookupField(field);
  if (node.IsScalar()) {
    Predicate pr;
    pr.field = field;
    pr.id = info.id;
    pr.key = info.key;
    pr.numeric = numeric;
    pr.op = Op::kEq;
    if (ParseOperand(field, numeric, node, path, p, &pr)) out->push_back(pr);
    return;
  }
  static const std::map<std::string, Op> kOps = {
      {"eq", Op::kEq}, {"ne", Op::kNe},        {"gt", Op::kGt},
      {"ge", Op::kGe}, {"lt", Op::kLt},        {"le", Op::kLe},
      {"in", Op::kIn}, {"not_in", Op::kNotIn}, {"present", Op::kPresent}};
  if (!Map(node, path, {"eq", "ne", "gt", "ge", "lt", "le", "in", "not_in", "present"})) return;
  for (const auto& kv : node) {
    auto op = kOps.find(kv.first.Scalar());
    if (op == kOps.end()) continue;  // reported by Map
    Predicate pr;
    pr.field = field;
    pr.id = info.id;
    pr.key = info.key;
    pr.numeric = numeric;
    pr.op = op->second;
    if (ParseOperator(kv.second, absl::StrCat(path, ".", kv.first.Scalar()), p, &pr)) {
      out->push_back(pr);
    }
  }
}

std::optional<router::FieldKind> RuleParser::CheckField(const std::string& field,
                                                        const std::string& path,
                                                        const YAML::Node& key, const Policy* p) {
  const auto kind = router::KindOfField(field);
  if (!kind) {
    Error(key, path,
          "unknown field; expected prompt_tokens, prompt_bytes, image_count, image_tokens, "
          "num_messages, num_turns, tool_count, agent_steps, system_prompt_bytes, max_tokens, "
          "confidence, code_cues, math_cues, reasoning_cues, structured_output_cues, "
          "deadline_ms, session.turn, objective, reasoning, class, hint.model, tenant, "
          "last_role, session.model, label.KEY, signal.NAME, trigger.NAME or "
          "prefix_hit_tokens.MODEL");
    return std::nullopt;
  }
  if (field == "label.tenant") {
    // A label is whatever the caller wrote: a rule on it would let anyone buy the routing.
    Error(key, path,
          "a `tenant` label is set by the caller and proves nothing; test `tenant` (the tenant "
          "the caller's API key authenticates; `anonymous` for a caller without one) instead");
    return std::nullopt;
  }
  // An undeclared signal or trigger is reported, and its tests still parsed for their own errors.
  if (field.rfind("signal.", 0) == 0 && !p->signals.contains(field.substr(7))) {
    Error(key, path, absl::StrCat("signal '", field.substr(7), "' is not declared in `signals`"));
  }
  if (field.rfind("trigger.", 0) == 0 && !p->triggers.contains(field.substr(8))) {
    Error(key, path, absl::StrCat("trigger '", field.substr(8), "' is not declared in `triggers`"));
  }
  if (constexpr std::string_view kPrefixHit = "prefix_hit_tokens.";
      field.starts_with(kPrefixHit) && !p->models.contains(field.substr(kPrefixHit.size()))) {
    Error(
        key, path,
        absl::StrCat("model '", field.substr(kPrefixHit.size()), "' is not declared in `models`"));
  }
  return kind;
}

bool RuleParser::ParseOperator(const YAML::Node& operand, const std::string& path, const Policy* p,
                               Predicate* pr) {
  if (pr->op == Op::kPresent) return Bool(operand, path, &pr->flag);
  if (pr->op == Op::kIn || pr->op == Op::kNotIn) {
    if (pr->numeric) {
      Error(operand, path, "in/not_in apply to string fields; use gt/lt for numbers");
      return false;
    }
    if (!operand.IsSequence() || operand.size() == 0) {
      Error(operand, path, "expected a non-empty list");
      return false;
    }
    // Every member is checked, so that each bad one is reported.
    bool ok = true;
    for (size_t i = 0; i < operand.size(); ++i) {
      Predicate member;
      if (ParseOperand(pr->field, pr->numeric, operand[i], absl::StrCat(path, "[", i, "]"), p,
                       &member)) {
        pr->set.push_back(member.text);
      } else {
        ok = false;
      }
    }
    return ok;
  }
  if (!pr->numeric && pr->op != Op::kEq && pr->op != Op::kNe) {
    Error(operand, path, "gt/ge/lt/le apply to numeric fields");
    return false;
  }
  return ParseOperand(pr->field, pr->numeric, operand, path, p, pr);
}

bool RuleParser::ParseOperand(const std::string& field, bool numeric, const YAML::Node& v,
                              const std::string& path, const Policy* p, Predicate* pr) {
  if (numeric) return Number(v, path, &pr->number);
  if (!String(v, path, &pr->text)) return false;
  if (field == "class" && !classes_.empty() && !classes_.contains(pr->text)) {
    Error(v, path, absl::StrCat("unknown class '", pr->text, "'"));
  } else if (field == "hint.model" || field == "session.model") {
    CheckModel(v, path, p, pr->text);
  } else if (field == "objective" && pr->text != "auto" && pr->text != "accuracy" &&
             pr->text != "latency") {
    Error(v, path, "objective is one of auto, accuracy, latency");
  } else if (field == "reasoning" && pr->text != "default" && pr->text != "on" &&
             pr->text != "off") {
    Error(v, path, "reasoning is one of default, on, off");
  } else if (field.rfind("trigger.", 0) == 0 && pr->text != "on" && pr->text != "off") {
    Error(v, path, "a trigger is on or off");
  }
  return true;
}

// A field's equality is one test, a field's operator map one per operator, and `any` the tests
// of all its alternatives (each a map of fields).
size_t RuleParser::CountConditions(const YAML::Node& fields, bool top) {
  size_t n = 0;
  for (const auto& kv : fields) {
    if (top && kv.first.Scalar() == "any" && kv.second.IsSequence()) {
      for (const auto& alt : kv.second) n += alt.IsMap() ? CountConditions(alt, false) : 1;
    } else {
      n += kv.second.IsMap() ? std::max<size_t>(kv.second.size(), 1) : 1;
    }
  }
  return n;
}

}  // namespace tandem::policies
