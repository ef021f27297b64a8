#include "tools/bench/markdown.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tandem::bench {

std::string Fmt(double v) {
  if (v == 0) return "0";
  if (std::abs(v) >= 100) return absl::StrFormat("%.0f", v);
  if (std::abs(v) >= 10) return absl::StrFormat("%.1f", v);
  if (std::abs(v) >= 1) return absl::StrFormat("%.2f", v);
  return absl::StrFormat("%.3f", v);
}

std::string CodesText(const RunResult& r) {
  std::vector<std::string> parts;
  for (const auto& [code, n] : r.codes) parts.push_back(absl::StrCat(code, "=", n));
  return absl::StrJoin(parts, " ");
}

std::string CpuText(const RunResult& r) {
  if (r.cpu_seconds.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [label, seconds] : r.cpu_seconds) {
    parts.push_back(absl::StrCat(label, " ", Fmt(r.CpuMicrosPerRequest(label))));
  }
  return absl::StrJoin(parts, ", ");
}

std::string LoadText(const RunSpec& s) {
  return s.rate > 0 ? absl::StrCat(Fmt(s.rate), "/s ", s.poisson ? "poisson" : "fixed")
                    : absl::StrCat("c=", s.concurrency);
}

std::string MarkdownTable(const std::vector<RunResult>& results) {
  std::string out =
      "| series | api | prompt | load | ok | req/s | tok/s | e2e p50 | p90 | p99 | p99.9 (ms) | "
      "TTFT p50 | p99 (ms) | TPOT p50 (ms) | gap p50 | p99 (ms) | CPU us/req | codes |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const RunResult& r : results) {
    const bool stream = r.ttft_ms.count > 0;
    absl::StrAppend(
        &out, "| ", r.spec.label, " | ", ApiName(r.spec.api), " | ", r.spec.prompt, " | ",
        LoadText(r.spec), " | ", r.ok, " | ", Fmt(r.RequestsPerSecond()), " | ",
        Fmt(r.TokensPerSecond()), " | ", Fmt(r.e2e_ms.p50), " | ", Fmt(r.e2e_ms.p90), " | ",
        Fmt(r.e2e_ms.p99), " | ", Fmt(r.e2e_ms.p999), " | ", stream ? Fmt(r.ttft_ms.p50) : "-",
        " | ", stream ? Fmt(r.ttft_ms.p99) : "-", " | ", r.tpot_ms.count ? Fmt(r.tpot_ms.p50) : "-",
        " | ", r.gap_ms.count ? Fmt(r.gap_ms.p50) : "-", " | ",
        r.gap_ms.count ? Fmt(r.gap_ms.p99) : "-", " | ", CpuText(r), " | ", CodesText(r), " |\n");
  }
  return out;
}

}  // namespace tandem::bench
