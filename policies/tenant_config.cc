#include "policies/tenant_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/sha256.h"
#include "policies/yaml_reader.h"

namespace tandem::policies {
namespace {

constexpr char kKeyPrefix[] = "sha256:";

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_' || c == '-')) return false;
  }
  return true;
}

bool ValidHash(const std::string& hex) {
  if (hex.size() != 64) return false;
  for (char c : hex) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return false;
  }
  return true;
}

class TenantParser : public YamlReader {
 public:
  TenantParser(std::string file, std::vector<PolicyError>* errors,
               const std::set<std::string>& known_models, const TenantsFileLimits& limits)
      : YamlReader(std::move(file), errors), known_models_(known_models), limits_(limits) {}

  void Parse(const YAML::Node& root, TenantConfig* config) {
    if (!Map(root, "", {"tenants"})) return;
    const YAML::Node list = root["tenants"];
    if (!list || !list.IsSequence() || list.size() == 0) {
      Error(list ? list : root, "tenants", "expected a non-empty list of tenants");
      return;
    }
    if (list.size() > static_cast<size_t>(limits_.max_tenants)) {
      Error(list, "tenants",
            absl::StrCat(list.size(), " tenants, more than ", limits_.max_tenants,
                         " (--max_tenants)"));
      return;
    }
    std::set<std::string> names;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = absl::StrCat("tenants[", i, "]");
      TenantSpec t;
      if (!ParseTenant(list[i], path, &t)) continue;
      if (!names.insert(t.name).second) {
        Error(list[i]["name"], path + ".name", absl::StrCat("duplicate tenant '", t.name, "'"));
      }
      const size_t index = config->tenants.size();
      for (size_t k = 0; k < t.key_sha256.size(); ++k) {
        if (!config->by_key.emplace(t.key_sha256[k], index).second) {
          Error(list[i]["keys"][k], absl::StrCat(path, ".keys[", k, "]"),
                "this key already belongs to another tenant (or is listed twice)");
        }
      }
      config->tenants.push_back(std::move(t));
    }
  }

 private:
  bool ParseTenant(const YAML::Node& n, const std::string& path, TenantSpec* t) {
    if (!Map(n, path, {"name", "keys", "models", "admin", "priority", "limits"})) return false;
    bool ok = true;
    if (!n["name"]) {
      Error(n, path + ".name", "required key is missing");
      ok = false;
    } else if (String(n["name"], path + ".name", &t->name) && !ValidName(t->name)) {
      Error(n["name"], path + ".name", "expected 1-64 characters of [a-z0-9_-]");
      ok = false;
    } else if (t->name == "other") {
      Error(n["name"], path + ".name",
            "'other' is reserved: it is the metrics label of the tenants past --max_tenant_labels");
      ok = false;
    }
    if (const YAML::Node keys = n["keys"]) {
      if (!keys.IsSequence()) {
        Error(keys, path + ".keys", "expected a list of sha256:<64 hex digits>");
      } else if (keys.size() == 0 && t->name != "anonymous") {
        Error(keys, path + ".keys",
              "empty: no key could reach this tenant (only 'anonymous' has none)");
      } else {
        for (size_t k = 0; k < keys.size(); ++k) {
          const std::string kp = absl::StrCat(path, ".keys[", k, "]");
          std::string v;
          if (!String(keys[k], kp, &v)) continue;
          if (!absl::StartsWith(v, kKeyPrefix) || !ValidHash(v.substr(sizeof(kKeyPrefix) - 1))) {
            Error(keys[k], kp,
                  "expected sha256:<64 lowercase hex digits>, the SHA-256 of the key (`tandemctl "
                  "hash-key` prints it); keys themselves are never written in this file");
            continue;
          }
          t->key_sha256.push_back(v.substr(sizeof(kKeyPrefix) - 1));
        }
      }
    } else if (t->name != "anonymous") {
      Error(n, path + ".keys", "required key is missing (only 'anonymous' has no keys)");
    }
    if (const YAML::Node models = n["models"]) {
      if (!models.IsSequence() || models.size() == 0) {
        Error(models, path + ".models", "expected a non-empty list of model names");
      } else {
        for (size_t m = 0; m < models.size(); ++m) {
          const std::string mp = absl::StrCat(path, ".models[", m, "]");
          std::string v;
          if (!String(models[m], mp, &v)) continue;
          if (!known_models_.empty() && !known_models_.contains(v)) {
            Error(models[m], mp,
                  absl::StrCat("unknown model '", v,
                               "'; the gateway serves: ", absl::StrJoin(known_models_, ", ")));
          }
          t->models.insert(v);
        }
      }
    }
    if (n["admin"]) Bool(n["admin"], path + ".admin", &t->admin);
    if (n["priority"]) {
      int64_t p = 1;
      if (Integer(n["priority"], path + ".priority", 1, 100, &p))
        t->priority = static_cast<int32_t>(p);
    }
    if (const YAML::Node l = n["limits"]) ParseLimits(l, path + ".limits", &t->limits);
    return ok;
  }

  void ParseLimits(const YAML::Node& l, const std::string& path, TenantLimits* out) {
    if (!Map(l, path,
             {"requests_per_second", "burst_requests", "tokens_per_second", "burst_tokens",
              "max_concurrency", "max_thinking_tokens"})) {
      return;
    }
    for (const auto& [key, field] :
         {std::pair<const char*, double*>{"requests_per_second", &out->requests_per_second},
          {"burst_requests", &out->burst_requests},
          {"tokens_per_second", &out->tokens_per_second},
          {"burst_tokens", &out->burst_tokens}}) {
      if (!l[key]) continue;
      const std::string kp = absl::StrCat(path, ".", key);
      if (Number(l[key], kp, field) && *field < 0) Error(l[key], kp, "must be >= 0");
    }
    if (l["max_concurrency"]) {
      int64_t c = 0;
      if (Integer(l["max_concurrency"], path + ".max_concurrency", 0, 1 << 20, &c)) {
        out->max_concurrency = static_cast<int32_t>(c);
      }
    }
    if (l["max_thinking_tokens"]) {
      int64_t c = 0;
      if (Integer(l["max_thinking_tokens"], path + ".max_thinking_tokens", 0, 1 << 30, &c)) {
        out->max_thinking_tokens = static_cast<int32_t>(c);
      }
    }
  }

  const std::set<std::string>& known_models_;
  const TenantsFileLimits& limits_;
};

}  // namespace

const TenantSpec* TenantConfig::Anonymous() const {
  for (const TenantSpec& t : tenants) {
    if (t.name == "anonymous") return &t;
  }
  return nullptr;
}

absl::StatusOr<std::shared_ptr<const TenantConfig>> ParseTenantConfig(
    const std::string& text, const std::string& path, const std::set<std::string>& known_models,
    const TenantsFileLimits& limits) {
  std::vector<PolicyError> errors;
  YAML::Node root;
  if (text.size() > static_cast<uint64_t>(std::max<int64_t>(limits.max_file_bytes, 0))) {
    errors.push_back(
        {path, 1, 1, "",
         absl::StrCat("larger than ", limits.max_file_bytes, " bytes (--max_tenants_bytes)")});
  } else {
    root = LoadYaml(text, path, &errors, limits.max_yaml_nodes, "--max_tenants_yaml_nodes");
  }
  auto config = std::make_shared<TenantConfig>();
  config->sha256 = Sha256Hex(text);
  if (errors.empty()) TenantParser(path, &errors, known_models, limits).Parse(root, config.get());
  if (!errors.empty()) {
    std::vector<std::string> lines;
    for (const PolicyError& e : errors) lines.push_back(e.ToString());
    return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
  }
  return config;
}

absl::StatusOr<std::shared_ptr<const TenantConfig>> LoadTenantFile(
    const std::string& path, const std::set<std::string>& known_models,
    const TenantsFileLimits& limits) {
  auto text = ReadFileToString(path, limits.max_file_bytes, "--max_tenants_bytes");
  if (!text.ok()) return text.status();
  return ParseTenantConfig(*text, path, known_models, limits);
}

std::string TenantKeyEntry(const std::string& api_key) {
  return absl::StrCat(kKeyPrefix, Sha256Hex(api_key));
}

absl::Status CheckAnonymousIsNotAdmin(const TenantConfig& config, const std::string& path) {
  const TenantSpec* anonymous = config.Anonymous();
  if (anonymous == nullptr || !anonymous->admin) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      path,
      ": tenant 'anonymous' may not have admin: true (under --allow_unauthenticated every "
      "caller without a key would be an admin); give admin to a tenant with a key"));
}

}  // namespace tandem::policies
