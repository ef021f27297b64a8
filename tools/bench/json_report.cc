#include "tools/bench/json_report.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json_text.h"

namespace tandem::bench {
namespace {

std::string JsonPercentiles(const Percentiles& p) {
  return absl::StrCat("{\"count\":", p.count, ",\"mean\":", JsonNumber(p.mean),
                      ",\"p50\":", JsonNumber(p.p50), ",\"p90\":", JsonNumber(p.p90),
                      ",\"p99\":", JsonNumber(p.p99), ",\"p99_9\":", JsonNumber(p.p999),
                      ",\"max\":", JsonNumber(p.max), "}");
}

std::string JsonResult(const RunResult& r) {
  std::vector<std::string> codes, errors;
  for (const auto& [code, n] : r.codes) codes.push_back(absl::StrCat(QuoteForJson(code), ":", n));
  for (const auto& e : r.errors) errors.push_back(QuoteForJson(e));
  std::vector<std::string> cpu;
  for (const auto& [label, seconds] : r.cpu_seconds) {
    cpu.push_back(absl::StrCat(QuoteForJson(label), ":", JsonNumber(r.CpuMicrosPerRequest(label))));
  }
  const RunSpec& s = r.spec;
  return absl::StrCat(
      "{\"label\":", QuoteForJson(s.label), ",\"target\":", QuoteForJson(TargetName(s.target)),
      ",\"address\":", QuoteForJson(s.address), ",\"api\":", QuoteForJson(ApiName(s.api)),
      ",\"model\":", QuoteForJson(s.model), ",\"prompt\":", QuoteForJson(s.prompt),
      ",\"max_tokens\":", s.max_tokens, ",\"loop\":", QuoteForJson(s.rate > 0 ? "open" : "closed"),
      ",\"rate\":", JsonNumber(s.rate),
      ",\"arrival\":", QuoteForJson(s.rate > 0 ? (s.poisson ? "poisson" : "fixed") : ""),
      ",\"concurrency\":", s.rate > 0 ? 0 : s.concurrency,
      ",\"wall_seconds\":", JsonNumber(r.wall_seconds), ",\"issued\":", r.issued, ",\"ok\":", r.ok,
      ",\"completion_tokens\":", r.completion_tokens,
      ",\"requests_per_second\":", JsonNumber(r.RequestsPerSecond()),
      ",\"tokens_per_second\":", JsonNumber(r.TokensPerSecond()), ",\"codes\":{",
      absl::StrJoin(codes, ","), "},\"errors\":[", absl::StrJoin(errors, ","),
      "],\"e2e_ms\":", JsonPercentiles(r.e2e_ms), ",\"ttft_ms\":", JsonPercentiles(r.ttft_ms),
      ",\"tpot_ms\":", JsonPercentiles(r.tpot_ms), ",\"chunk_gap_ms\":", JsonPercentiles(r.gap_ms),
      ",\"cpu_us_per_request\":{", absl::StrJoin(cpu, ","), "}}");
}

}  // namespace

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

std::string JsonRuns(const std::vector<RunResult>& results) {
  std::vector<std::string> runs;
  for (const auto& r : results) runs.push_back(JsonResult(r));
  return absl::StrCat("[", absl::StrJoin(runs, ",\n  "), "]");
}

}  // namespace tandem::bench
