#include "policies/policy_cases.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "router/policy_router.h"
#include "router/request_features.h"

namespace tandem::policies {
namespace {

struct Problems {
  std::string file;
  std::vector<std::string> lines;
  void Add(const YAML::Node& at, const std::string& path, const std::string& message) {
    lines.push_back(absl::StrCat(file, ":", at.Mark().line + 1, ":", at.Mark().column + 1, ": ",
                                 path, ": ", message));
  }
};

bool KnownKeys(const YAML::Node& n, const std::string& path, const std::set<std::string>& allowed,
               Problems* problems) {
  if (!n.IsMap()) {
    problems->Add(n, path, "expected a map");
    return false;
  }
  for (const auto& kv : n) {
    if (!allowed.contains(kv.first.Scalar())) {
      problems->Add(kv.first, path + "." + kv.first.Scalar(),
                    absl::StrCat("unknown key; expected one of: ", absl::StrJoin(allowed, ", ")));
    }
  }
  return true;
}

// Builds the request a case describes.
tandem::v1::GenerateRequest BuildRequest(const YAML::Node& r) {
  tandem::v1::GenerateRequest req;
  if (r["system"]) {
    auto* m = req.add_messages();
    m->set_role("system");
    m->add_content()->set_text(r["system"].Scalar());
  }
  std::string text = r["text"] ? r["text"].Scalar() : "hello";
  if (r["prompt_tokens"]) {
    // ~4 ASCII bytes per estimated token.
    const int64_t want = r["prompt_tokens"].as<int64_t>(0);
    while (static_cast<int64_t>(text.size()) < want * 4) text += " lorem ipsum dolor sit amet";
  }
  const int turns = r["turns"] ? r["turns"].as<int>(1) : 1;
  for (int t = 0; t < turns; ++t) {
    if (t > 0) {
      auto* a = req.add_messages();
      a->set_role("assistant");
      a->add_content()->set_text("ok");
    }
    auto* u = req.add_messages();
    u->set_role("user");
    u->add_content()->set_text(text);
  }
  const int images = r["images"] ? r["images"].as<int>(0) : 0;
  for (int i = 0; i < images; ++i) {
    auto* img = req.mutable_messages(req.messages_size() - 1)->add_content()->mutable_image();
    img->set_data("image");
    img->set_mime_type("image/png");
  }
  const int tools = r["tools"] ? r["tools"].as<int>(0) : 0;
  for (int i = 0; i < tools; ++i) req.add_tools()->set_name(absl::StrCat("tool_", i));
  // An agent loop after the user's task: each step a tool call and its result.
  const int steps = r["agent_steps"] ? r["agent_steps"].as<int>(0) : 0;
  for (int i = 0; i < steps; ++i) {
    auto* call = req.add_messages();
    call->set_role("assistant");
    auto* tc = call->add_tool_calls();
    tc->set_id(absl::StrCat("call_", i));
    tc->set_name("tool_0");
    tc->set_arguments_json("{}");
    auto* result = req.add_messages();
    result->set_role("tool");
    result->set_tool_call_id(tc->id());
    result->add_content()->set_text("ok");
  }
  auto* h = req.mutable_hints();
  if (r["objective"]) {
    const std::string o = r["objective"].Scalar();
    h->set_objective(o == "accuracy"  ? tandem::v1::OBJECTIVE_ACCURACY
                     : o == "latency" ? tandem::v1::OBJECTIVE_LATENCY
                                      : tandem::v1::OBJECTIVE_UNSPECIFIED);
  }
  if (r["model"]) h->set_model(r["model"].Scalar());
  if (r["thinking_budget"]) {
    h->mutable_reasoning()->set_thinking_budget_tokens(r["thinking_budget"].as<int32_t>(0));
  }
  if (r["reasoning"]) {
    const std::string m = r["reasoning"].Scalar();
    h->mutable_reasoning()->set_mode(m == "on"    ? tandem::v1::REASONING_MODE_ON
                                     : m == "off" ? tandem::v1::REASONING_MODE_OFF
                                                  : tandem::v1::REASONING_MODE_UNSPECIFIED);
  }
  if (r["max_tokens"]) req.mutable_sampling()->set_max_tokens(r["max_tokens"].as<int32_t>(1));
  if (r["labels"] && r["labels"].IsMap()) {
    for (const auto& kv : r["labels"])
      (*req.mutable_labels())[kv.first.Scalar()] = kv.second.Scalar();
  }
  if (r["request_id"]) req.set_request_id(r["request_id"].Scalar());
  return req;
}

CaseResult RunCase(const router::Policy& policy, const YAML::Node& c, const std::string& name) {
  CaseResult result;
  result.name = name;
  const YAML::Node r = c["request"] ? c["request"] : YAML::Node(YAML::NodeType::Map);
  auto p = std::make_shared<router::Policy>(policy);
  // Case values stand in for live ones: static signals take the value, live signals and
  // triggers get it through the snapshot the router reads.
  router::SignalSnapshot signals;
  if (r["signals"] && r["signals"].IsMap()) {
    for (const auto& kv : r["signals"]) {
      const double v = kv.second.as<double>(0);
      auto it = p->signals.find(kv.first.Scalar());
      if (it != p->signals.end() && it->second.source == router::SignalSource::kStatic) {
        it->second.static_value = v;
      } else {
        signals.values[kv.first.Scalar()] = v;
      }
    }
  }
  if (r["triggers"] && r["triggers"].IsMap()) {
    for (const auto& kv : r["triggers"]) {
      signals.triggers[kv.first.Scalar()] = kv.second.Scalar() == "on";
    }
  }
  const tandem::v1::GenerateRequest req = BuildRequest(r);
  router::RequestFeatures f = router::ExtractFeatures(req);
  // The tenant the case's caller authenticates as; a `tenant` label stays only a label.
  if (r["tenant"]) f.tenant = r["tenant"].Scalar();
  // The session's state as the gateway would find it (its token or table).
  if (const YAML::Node s = r["session"]; s && s.IsMap()) {
    f.session_id = "case";
    if (s["model"]) f.session_model = s["model"].Scalar();
    f.session_turn = s["turn"] ? s["turn"].as<int64_t>(1) : (f.session_model.empty() ? 1 : 2);
  }
  f.split_key = std::hash<std::string>{}(req.request_id());
  const router::PolicyRouter router(p);
  auto d = router.Route(f, signals);
  const YAML::Node e = c["expect"];
  std::vector<std::string> wrong;
  if (e["error"]) {
    const std::string want = e["error"].Scalar();
    const std::string got = d.ok() ? "OK" : absl::StatusCodeToString(d.status().code());
    // absl spells codes like "INVALID_ARGUMENT", as gRPC does.
    if (got != want) wrong.push_back(absl::StrCat("error ", want, " expected, got ", got));
  } else if (!d.ok()) {
    wrong.push_back(absl::StrCat("decision failed: ", d.status().ToString()));
  } else {
    for (const auto& [key, got] : {std::pair<const char*, std::string>{"model", d->model},
                                   {"class", d->request_class},
                                   {"rule", d->rule},
                                   {"shed", d->shed ? "true" : "false"},
                                   {"reasoning", router::ReasoningModeName(d->reasoning)},
                                   {"thinking_budget", absl::StrCat(d->thinking_budget)}}) {
      if (e[key] && e[key].Scalar() != got) {
        wrong.push_back(absl::StrCat(key, " ", e[key].Scalar(), " expected, got ", got));
      }
    }
  }
  result.passed = wrong.empty();
  result.detail =
      result.passed ? (d.ok() ? absl::StrCat("model=", d->model, " class=", d->request_class,
                                             " rule=", d->rule,
                                             " reasoning=", router::ReasoningModeName(d->reasoning),
                                             " thinking_budget=", d->thinking_budget)
                              : d.status().ToString())
                    : absl::StrCat(absl::StrJoin(wrong, "; "),
                                   d.ok() ? absl::StrCat(" (reason: ", d->reason, ")") : "");
  return result;
}

}  // namespace

absl::StatusOr<std::vector<CaseResult>> RunPolicyCases(const router::Policy& policy,
                                                       const std::string& cases_path) {
  // Far above any real table of cases; bounded so that a path such as /dev/zero is refused.
  constexpr int64_t kMaxCasesBytes = int64_t{64} << 20;
  auto text = ReadFileToString(cases_path, kMaxCasesBytes, "");
  if (!text.ok()) return text.status();
  YAML::Node root;
  Problems problems{cases_path, {}};
  // yaml-cpp reports syntax and conversion errors by throwing; caught here, its call site.
  try {
    root = YAML::Load(*text);
    if (!KnownKeys(root, "(top)", {"cases"}, &problems) || !root["cases"] ||
        !root["cases"].IsSequence() || root["cases"].size() == 0) {
      if (problems.lines.empty()) problems.Add(root, "cases", "expected a non-empty list");
    } else {
      const YAML::Node cases = root["cases"];
      for (size_t i = 0; i < cases.size(); ++i) {
        const std::string path = absl::StrCat("cases[", i, "]");
        if (!KnownKeys(cases[i], path, {"name", "request", "expect"}, &problems)) continue;
        if (!cases[i]["name"] || !cases[i]["expect"]) {
          problems.Add(cases[i], path, "name and expect are required");
          continue;
        }
        if (const YAML::Node r = cases[i]["request"]) {
          if (KnownKeys(r, path + ".request",
                        {"text", "system", "prompt_tokens", "turns", "images", "tools",
                         "agent_steps", "objective", "model", "reasoning", "thinking_budget",
                         "max_tokens", "labels", "tenant", "session", "request_id", "signals",
                         "triggers"},
                        &problems)) {
            // Bounds keep a typo from building an enormous request.
            for (const auto& [key, lo, hi] :
                 {std::tuple<const char*, int64_t, int64_t>{"turns", 1, 1000},
                  {"images", 0, 16},
                  {"tools", 0, 128},
                  {"agent_steps", 0, 100},
                  {"prompt_tokens", 0, 1000000},
                  {"max_tokens", 1, 1000000},
                  {"thinking_budget", 0, 1 << 30}}) {
              if (!r[key]) continue;
              const int64_t v = r[key].as<int64_t>(lo - 1);
              if (v < lo || v > hi) {
                problems.Add(r[key], path + ".request." + key,
                             absl::StrCat("expected an integer in [", lo, ", ", hi, "]"));
              }
            }
          }
        }
        KnownKeys(cases[i]["expect"], path + ".expect",
                  {"model", "class", "rule", "shed", "error", "reasoning", "thinking_budget"},
                  &problems);
      }
      if (problems.lines.empty()) {
        std::vector<CaseResult> results;
        for (size_t i = 0; i < cases.size(); ++i) {
          results.push_back(RunCase(policy, cases[i], cases[i]["name"].Scalar()));
        }
        return results;
      }
    }
  } catch (const YAML::Exception& e) {
    problems.lines.push_back(
        absl::StrCat(cases_path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  return absl::InvalidArgumentError(absl::StrJoin(problems.lines, "\n"));
}

}  // namespace tandem::policies
