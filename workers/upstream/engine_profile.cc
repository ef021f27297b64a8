#include "workers/upstream/engine_profile.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/file.h"
#include "workers/upstream/builtin_profiles.h"
#include "yaml-cpp/yaml.h"

namespace tandem::workers::upstream {
namespace {

constexpr int64_t kMaxProfileBytes = 1 << 20;

absl::Status FieldError(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("engine profile: ", field, ": ", why));
}

absl::StatusOr<std::string> Text(const YAML::Node& node, absl::string_view field, bool required) {
  if (!node) {
    if (required) return FieldError(field, "missing");
    return std::string();
  }
  if (!node.IsScalar()) return FieldError(field, "must be a string");
  return node.as<std::string>();
}

// A JSON object written as a string; an empty string is null (the engine cannot do it).
absl::StatusOr<nlohmann::json> JsonFragment(const YAML::Node& node, absl::string_view field) {
  absl::StatusOr<std::string> text = Text(node, field, /*required=*/true);
  if (!text.ok()) return text.status();
  if (text->empty()) return nlohmann::json();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return FieldError(field, "must be a JSON object written as a string, or ''");
  return j;
}

absl::StatusOr<std::vector<std::string>> Names(const YAML::Node& node, absl::string_view field) {
  std::vector<std::string> out;
  if (!node) return out;
  if (!node.IsSequence()) return FieldError(field, "must be a list of names");
  for (const YAML::Node& n : node) {
    if (!n.IsScalar() || n.as<std::string>().empty()) {
      return FieldError(field, "names must be non-empty strings");
    }
    out.push_back(n.as<std::string>());
  }
  return out;
}

absl::Status Parse(const YAML::Node& root, EngineProfile* p) {
  if (!root.IsMap()) return FieldError("(top)", "must be a mapping");
  absl::StatusOr<std::string> s = Text(root["name"], "name", true);
  if (!s.ok()) return s.status();
  p->name = *s;
  const YAML::Node ep = root["endpoints"];
  for (auto [key, out, required] :
       {std::tuple{"chat", &p->chat_path, true}, std::tuple{"models", &p->models_path, true},
        std::tuple{"health", &p->health_path, true},
        std::tuple{"metrics", &p->metrics_path, false}}) {
    s = Text(ep[key], absl::StrCat("endpoints.", key), required);
    if (!s.ok()) return s.status();
    if (required && (s->empty() || (*s)[0] != '/')) {
      return FieldError(absl::StrCat("endpoints.", key), "must be a path starting with '/'");
    }
    *out = *s;
  }
  if (const YAML::Node st = root["readiness"]["starting_statuses"]; st) {
    if (!st.IsSequence()) return FieldError("readiness.starting_statuses", "must be a list");
    for (const YAML::Node& n : st) p->starting_statuses.push_back(n.as<int>());
  }
  const YAML::Node r = root["reasoning"];
  absl::StatusOr<std::vector<std::string>> names = Names(r["fields"], "reasoning.fields");
  if (!names.ok()) return names.status();
  p->reasoning_fields = *names;
  for (auto [key, out] : {std::pair{"on", &p->thinking_on}, std::pair{"off", &p->thinking_off}}) {
    absl::StatusOr<nlohmann::json> j = JsonFragment(r[key], absl::StrCat("reasoning.", key));
    if (!j.ok()) return j.status();
    *out = *j;
  }
  s = Text(r["budget"], "reasoning.budget", true);
  if (!s.ok()) return s.status();
  p->budget_template = *s;
  if (!p->budget_template.empty() && p->Budget(1).is_null()) {
    return FieldError("reasoning.budget", "must be a JSON object with $BUDGET, or ''");
  }
  for (auto [key, out] :
       {std::pair{"continuation", &p->continuation}, std::pair{"request", &p->request_extra}}) {
    absl::StatusOr<nlohmann::json> j = JsonFragment(root[key], key);
    if (!j.ok()) return j.status();
    *out = *j;
  }
  const YAML::Node m = root["metrics"];
  for (auto [key, out] :
       {std::pair{"waiting", &p->waiting_metrics}, std::pair{"running", &p->running_metrics},
        std::pair{"kv_cache_usage", &p->kv_cache_usage_metrics},
        std::pair{"prompt_tokens_total", &p->prompt_tokens_metrics},
        std::pair{"generation_tokens_total", &p->generation_tokens_metrics}}) {
    names = Names(m[key], absl::StrCat("metrics.", key));
    if (!names.ok()) return names.status();
    *out = *names;
  }
  return absl::OkStatus();
}

}  // namespace

nlohmann::json EngineProfile::Budget(int tokens) const {
  if (budget_template.empty()) return nlohmann::json();
  const std::string text =
      absl::StrReplaceAll(budget_template, {{"$BUDGET", absl::StrCat(tokens)}});
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json();
}

absl::StatusOr<EngineProfile> ParseEngineProfile(absl::string_view yaml_text) {
  EngineProfile p;
  try {
    absl::Status s = Parse(YAML::Load(std::string(yaml_text)), &p);
    if (!s.ok()) return s;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("engine profile: ", e.what()));
  }
  return p;
}

absl::StatusOr<EngineProfile> LoadEngineProfile(const std::string& name_or_path) {
  const bool is_path =
      name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".yaml") == 0);
  if (is_path) {
    absl::StatusOr<std::string> text = ReadFileToString(name_or_path, kMaxProfileBytes, "");
    if (!text.ok()) return text.status();
    absl::StatusOr<EngineProfile> p = ParseEngineProfile(*text);
    if (!p.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(name_or_path, ": ", p.status().message()));
    }
    return p;
  }
  for (const BuiltinProfile& b : BuiltinProfiles()) {
    if (b.name == name_or_path) return ParseEngineProfile(b.yaml);
  }
  return absl::NotFoundError(absl::StrCat("unknown engine profile '", name_or_path, "' (shipped: ",
                                          absl::StrJoin(BuiltinProfileNames(), ", "),
                                          "; or a path to a profile .yaml)"));
}

std::vector<std::string> BuiltinProfileNames() {
  std::vector<std::string> names;
  for (const BuiltinProfile& b : BuiltinProfiles()) names.emplace_back(b.name);
  return names;
}

}  // namespace tandem::workers::upstream
