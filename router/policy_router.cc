#include "router/policy_router.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "router/reasoning_decision.h"

namespace tandem::router {
namespace {

// A field's value for one request; `text` views strings that outlive the decision (the
// features, the policy, the snapshot, literals), so resolving a field allocates nothing.
struct FieldValue {
  bool present = false;
  double number = 0;
  std::string_view text;
};

const char* OpName(Op op) {
  switch (op) {
    case Op::kEq:
      return "eq";
    case Op::kNe:
      return "ne";
    case Op::kGt:
      return "gt";
    case Op::kGe:
      return "ge";
    case Op::kLt:
      return "lt";
    case Op::kLe:
      return "le";
    case Op::kIn:
      return "in";
    case Op::kNotIn:
      return "not_in";
    case Op::kPresent:
      return "present";
  }
  return "?";
}

FieldValue Number(double v) { return {true, v, ""}; }
FieldValue Text(std::string_view s) { return {!s.empty(), 0, s}; }

// Everything a condition can look at for one request.
struct Context {
  const RequestFeatures& f;
  const Policy& policy;
  const std::string& request_class;
  double confidence;
  const SignalSnapshot& signals;
};

// label.KEY, signal.NAME, trigger.NAME and prefix_hit_tokens.MODEL.
FieldValue ResolveKeyed(Field id, const std::string& key, const Context& c) {
  const RequestFeatures& f = c.f;
  switch (id) {
    case Field::kLabel: {
      auto it = f.labels.find(key);
      return it == f.labels.end() ? FieldValue{} : Text(it->second);
    }
    case Field::kSignal: {
      auto spec = c.policy.signals.find(key);
      if (spec == c.policy.signals.end()) return {};
      if (spec->second.source == SignalSource::kStatic) return Number(spec->second.static_value);
      auto it = c.signals.values.find(key);
      return it == c.signals.values.end() ? FieldValue{} : Number(it->second);
    }
    case Field::kTrigger: {
      auto it = c.signals.triggers.find(key);
      return Text(it != c.signals.triggers.end() && it->second ? "on" : "off");
    }
    case Field::kPrefixHitTokens: {
      auto it = f.prefix_hit_tokens.find(key);
      return it == f.prefix_hit_tokens.end() ? FieldValue{}
                                             : Number(static_cast<double>(it->second));
    }
    default:
      return {};
  }
}

FieldValue Resolve(const Predicate& p, const Context& c) {
  Field id = p.id;
  const std::string* key = &p.key;
  std::optional<FieldInfo> looked_up;
  if (id == Field::kUnknown) {  // a predicate not made by the policy parser
    looked_up = LookupField(p.field);
    if (!looked_up) return {};
    id = looked_up->id;
    key = &looked_up->key;
  }
  const RequestFeatures& f = c.f;
  switch (id) {
    case Field::kPromptTokens:
      return Number(static_cast<double>(f.prompt_tokens));
    case Field::kPromptBytes:
      return Number(static_cast<double>(f.prompt_bytes));
    case Field::kImageCount:
      return Number(f.image_count);
    case Field::kImageTokens:
      return Number(static_cast<double>(f.image_tokens));
    case Field::kNumMessages:
      return Number(f.num_messages);
    case Field::kNumTurns:
      return Number(f.num_turns);
    case Field::kToolCount:
      return Number(f.tool_count);
    case Field::kAgentSteps:
      return Number(f.agent_steps);
    case Field::kSystemPromptBytes:
      return Number(static_cast<double>(f.system_prompt_bytes));
    case Field::kMaxTokens:
      return f.max_tokens > 0 ? Number(f.max_tokens) : FieldValue{};
    case Field::kConfidence:
      return Number(c.confidence);
    case Field::kCodeCues:
      return Number(f.cues.code);
    case Field::kMathCues:
      return Number(f.cues.math);
    case Field::kReasoningCues:
      return Number(f.cues.reasoning);
    case Field::kStructuredOutputCues:
      return Number(f.cues.structured_output);
    case Field::kDeadlineMs:
      return f.deadline_ms >= 0 ? Number(static_cast<double>(f.deadline_ms)) : FieldValue{};
    case Field::kSessionTurn:
      return f.session_id.empty() ? FieldValue{} : Number(static_cast<double>(f.session_turn));
    case Field::kObjective:
      return Text(ObjectiveName(f.objective));
    case Field::kReasoning:
      return Text(ReasoningModeName(f.reasoning));
    case Field::kClass:
      return Text(c.request_class);
    case Field::kHintModel:
      return Text(f.pinned_model);
    case Field::kTenant:
      return Text(f.tenant);
    case Field::kLastRole:
      return Text(f.last_role);
    case Field::kSessionModel:
      // A model this policy does not know (the session began under another one) is no model.
      return c.policy.models.contains(f.session_model) ? Text(f.session_model) : FieldValue{};
    default:
      return ResolveKeyed(id, *key, c);
  }
}

std::string Show(const FieldValue& v, bool numeric) {
  if (!v.present) return "(absent)";
  return numeric ? absl::StrFormat("%g", v.number)
                 : absl::StrCat("'", absl::string_view(v.text.data(), v.text.size()), "'");
}

bool Holds(const Predicate& p, const FieldValue& v) {
  if (p.op == Op::kPresent) return v.present == p.flag;
  if (p.op == Op::kIn || p.op == Op::kNotIn) {
    const bool member = v.present && std::find(p.set.begin(), p.set.end(), v.text) != p.set.end();
    return p.op == Op::kIn ? member : !member;
  }
  if (!p.numeric) {
    return p.op == Op::kEq ? v.present && v.text == p.text : !(v.present && v.text == p.text);
  }
  bool result = false;
  if (v.present) {
    switch (p.op) {
      case Op::kEq:
        result = v.number == p.number;
        break;
      case Op::kNe:
        result = v.number != p.number;
        break;
      case Op::kGt:
        result = v.number > p.number;
        break;
      case Op::kGe:
        result = v.number >= p.number;
        break;
      case Op::kLt:
        result = v.number < p.number;
        break;
      case Op::kLe:
        result = v.number <= p.number;
        break;
      default:
        break;
    }
  }
  return result;
}

// Whether the predicate holds; with `detail`, also says why (the explanation of a decision).
bool Test(const Predicate& p, const Context& c, std::string* detail) {
  const FieldValue v = Resolve(p, c);
  const bool result = Holds(p, v);
  if (detail == nullptr) return result;
  std::string operand;
  if (p.op == Op::kPresent) {
    operand = p.flag ? "true" : "false";
  } else if (p.op == Op::kIn || p.op == Op::kNotIn) {
    operand = absl::StrCat("[", absl::StrJoin(p.set, ", "), "]");
  } else if (p.numeric) {
    operand = absl::StrFormat("%g", p.number);
  } else {
    operand = absl::StrCat("'", p.text, "'");
  }
  // A prompt's size says how it was counted: near a threshold the gateway counts exactly.
  const char* source =
      p.field != "prompt_tokens" ? "" : (c.f.prompt_tokens_exact ? " (tokenizer)" : " (estimate)");
  absl::StrAppend(detail, detail->empty() ? "" : "; ", p.field, "=", Show(v, p.numeric), source,
                  " ", OpName(p.op), " ", operand, ": ", result ? "yes" : "no");
  return result;
}

// `detail` may be null: no explanation is built.
bool Matches(const Condition& cond, const Context& c, std::string* detail) {
  if (cond.MatchesEverything()) {
    if (detail != nullptr) *detail = "no conditions";
    return true;
  }
  // Without an explanation to build, the first test that fails decides.
  const bool explain = detail != nullptr;
  bool all = true;
  for (const auto& p : cond.all) {
    all = Test(p, c, detail) && all;
    if (!all && !explain) return false;
  }
  bool any = cond.any.empty();
  for (const auto& alternative : cond.any) {
    bool holds = true;
    for (const auto& p : alternative) {
      holds = Test(p, c, detail) && holds;
      if (!holds && !explain) break;
    }
    any = any || holds;
    if (any && !explain) break;
  }
  return all && any;
}

// The request's class and what chose it, for the reason: a classify entry's name, "learned
// classifier" or "default_class".
struct Classification {
  std::string request_class;
  std::string by;
};

// Tier 1 classification, transparent rules: the first classify entry whose `when` holds.
Classification ClassifyByRules(const Policy& p, const RequestFeatures& f,
                               const SignalSnapshot& signals, bool trace, RouteDecision* d) {
  // No class is chosen yet: to these conditions `class` is absent.
  const std::string none;
  const Context c{f, p, none, 1.0, signals};
  for (const auto& cr : p.classify) {
    std::string detail;
    const bool hit = Matches(cr.when, c, trace ? &detail : nullptr);
    if (trace) {
      d->trace.push_back({absl::StrCat("classify/", cr.name), hit,
                          hit ? absl::StrCat(detail, " -> class ", cr.request_class) : detail});
    }
    if (hit) return {cr.request_class, cr.name};
  }
  return {p.default_class, "default_class"};
}

// Tier 2 classification: the learned model's answer (or, replaying a decision log without
// prompt text, the recorded one) sets the confidence, and the class when at least
// min_confidence.
void ClassifyLearned(const Policy& p, const RequestFeatures& f, bool trace, RouteDecision* d,
                     Classification* cls) {
  if (!f.classifier_text.empty()) {
    const HashedClassifier::Prediction pred = p.classifier->Predict(f.classifier_text);
    d->learned_class = p.classifier->classes()[pred.label];
    d->learned_confidence = pred.confidence;
  } else if (!f.recorded_learned_class.empty()) {
    d->learned_class = f.recorded_learned_class;
    d->learned_confidence = f.recorded_learned_confidence;
  }
  if (d->learned_class.empty()) return;
  const bool confident = d->learned_confidence >= p.classifier_min_confidence;
  if (trace) {
    d->trace.push_back(
        {"classify/learned", confident,
         absl::StrFormat("%s with confidence %.3f (min_confidence %.2f)%s", d->learned_class,
                         d->learned_confidence, p.classifier_min_confidence,
                         confident ? "" : absl::StrCat(" -> class ", p.default_class))});
  }
  d->confidence = d->learned_confidence;
  if (confident) {
    cls->request_class = d->learned_class;
    cls->by = "learned classifier";
    return;
  }
  if (p.second_opinion_model.empty()) return;
  if (!f.second_opinion_asked) {
    d->second_opinion =
        RouteDecision::SecondOpinion{p.second_opinion_model, p.second_opinion_timeout_seconds,
                                     p.classifier != nullptr ? p.classifier->classes() : p.classes};
    return;
  }
  const bool answered = !f.second_opinion_class.empty();
  if (trace) {
    d->trace.push_back(
        {"classify/second_opinion", answered,
         answered ? absl::StrCat(p.second_opinion_model, " answered ", f.second_opinion_class,
                                 " -> class ", f.second_opinion_class)
                  : absl::StrCat(p.second_opinion_model, " gave no answer in time -> class ",
                                 p.default_class)});
  }
  if (answered) {
    cls->request_class = f.second_opinion_class;
    cls->by = "second opinion";
  }
}

// The model an action sends the request to (kShedModel when it sheds it). INVALID_ARGUMENT for a
// pin this policy does not know: the caller's mistake, not the policy's.
absl::StatusOr<std::string> ChooseModel(const Policy& p, const Action& a,
                                        const RequestFeatures& f) {
  if (a.shed) return std::string(kShedModel);
  if (a.to_pinned) {
    if (!p.models.contains(f.pinned_model)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "hints.model: unknown model '%s' (policy %s knows: %s)", f.pinned_model, p.version,
          absl::StrJoin(p.models, ", ",
                        [](std::string* out, const auto& kv) { out->append(kv.first); })));
    }
    return f.pinned_model;
  }
  if (a.to_session) return f.session_model;
  if (a.targets.size() == 1) return a.targets[0].model;
  // Weighted split on a stable key: the same request id always lands on the same side.
  const int point = static_cast<int>(f.split_key % 100);
  int acc = 0;
  for (const auto& t : a.targets) {
    acc += t.weight;
    if (point < acc) return t.model;
  }
  return std::string();
}

// Seconds without a first token before a hedge: the signal's value clamped to [min, max] while
// it has one, else `after`.
double HedgeAfterSeconds(const Hedge& h, const SignalSnapshot& signals) {
  if (!h.after_signal.empty()) {
    auto it = signals.values.find(h.after_signal);
    if (it != signals.values.end()) return std::clamp(it->second, h.min_seconds, h.max_seconds);
  }
  return h.after_seconds;
}

// Fills `d` from the deciding rule's action: where the request goes (or that it is shed), its
// shadow, fallbacks and hedge delay. Fails only as ChooseModel does.
absl::Status ApplyAction(const Policy& p, const Rule& rule, const RequestFeatures& f,
                         const SignalSnapshot& signals, RouteDecision* d) {
  const Action& a = rule.action;
  absl::StatusOr<std::string> model = ChooseModel(p, a, f);
  if (!model.ok()) return model.status();
  d->model = *std::move(model);
  if (a.shed) {
    d->shed = true;
    d->retry_after_seconds = a.retry_after_seconds;
  }
  d->rule = rule.name;
  d->shadow = a.shadow;
  d->fallback = a.fallback;
  if (a.hedge.enabled) d->hedge_after_seconds = HedgeAfterSeconds(a.hedge, signals);
  return absl::OkStatus();
}

}  // namespace

std::optional<FieldInfo> LookupField(std::string_view field) {
  struct Named {
    std::string_view name;
    Field id;
    FieldKind kind;
  };
  static constexpr Named kFields[] = {
      {"prompt_tokens", Field::kPromptTokens, FieldKind::kNumber},
      {"prompt_bytes", Field::kPromptBytes, FieldKind::kNumber},
      {"image_count", Field::kImageCount, FieldKind::kNumber},
      {"image_tokens", Field::kImageTokens, FieldKind::kNumber},
      {"num_messages", Field::kNumMessages, FieldKind::kNumber},
      {"num_turns", Field::kNumTurns, FieldKind::kNumber},
      {"tool_count", Field::kToolCount, FieldKind::kNumber},
      {"agent_steps", Field::kAgentSteps, FieldKind::kNumber},
      {"max_tokens", Field::kMaxTokens, FieldKind::kNumber},
      {"system_prompt_bytes", Field::kSystemPromptBytes, FieldKind::kNumber},
      {"confidence", Field::kConfidence, FieldKind::kNumber},
      {"code_cues", Field::kCodeCues, FieldKind::kNumber},
      {"math_cues", Field::kMathCues, FieldKind::kNumber},
      {"reasoning_cues", Field::kReasoningCues, FieldKind::kNumber},
      {"structured_output_cues", Field::kStructuredOutputCues, FieldKind::kNumber},
      {"deadline_ms", Field::kDeadlineMs, FieldKind::kNumber},
      {"session.turn", Field::kSessionTurn, FieldKind::kNumber},
      {"objective", Field::kObjective, FieldKind::kString},
      {"reasoning", Field::kReasoning, FieldKind::kString},
      {"class", Field::kClass, FieldKind::kString},
      {"hint.model", Field::kHintModel, FieldKind::kString},
      {"tenant", Field::kTenant, FieldKind::kString},
      {"last_role", Field::kLastRole, FieldKind::kString},
      {"session.model", Field::kSessionModel, FieldKind::kString},
  };
  for (const Named& n : kFields) {
    if (field == n.name) return FieldInfo{n.id, n.kind, ""};
  }
  static constexpr Named kKeyed[] = {
      {"label.", Field::kLabel, FieldKind::kString},
      {"signal.", Field::kSignal, FieldKind::kNumber},
      {"trigger.", Field::kTrigger, FieldKind::kString},
      {"prefix_hit_tokens.", Field::kPrefixHitTokens, FieldKind::kNumber}};
  for (const Named& n : kKeyed) {
    if (field.starts_with(n.name) && field.size() > n.name.size()) {
      return FieldInfo{n.id, n.kind, std::string(field.substr(n.name.size()))};
    }
  }
  return std::nullopt;
}

std::optional<FieldKind> KindOfField(const std::string& field) {
  std::optional<FieldInfo> info = LookupField(field);
  if (!info) return std::nullopt;
  return info->kind;
}

PolicyRouter::PolicyRouter(std::shared_ptr<const Policy> policy) : policy_(std::move(policy)) {
  auto add = [this](const std::vector<Predicate>& predicates) {
    for (const Predicate& p : predicates) {
      if (p.field == "prompt_tokens" && p.numeric) {
        thresholds_.push_back(static_cast<int64_t>(std::llround(p.number)));
      }
      if (p.field.starts_with("prefix_hit_tokens.")) reads_prefix_hits_ = true;
    }
  };
  auto add_condition = [&](const Condition& c) {
    add(c.all);
    for (const auto& alternative : c.any) add(alternative);
  };
  for (const ClassRule& c : policy_->classify) add_condition(c.when);
  for (const Rule& r : policy_->rules) add_condition(r.when);
  std::sort(thresholds_.begin(), thresholds_.end());
  thresholds_.erase(std::unique(thresholds_.begin(), thresholds_.end()), thresholds_.end());
}

absl::StatusOr<RouteDecision> PolicyRouter::Route(const RequestFeatures& f,
                                                  const SignalSnapshot& signals, bool trace) const {
  const Policy& p = *policy_;
  RouteDecision d;
  d.policy_version = p.version;
  Classification cls = ClassifyByRules(p, f, signals, trace, &d);
  d.confidence = 1.0;
  // Tier 2, the learned model, only when no transparent rule claimed the request.
  if (cls.by == "default_class" && p.classifier != nullptr) ClassifyLearned(p, f, trace, &d, &cls);
  d.request_class = cls.request_class;

  const Context c{f, p, cls.request_class, d.confidence, signals};
  for (const auto& rule : p.rules) {
    std::string detail;
    bool hit = Matches(rule.when, c, trace ? &detail : nullptr);
    if (hit && rule.action.to_session && !p.models.contains(f.session_model)) {
      hit = false;
      if (trace) absl::StrAppend(&detail, "; no session model this policy knows");
    }
    if (trace) d.trace.push_back({rule.name, hit, detail});
    if (!hit) continue;
    // The deciding rule is always explained (the reason); the others only with `trace`.
    if (!trace) Matches(rule.when, c, &detail);
    if (absl::Status s = ApplyAction(p, rule, f, signals, &d); !s.ok()) return s;
    d.reason = absl::StrFormat("class %s (by %s); rule '%s' matched: %s", cls.request_class, cls.by,
                               rule.name, detail);
    if (!d.shed) {
      DecideReasoning(f, &rule.action.reasoning, rule.name, signals, &d);
      absl::StrAppend(&d.reason, "; reasoning ", DescribeReasoning(d));
    }
    return d;
  }
  return absl::FailedPreconditionError(
      absl::StrFormat("policy %s: no rule matched and it has no catch-all rule", p.version));
}

}  // namespace tandem::router
