#include "policies/yaml_reader.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace tandem::policies {

std::string PolicyError::ToString() const {
  return absl::StrCat(file, ":", line, ":", column, ": ", path.empty() ? "(top)" : path, ": ",
                      message);
}

YAML::Node LoadYaml(const std::string& text, const std::string& file,
                    std::vector<PolicyError>* errors) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    errors->push_back({file, e.mark.line + 1, e.mark.column + 1, "", e.msg});
    return YAML::Node();
  }
}

void YamlReader::Error(const YAML::Node& at, const std::string& path, const std::string& message) {
  const YAML::Mark m = at.Mark();
  errors_->push_back({file_, m.line + 1, m.column + 1, path, message});
}

bool YamlReader::Map(const YAML::Node& node, const std::string& path,
                     const std::set<std::string>& allowed) {
  if (!node.IsMap()) {
    Error(node, path, "expected a map");
    return false;
  }
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const std::string key_path = path.empty() ? key : absl::StrCat(path, ".", key);
    if (!seen.insert(key).second) Error(kv.first, key_path, "duplicate key");
    if (!allowed.empty() && !allowed.contains(key)) {
      Error(kv.first, key_path,
            absl::StrCat("unknown key; expected one of: ", absl::StrJoin(allowed, ", ")));
    }
  }
  return true;
}

bool YamlReader::FreeMap(const YAML::Node& node, const std::string& path) {
  return Map(node, path, {});
}

bool YamlReader::String(const YAML::Node& node, const std::string& path, std::string* out) {
  if (!node.IsScalar() || node.Scalar().empty()) {
    Error(node, path, "expected a non-empty string");
    return false;
  }
  *out = node.Scalar();
  return true;
}

bool YamlReader::Number(const YAML::Node& node, const std::string& path, double* out) {
  if (!node.IsScalar() || !YAML::convert<double>::decode(node, *out) || !std::isfinite(*out)) {
    Error(node, path, "expected a finite number");
    return false;
  }
  return true;
}

bool YamlReader::Integer(const YAML::Node& node, const std::string& path, int64_t lo, int64_t hi,
                         int64_t* out) {
  long long v = 0;
  if (!node.IsScalar() || !YAML::convert<long long>::decode(node, v)) {
    Error(node, path, "expected an integer");
    return false;
  }
  if (v < lo || v > hi) {
    Error(node, path, absl::StrCat(v, " is out of range [", lo, ", ", hi, "]"));
    return false;
  }
  *out = v;
  return true;
}

bool YamlReader::Duration(const YAML::Node& node, const std::string& path, double* seconds) {
  absl::Duration d;
  if (node.IsScalar() && YAML::convert<double>::decode(node, *seconds) && std::isfinite(*seconds) &&
      *seconds >= 0) {
    return true;
  }
  if (!node.IsScalar() || !absl::ParseDuration(node.Scalar(), &d) || d < absl::ZeroDuration() ||
      d == absl::InfiniteDuration()) {
    Error(node, path, "expected a duration such as 250ms, 2s or 1m (or a number of seconds)");
    return false;
  }
  *seconds = absl::ToDoubleSeconds(d);
  return true;
}

bool YamlReader::Bool(const YAML::Node& node, const std::string& path, bool* out) {
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, *out)) {
    Error(node, path, "expected true or false");
    return false;
  }
  return true;
}

}  // namespace tandem::policies
