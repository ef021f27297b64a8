#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tandem::policies {

// One problem found in a YAML file, with where it is.
struct PolicyError {
  std::string file;
  int line = 0;
  int column = 0;
  // e.g. "rules[2].action.split[0].weight".
  std::string path;
  std::string message;
  // "FILE:LINE:COL: PATH: MESSAGE"
  std::string ToString() const;
};

// Parses `text` as YAML. yaml-cpp reports syntax errors by throwing; this is the one place its
// exceptions are caught: a syntax error is appended to `errors` and the result is a null node.
//
// `max_nodes` bounds the tree as the loaders walk it: every scalar, sequence and map (keys
// included), and a node reached through an alias (*a) counted again at each use. yaml-cpp shares
// an anchored node between its aliases, so a small file of nested anchors ("billion laughs")
// stands for an exponentially larger tree; it is counted from the parser's events before any
// tree is built, and a document over the limit (or an alias inside the node it names) is one
// error naming `limit_name` (e.g. "--max_policy_yaml_nodes"), with a null node. So is a document
// nested deeper than kMaxYamlDepth maps and sequences, located at the line that goes past it.
// A key repeated in a map is an error at the repeat (YAML requires unique keys; yaml-cpp keeps
// both, which a loader would read inconsistently), with a null node.
inline constexpr int kMaxYamlDepth = 64;
YAML::Node LoadYaml(const std::string& text, const std::string& file,
                    std::vector<PolicyError>* errors, int64_t max_nodes,
                    absl::string_view limit_name);

// Typed reads of YAML nodes for the config loaders (policies, tenants). Each method checks the
// node, stores the value on success and otherwise appends an error located at the node, so a
// loader reports every mistake in a file, not just the first.
class YamlReader {
 public:
  YamlReader(std::string file, std::vector<PolicyError>* errors)
      : file_(std::move(file)), errors_(errors) {}

  void Error(const YAML::Node& at, const std::string& path, const std::string& message);
  // Checks that `node` is a map whose keys are all in `allowed` (LoadYaml has refused repeats).
  bool Map(const YAML::Node& node, const std::string& path, const std::set<std::string>& allowed);
  // Checks that `node` is a map (keys are free-form, e.g. model names).
  bool FreeMap(const YAML::Node& node, const std::string& path);
  bool String(const YAML::Node& node, const std::string& path, std::string* out);
  bool Number(const YAML::Node& node, const std::string& path, double* out);
  bool Integer(const YAML::Node& node, const std::string& path, int64_t lo, int64_t hi,
               int64_t* out);
  // A duration: a number of seconds, or a string such as 250ms, 2s, 1m. Must be >= 0.
  bool Duration(const YAML::Node& node, const std::string& path, double* seconds);
  bool Bool(const YAML::Node& node, const std::string& path, bool* out);

  const std::string& file() const { return file_; }

 private:
  const std::string file_;
  std::vector<PolicyError>* const errors_;
};

}  // namespace tandem::policies
