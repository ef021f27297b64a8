#include "policies/policy_replay.h"

#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "router/decision_record.h"
#include "router/policy_router.h"

namespace tandem::policies {

absl::StatusOr<ReplayReport> ReplayDecisionLog(const std::string& log_path,
                                               const router::Policy& old_policy,
                                               const router::Policy& new_policy) {
  std::ifstream in(log_path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read decision log ", log_path));
  const router::PolicyRouter old_router(std::make_shared<router::Policy>(old_policy));
  const router::PolicyRouter new_router(std::make_shared<router::Policy>(new_policy));
  ReplayReport report;
  std::string line;
  int line_number = 0;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // logs from newer gateways still replay
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty()) continue;
    tandem::v1::DecisionRecord record;
    if (!google::protobuf::util::JsonStringToMessage(line, &record, options).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(log_path, ":", line_number, ": not a tandem.v1.DecisionRecord"));
    }
    const router::RequestFeatures f = router::FeaturesFromRecord(record);
    auto a = old_router.Route(f);
    auto b = new_router.Route(f);
    ++report.total;
    if (!a.ok()) ++report.old_errors;
    if (!b.ok()) ++report.new_errors;
    const std::string am = a.ok() ? a->model : "(error)";
    const std::string bm = b.ok() ? b->model : "(error)";
    const std::string ac = a.ok() ? a->request_class : "(error)";
    const std::string bc = b.ok() ? b->request_class : "(error)";
    ++report.old_models[am];
    ++report.new_models[bm];
    if (am != bm || ac != bc) {
      ++report.changed;
      if (am != bm) ++report.model_moves[{am, bm}];
      if (ac != bc) ++report.class_moves[{ac, bc}];
    }
  }
  return report;
}

std::string ReplayReport::ToText(const std::string& old_version,
                                 const std::string& new_version) const {
  std::string out = absl::StrFormat(
      "%d recorded decisions replayed: %d change (%.1f%%) from %s to %s\n", total, changed,
      total > 0 ? 100.0 * static_cast<double>(changed) / static_cast<double>(total) : 0.0,
      old_version, new_version);
  std::map<std::string, bool> models;
  for (const auto& [m, n] : old_models) models[m] = true;
  for (const auto& [m, n] : new_models) models[m] = true;
  absl::StrAppend(&out, "\ntraffic share   old        new\n");
  for (const auto& entry : models) {
    // A named copy: clang 14 cannot capture structured bindings in lambdas.
    const std::string& m = entry.first;
    const auto get = [&m](const std::map<std::string, int64_t>& c) {
      auto it = c.find(m);
      return it == c.end() ? int64_t{0} : it->second;
    };
    absl::StrAppend(&out,
                    absl::StrFormat("  %-12s  %-9d  %d\n", m, get(old_models), get(new_models)));
  }
  if (!model_moves.empty()) absl::StrAppend(&out, "\nmodel changes\n");
  for (const auto& [move, n] : model_moves) {
    absl::StrAppend(&out, absl::StrFormat("  %s -> %s: %d\n", move.first, move.second, n));
  }
  if (!class_moves.empty()) absl::StrAppend(&out, "\nclass changes\n");
  for (const auto& [move, n] : class_moves) {
    absl::StrAppend(&out, absl::StrFormat("  %s -> %s: %d\n", move.first, move.second, n));
  }
  if (old_errors + new_errors > 0) {
    absl::StrAppend(&out, absl::StrFormat("\nundecidable: %d under old, %d under new\n", old_errors,
                                          new_errors));
  }
  return out;
}

}  // namespace tandem::policies
