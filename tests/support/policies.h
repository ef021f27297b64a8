#pragma once

// Routing policies (policies/README.md's YAML) that several integration tests start gateways with.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::testing {

// One model, qwen, that every request goes to.
inline constexpr char kQwenOnlyPolicy[] = R"(schema: 1
version: test
models: {qwen: {}}
classes: [accuracy_critical]
default_class: accuracy_critical
rules:
  - name: rest
    action: {route: qwen}
)";

// A policy `version` over qwen (with vision) and nemotron whose requests are accuracy_critical
// unless their objective hint is latency (then latency_critical), with `rules` (YAML list items,
// each line indented two spaces) after its "rules:" line.
inline std::string TwoClassPolicy(const std::string& version, const std::string& rules) {
  return absl::StrCat("schema: 1\nversion: ", version, R"(
models: {qwen: {vision: true}, nemotron: {}}
classes: [accuracy_critical, latency_critical]
default_class: accuracy_critical
classify:
  - name: wants_latency
    when: {objective: latency}
    class: latency_critical
rules:
)",
                      rules);
}

// A "billion laughs" policy: `header` (a policy up to its "rules:" line), then `rules` rules that
// all name one `when` through YAML aliases, each holding `width` x `width` x `width` `in` values
// (the text grows as width + rules, the tree the loader walks as width^3 * rules), then a last
// rule 'rest' that routes to `rest_model`. Every rule before it routes to qwen.
inline std::string AliasBombPolicy(const std::string& header, int width, int rules,
                                   const std::string& rest_model) {
  std::vector<std::string> values(width, "v");
  std::vector<std::string> fields;
  for (int i = 0; i < width; ++i) fields.push_back(absl::StrCat("label.k", i, ": *op"));
  fields[0] = absl::StrCat("label.k0: &op {in: [", absl::StrJoin(values, ", "), "]}");
  std::vector<std::string> alternatives(width, "*alt");
  alternatives[0] = absl::StrCat("&alt {", absl::StrJoin(fields, ", "), "}");
  std::string yaml = header + "rules:\n";
  for (int r = 0; r < rules; ++r) {
    absl::StrAppend(
        &yaml, "  - {name: r", r, ", when: ",
        r == 0 ? absl::StrCat("&when {any: [", absl::StrJoin(alternatives, ", "), "]}") : "*when",
        ", action: {route: qwen}}\n");
  }
  return absl::StrCat(yaml, "  - {name: rest, action: {route: ", rest_model, "}}\n");
}

}  // namespace tandem::testing
