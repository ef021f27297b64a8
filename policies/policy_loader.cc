#include "policies/policy_loader.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/file.h"
#include "common/sha256.h"
#include "policies/rule_parser.h"
#include "policies/yaml_reader.h"
#include "router/hashed_classifier.h"

namespace tandem::policies {
namespace {

using router::Op;
using router::Policy;

// Walks the YAML tree, building the policy and collecting every error with its location. Rules'
// `when` and `action` are RuleParser's (rule_parser.h).
class Parser : public YamlReader {
 public:
  Parser(std::string file, std::vector<PolicyError>* errors, const PolicyLimits& limits)
      : YamlReader(std::move(file), errors),
        limits_(limits),
        rules_(this->file(), errors, &classes_, limits.max_conditions) {}

  std::shared_ptr<const Policy> Parse(const YAML::Node& root, const std::string& text) {
    auto p = std::make_shared<Policy>();
    p->sha256 = Sha256Hex(text);
    if (!Map(root, "",
             {"schema", "version", "models", "classes", "default_class", "classify", "classifier",
              "signals", "triggers", "rules"})) {
      return nullptr;
    }
    for (const char* required :
         {"schema", "version", "models", "classes", "default_class", "rules"}) {
      if (!root[required]) Error(root, required, "required key is missing");
    }
    if (root["schema"]) {
      int64_t schema = 0;
      if (Integer(root["schema"], "schema", 1, 1, &schema)) {
      }
    }
    if (root["version"]) String(root["version"], "version", &p->version);
    if (root["models"]) ParseModels(root["models"], p.get());
    if (root["classes"]) ParseClasses(root["classes"], p.get());
    if (root["default_class"] &&
        String(root["default_class"], "default_class", &p->default_class) &&
        !classes_.contains(p->default_class) && !classes_.empty()) {
      Error(root["default_class"], "default_class",
            absl::StrCat("unknown class '", p->default_class, "'"));
    }
    if (root["signals"]) ParseSignals(root["signals"], p.get());
    if (root["triggers"]) ParseTriggers(root["triggers"], p.get());
    if (root["classifier"]) ParseClassifier(root["classifier"], p.get());
    if (root["classify"]) ParseClassify(root["classify"], p.get());
    if (root["rules"]) ParseRules(root["rules"], p.get());
    return p;
  }

 private:
  void ParseModels(const YAML::Node& node, Policy* p) {
    if (!FreeMap(node, "models")) return;
    if (node.size() == 0) Error(node, "models", "at least one model is required");
    for (const auto& kv : node) {
      router::ModelSpec m;
      m.name = kv.first.Scalar();
      const std::string path = absl::StrCat("models.", m.name);
      const YAML::Node& spec = kv.second;
      if (Map(spec, path,
              {"vision", "max_context_tokens", "cost_per_million_tokens", "endpoints",
               "worker_pick"})) {
        if (const YAML::Node& eps = spec["endpoints"]) {
          if (!eps.IsSequence() || eps.size() == 0) {
            Error(eps, path + ".endpoints", "expected a non-empty list of HOST:PORT");
          } else {
            for (size_t i = 0; i < eps.size(); ++i) {
              std::string ep;
              const std::string epath = absl::StrCat(path, ".endpoints[", i, "]");
              if (!String(eps[i], epath, &ep)) continue;
              const size_t colon = ep.rfind(':');
              int64_t port = 0;
              if (colon == std::string::npos || colon == 0 ||
                  !absl::SimpleAtoi(ep.substr(colon + 1), &port) || port < 1 || port > 65535) {
                Error(eps[i], epath, "expected HOST:PORT with a port in [1, 65535]");
                continue;
              }
              m.endpoints.push_back(ep);
            }
          }
        }
        if (spec["vision"]) Bool(spec["vision"], path + ".vision", &m.vision);
        if (const YAML::Node& pick = spec["worker_pick"];
            pick && String(pick, path + ".worker_pick", &m.worker_pick) &&
            m.worker_pick != "least_outstanding" && m.worker_pick != "power_of_two" &&
            m.worker_pick != "round_robin" && m.worker_pick != "prefix") {
          Error(pick, path + ".worker_pick",
                "expected least_outstanding, power_of_two, round_robin or prefix");
        }
        if (spec["max_context_tokens"]) {
          Integer(spec["max_context_tokens"], path + ".max_context_tokens", 1, int64_t{1} << 40,
                  &m.max_context_tokens);
        }
        if (const YAML::Node& cost = spec["cost_per_million_tokens"]) {
          const std::string cpath = path + ".cost_per_million_tokens";
          if (Map(cost, cpath, {"input", "output"})) {
            for (auto [key, out] : {std::pair{"input", &m.input_cost_per_million},
                                    std::pair{"output", &m.output_cost_per_million}}) {
              if (cost[key] && Number(cost[key], cpath + "." + key, out) && *out < 0) {
                Error(cost[key], cpath + "." + key, "must be >= 0");
              }
            }
          }
        }
      }
      p->models[m.name] = m;
    }
  }

  void ParseClasses(const YAML::Node& node, Policy* p) {
    if (!node.IsSequence() || node.size() == 0) {
      Error(node, "classes", "expected a non-empty list of class names");
      return;
    }
    for (size_t i = 0; i < node.size(); ++i) {
      std::string name;
      const std::string path = absl::StrCat("classes[", i, "]");
      if (!String(node[i], path, &name)) continue;
      if (!classes_.insert(name).second) Error(node[i], path, "duplicate class");
      p->classes.push_back(name);
    }
  }

  // classifier: {model: PATH, min_confidence: 0..1, second_opinion: {model: M, timeout: D}}; PATH
  // is relative to the policy file.
  void ParseClassifier(const YAML::Node& node, Policy* p) {
    if (!Map(node, "classifier", {"model", "min_confidence", "second_opinion"})) return;
    if (node["second_opinion"]) ParseSecondOpinion(node["second_opinion"], p);
    if (!node["model"]) {
      Error(node, "classifier.model", "required key is missing");
      return;
    }
    std::string path;
    if (!String(node["model"], "classifier.model", &path)) return;
    if (path[0] != '/') {
      const size_t slash = file().rfind('/');
      if (slash != std::string::npos) path = file().substr(0, slash + 1) + path;
    }
    if (node["min_confidence"] &&
        Number(node["min_confidence"], "classifier.min_confidence",
               &p->classifier_min_confidence) &&
        (p->classifier_min_confidence < 0 || p->classifier_min_confidence > 1)) {
      Error(node["min_confidence"], "classifier.min_confidence", "must be in [0, 1]");
    }
    auto bytes = ReadFileToString(path, limits_.max_classifier_bytes, "--max_classifier_bytes");
    if (!bytes.ok()) {
      Error(node["model"], "classifier.model", std::string(bytes.status().message()));
      return;
    }
    auto model = router::HashedClassifier::FromBytes(*bytes);
    if (!model.ok()) {
      Error(node["model"], "classifier.model",
            absl::StrCat(path, ": ", std::string(model.status().message())));
      return;
    }
    for (const auto& c : model->classes()) {
      if (!classes_.empty() && !classes_.contains(c)) {
        Error(node["model"], "classifier.model",
              absl::StrCat("the model predicts class '", c, "', which `classes` does not list"));
      }
    }
    p->classifier = std::make_shared<router::HashedClassifier>(std::move(*model));
    p->classifier_path = path;
    // The policy's identity covers the model too: retraining it is a policy change.
    p->sha256 = Sha256Hex(p->sha256 + Sha256Hex(*bytes));
  }

  // second_opinion: {model: a model of `models`, timeout: (0, 5s], 300ms when absent}.
  void ParseSecondOpinion(const YAML::Node& node, Policy* p) {
    const std::string path = "classifier.second_opinion";
    if (!Map(node, path, {"model", "timeout"})) return;
    if (!node["model"]) {
      Error(node, path + ".model", "required key is missing");
    } else if (String(node["model"], path + ".model", &p->second_opinion_model) &&
               !p->models.contains(p->second_opinion_model)) {
      Error(node["model"], path + ".model",
            absl::StrCat("unknown model '", p->second_opinion_model, "'"));
    }
    p->second_opinion_timeout_seconds = 0.3;
    if (node["timeout"] &&
        Duration(node["timeout"], path + ".timeout", &p->second_opinion_timeout_seconds) &&
        (p->second_opinion_timeout_seconds <= 0 || p->second_opinion_timeout_seconds > 5)) {
      Error(node["timeout"], path + ".timeout", "must be in (0, 5s]");
    }
  }

  // signals: NAME: NUMBER (static) or NAME: {scrape: {...} | promql: EXPR | gateway: {...} |
  // sum: [NAME, ...], interval, stale}.
  void ParseSignals(const YAML::Node& node, Policy* p) {
    if (!FreeMap(node, "signals")) return;
    for (const auto& kv : node) {
      router::SignalSpec sig;
      sig.name = kv.first.Scalar();
      const std::string path = "signals." + sig.name;
      const YAML::Node& n = kv.second;
      if (n.IsScalar()) {
        if (Number(n, path, &sig.static_value)) p->signals[sig.name] = sig;
        continue;
      }
      if (!Map(n, path, {"scrape", "promql", "gateway", "sum", "interval", "stale"})) continue;
      int sources = 0;
      for (const char* key : {"scrape", "promql", "gateway", "sum"}) sources += n[key] ? 1 : 0;
      if (sources != 1) {
        Error(n, path, "expected a number, or exactly one of scrape, promql, gateway or sum");
        continue;
      }
      if (n["interval"] && !n["promql"]) {
        Error(n["interval"], path + ".interval",
              "only PromQL signals have an interval (scrapes refresh at the gateway's "
              "--scrape_interval, as do gateway signals; sums at every snapshot)");
      }
      if (const YAML::Node& sc = n["scrape"]) {
        sig.source = router::SignalSource::kScrape;
        ParseScrape(sc, path + ".scrape", p, &sig);
      } else if (const YAML::Node& g = n["gateway"]) {
        sig.source = router::SignalSource::kGateway;
        ParseGatewaySignal(g, path + ".gateway", p, &sig);
      } else if (const YAML::Node& terms = n["sum"]) {
        sig.source = router::SignalSource::kSum;
        ParseSumTerms(terms, path + ".sum", &sig);
      } else {
        sig.source = router::SignalSource::kPromQL;
        String(n["promql"], path + ".promql", &sig.query);
        if (n["interval"] && Duration(n["interval"], path + ".interval", &sig.interval_seconds) &&
            sig.interval_seconds < 0.1) {
          Error(n["interval"], path + ".interval", "must be at least 100ms");
        }
      }
      if (const YAML::Node& st = n["stale"]) {
        const std::string spath = path + ".stale";
        if (Map(st, spath, {"after", "hold", "then"})) {
          if (st["after"]) Duration(st["after"], spath + ".after", &sig.stale_after_seconds);
          if (st["hold"]) Duration(st["hold"], spath + ".hold", &sig.hold_seconds);
          if (const YAML::Node& t = st["then"]) {
            std::string then;
            if (String(t, spath + ".then", &then)) {
              if (then == "fail_closed") {
                sig.fail_closed = true;
              } else if (then != "fail_open") {
                Error(t, spath + ".then", "expected fail_open or fail_closed");
              }
            }
          }
        }
      }
      p->signals[sig.name] = sig;
    }
    CheckSumTerms(node, *p);
  }

  // sum: [NAME, ...]
  void ParseSumTerms(const YAML::Node& n, const std::string& path, router::SignalSpec* sig) {
    if (!n.IsSequence() || n.size() == 0) {
      Error(n, path, "expected a non-empty list of signal names");
      return;
    }
    for (size_t i = 0; i < n.size(); ++i) {
      std::string term;
      if (String(n[i], absl::StrCat(path, "[", i, "]"), &term)) sig->terms.push_back(term);
    }
  }

  // Each term of a sum is a declared signal that is not itself a sum (so sums never loop).
  void CheckSumTerms(const YAML::Node& node, const Policy& p) {
    for (const auto& [name, sig] : p.signals) {
      for (size_t i = 0; i < sig.terms.size(); ++i) {
        const std::string path = absl::StrCat("signals.", name, ".sum[", i, "]");
        // node[name] is the map parsed: LoadYaml refuses a repeated key, which made it another.
        const YAML::Node at = node[name]["sum"][i];
        auto term = p.signals.find(sig.terms[i]);
        if (term == p.signals.end()) {
          Error(at, path, absl::StrCat("signal '", sig.terms[i], "' is not declared in `signals`"));
        } else if (term->second.source == router::SignalSource::kSum) {
          Error(at, path,
                absl::StrCat("signal '", sig.terms[i],
                             "' is a sum; sums add other "
                             "signals"));
        }
      }
    }
  }

  // gateway: {model, metric: queued|inflight, aggregate: sum|avg}
  void ParseGatewaySignal(const YAML::Node& n, const std::string& path, const Policy* p,
                          router::SignalSpec* sig) {
    if (!Map(n, path, {"model", "metric", "aggregate"})) return;
    for (const char* required : {"model", "metric"}) {
      if (!n[required]) Error(n, absl::StrCat(path, ".", required), "required key is missing");
    }
    if (n["model"] && String(n["model"], path + ".model", &sig->model)) {
      rules_.CheckModel(n["model"], path + ".model", p, sig->model);
    }
    if (n["metric"] && String(n["metric"], path + ".metric", &sig->metric)) {
      if (sig->metric == "queued") {
        sig->gateway_metric = router::GatewayMetric::kQueued;
      } else if (sig->metric == "inflight") {
        sig->gateway_metric = router::GatewayMetric::kInflight;
      } else {
        Error(n["metric"], path + ".metric", "expected queued or inflight");
      }
    }
    if (const YAML::Node& a = n["aggregate"]) {
      std::string name;
      if (String(a, path + ".aggregate", &name)) {
        if (name == "avg") {
          sig->aggregate = router::Aggregate::kAvg;
        } else if (name != "sum") {
          Error(a, path + ".aggregate", "expected sum (the total) or avg (per usable worker)");
        }
      }
    }
  }

  // scrape: {model, metric, labels: {K: V}, aggregate: sum|max|min|avg|rate|quantile,
  //          quantile: 0..1, window: DURATION}
  void ParseScrape(const YAML::Node& n, const std::string& path, const Policy* p,
                   router::SignalSpec* sig) {
    if (!Map(n, path, {"model", "metric", "labels", "aggregate", "quantile", "window"})) return;
    for (const char* required : {"model", "metric"}) {
      if (!n[required]) Error(n, absl::StrCat(path, ".", required), "required key is missing");
    }
    if (n["model"] && String(n["model"], path + ".model", &sig->model)) {
      rules_.CheckModel(n["model"], path + ".model", p, sig->model);
    }
    if (n["metric"]) String(n["metric"], path + ".metric", &sig->metric);
    if (const YAML::Node& l = n["labels"]; l && FreeMap(l, path + ".labels")) {
      for (const auto& kv : l) {
        std::string v;
        if (String(kv.second, path + ".labels." + kv.first.Scalar(), &v)) {
          sig->labels[kv.first.Scalar()] = v;
        }
      }
    }
    static const std::map<std::string, router::Aggregate> kAggregates = {
        {"sum", router::Aggregate::kSum},   {"max", router::Aggregate::kMax},
        {"min", router::Aggregate::kMin},   {"avg", router::Aggregate::kAvg},
        {"rate", router::Aggregate::kRate}, {"quantile", router::Aggregate::kQuantile}};
    if (const YAML::Node& a = n["aggregate"]) {
      std::string name;
      if (String(a, path + ".aggregate", &name)) {
        auto it = kAggregates.find(name);
        if (it == kAggregates.end()) {
          Error(a, path + ".aggregate", "expected sum, max, min, avg, rate or quantile");
        } else {
          sig->aggregate = it->second;
        }
      }
    }
    if (const YAML::Node& q = n["quantile"]) {
      if (sig->aggregate != router::Aggregate::kQuantile) {
        Error(q, path + ".quantile", "only with aggregate: quantile");
      } else if (Number(q, path + ".quantile", &sig->quantile) &&
                 (sig->quantile <= 0 || sig->quantile >= 1)) {
        Error(q, path + ".quantile", "must be in (0, 1)");
      }
    }
    if (const YAML::Node& w = n["window"]) {
      if (sig->aggregate != router::Aggregate::kQuantile &&
          sig->aggregate != router::Aggregate::kRate) {
        Error(w, path + ".window", "only with aggregate: rate or quantile");
      } else if (Duration(w, path + ".window", &sig->window_seconds) && sig->window_seconds < 0.1) {
        Error(w, path + ".window", "must be at least 100ms");
      }
    }
  }

  // triggers: NAME: {signal, enter: {OP: X}, exit: {OP: Y}, min_dwell: DURATION}
  void ParseTriggers(const YAML::Node& node, Policy* p) {
    if (!FreeMap(node, "triggers")) return;
    for (const auto& kv : node) {
      router::TriggerSpec t;
      t.name = kv.first.Scalar();
      const std::string path = "triggers." + t.name;
      const YAML::Node& n = kv.second;
      if (!Map(n, path, {"signal", "enter", "exit", "min_dwell"})) continue;
      for (const char* required : {"signal", "enter", "exit"}) {
        if (!n[required]) Error(n, absl::StrCat(path, ".", required), "required key is missing");
      }
      if (n["signal"] && String(n["signal"], path + ".signal", &t.signal) &&
          !p->signals.contains(t.signal)) {
        Error(n["signal"], path + ".signal",
              absl::StrCat("signal '", t.signal, "' is not declared in `signals`"));
      }
      const bool enter_ok = n["enter"] && ParseThreshold(n["enter"], path + ".enter", &t.enter);
      const bool exit_ok = n["exit"] && ParseThreshold(n["exit"], path + ".exit", &t.exit);
      if (enter_ok && exit_ok) CheckBand(n, path, t);
      if (n["min_dwell"]) Duration(n["min_dwell"], path + ".min_dwell", &t.min_dwell_seconds);
      p->triggers[t.name] = t;
    }
  }

  bool ParseThreshold(const YAML::Node& n, const std::string& path, router::Threshold* t) {
    static const std::map<std::string, Op> kOps = {
        {"gt", Op::kGt}, {"ge", Op::kGe}, {"lt", Op::kLt}, {"le", Op::kLe}};
    if (!Map(n, path, {"gt", "ge", "lt", "le"})) return false;
    if (n.size() != 1) {
      Error(n, path, "expected exactly one of gt, ge, lt, le");
      return false;
    }
    const auto kv = *n.begin();
    auto op = kOps.find(kv.first.Scalar());
    if (op == kOps.end()) return false;
    t->op = op->second;
    return Number(kv.second, path + "." + kv.first.Scalar(), &t->value);
  }

  // The exit side must point the other way from the enter side, with the band between them;
  // otherwise the trigger could be asked to enter and exit at once.
  void CheckBand(const YAML::Node& n, const std::string& path, const router::TriggerSpec& t) {
    const bool enter_up = t.enter.op == Op::kGt || t.enter.op == Op::kGe;
    const bool exit_up = t.exit.op == Op::kGt || t.exit.op == Op::kGe;
    if (enter_up == exit_up) {
      Error(n["exit"], path + ".exit",
            enter_up ? "enter tests gt/ge, so exit must test lt/le"
                     : "enter tests lt/le, so exit must test gt/ge");
    } else if (enter_up ? t.exit.value > t.enter.value : t.exit.value < t.enter.value) {
      Error(n["exit"], path + ".exit",
            absl::StrCat("the exit threshold ", t.exit.value, enter_up ? " is above" : " is below",
                         " the enter threshold ", t.enter.value,
                         "; hysteresis needs the band between them"));
    }
  }

  // What classify entries and rules share: a unique `name`, an optional `when`, and first-match
  // order, in which an entry after one without `when` (a catch-all) can never match.
  void ParseOrderedEntry(const YAML::Node& n, const std::string& path, const Policy* p,
                         std::set<std::string>* names, std::string* catch_all, std::string* name,
                         router::Condition* when) {
    if (!n["name"]) {
      Error(n, path + ".name", "required key is missing");
    } else if (String(n["name"], path + ".name", name) && !names->insert(*name).second) {
      Error(n["name"], path + ".name", "duplicate name");
    }
    if (!catch_all->empty()) {
      Error(n, path,
            absl::StrCat("can never match: '", *catch_all, "' before it matches everything"));
    }
    if (n["when"]) {
      rules_.ParseCondition(n["when"], path + ".when", p, when);
    } else if (catch_all->empty()) {
      // Only a missing `when` matches everything (a `when` with errors is not a catch-all).
      *catch_all = *name;
    }
  }

  void ParseClassify(const YAML::Node& node, Policy* p) {
    if (!node.IsSequence()) {
      Error(node, "classify", "expected a list");
      return;
    }
    if (!WithinRuleLimit(node, "classify")) return;
    std::set<std::string> names;
    std::string catch_all;
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string path = absl::StrCat("classify[", i, "]");
      const YAML::Node& n = node[i];
      if (!Map(n, path, {"name", "when", "class"})) continue;
      router::ClassRule cr;
      ParseOrderedEntry(n, path, p, &names, &catch_all, &cr.name, &cr.when);
      if (!n["class"]) {
        Error(n, path + ".class", "required key is missing");
      } else if (String(n["class"], path + ".class", &cr.request_class) &&
                 !classes_.contains(cr.request_class)) {
        Error(n["class"], path + ".class", absl::StrCat("unknown class '", cr.request_class, "'"));
      }
      p->classify.push_back(std::move(cr));
    }
  }

  void ParseRules(const YAML::Node& node, Policy* p) {
    if (!node.IsSequence() || node.size() == 0) {
      Error(node, "rules", "expected a non-empty list of rules");
      return;
    }
    if (!WithinRuleLimit(node, "rules")) return;
    std::set<std::string> names;
    std::string catch_all;
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string path = absl::StrCat("rules[", i, "]");
      const YAML::Node& n = node[i];
      if (!Map(n, path, {"name", "when", "action"})) continue;
      router::Rule rule;
      ParseOrderedEntry(n, path, p, &names, &catch_all, &rule.name, &rule.when);
      if (!n["action"])
        Error(n, path + ".action", "required key is missing");
      else
        rules_.ParseAction(n["action"], path + ".action", p, &rule.action);
      p->rules.push_back(std::move(rule));
    }
    if (catch_all.empty()) {
      Error(node, "rules",
            "the last rule must have no `when` so that every request gets a decision");
    }
  }

  bool WithinRuleLimit(const YAML::Node& list, const std::string& path) {
    if (list.size() <= static_cast<size_t>(limits_.max_rules)) return true;
    Error(list, path,
          absl::StrCat(list.size(), " entries, more than ", limits_.max_rules,
                       " (--max_policy_rules)"));
    return false;
  }

  const PolicyLimits& limits_;
  std::set<std::string> classes_;
  // Conditions and actions; also checks the models signals name.
  RuleParser rules_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const router::Policy>> ParsePolicy(const std::string& text,
                                                                  const std::string& file,
                                                                  std::vector<PolicyError>* errors,
                                                                  const PolicyLimits& limits) {
  const size_t before = errors->size();
  YAML::Node root;
  if (text.size() > static_cast<uint64_t>(std::max<int64_t>(limits.max_file_bytes, 0))) {
    errors->push_back(
        {file, 1, 1, "",
         absl::StrCat("larger than ", limits.max_file_bytes, " bytes (--max_policy_bytes)")});
  } else {
    root = LoadYaml(text, file, errors, limits.max_yaml_nodes, "--max_policy_yaml_nodes");
  }
  std::shared_ptr<const router::Policy> policy;
  if (errors->size() == before) policy = Parser(file, errors, limits).Parse(root, text);
  if (errors->size() != before || policy == nullptr) {
    std::vector<std::string> lines;
    for (size_t i = before; i < errors->size(); ++i) lines.push_back((*errors)[i].ToString());
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }
  return policy;
}

absl::StatusOr<std::shared_ptr<const router::Policy>> LoadPolicyFile(
    const std::string& path, std::vector<PolicyError>* errors, const PolicyLimits& limits) {
  auto text = ReadFileToString(path, limits.max_file_bytes, "--max_policy_bytes");
  if (!text.ok()) return text.status();
  return ParsePolicy(*text, path, errors, limits);
}

}  // namespace tandem::policies
