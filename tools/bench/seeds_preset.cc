#include "tools/bench/seeds_preset.h"

#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json_text.h"
#include "common/status_macros.h"
#include "tools/bench/json_report.h"
#include "tools/bench/markdown.h"

namespace tandem::bench {

SeedsPreset::SeedsPreset(const Runner& runner, const RunSpec& base, int iterations)
    : runner_(runner), base_(base), iterations_(std::max(1, iterations)) {
  base_.target = Target::kGateway;
  single_table_ = absl::StrCat(
      "\n### Single request (", iterations_,
      " iterations each, streaming)\n\n| model | prompt | e2e p50 (ms) | mean (ms) | TTFT p50 (ms) "
      "| TPOT p50 (ms) | tokens/s per request | codes |\n|---|---|---|---|---|---|---|---|\n");
  scaling_table_ = absl::StrCat(
      "\n### Concurrency (", base_.prompt, " prompt, ", iterations_,
      " rounds each)\n\n| model | concurrency | aggregate tokens/s | scaling efficiency | e2e p50 "
      "(ms) | p99 (ms) | TTFT p50 (ms) | codes |\n|---|---|---|---|---|---|---|---|\n");
}

absl::Status SeedsPreset::Run(const std::string& models_flag, const OutputFiles& out) {
  RETURN_IF_ERROR(runner_.WaitReady(Target::kGateway, base_.address));
  std::vector<std::string> models = absl::StrSplit(models_flag, ',', absl::SkipEmpty());
  for (const std::string& m : models) {
    RETURN_IF_ERROR(runner_.WaitReady(Target::kGateway, base_.address, m));
  }
  models.push_back("");  // the gateway's routing
  for (const std::string& model : models) {
    const std::string name = model.empty() ? "routed" : model;
    RunSpec m = base_;
    m.model = model;
    m.api = Api::kStream;
    m.rate = 0;
    runner_.Warmup(m);
    SingleRequests(m, name);
    Concurrency(m, name);
    std::cerr << "done " << name << "\n";
  }
  std::cout << single_table_ << scaling_table_ << "\n### All runs\n\n";
  std::vector<RunResult> concurrency_runs;
  for (const auto& r : all_) {
    if (r.spec.label.find("concurrency") != std::string::npos) concurrency_runs.push_back(r);
  }
  const std::string extra =
      absl::StrCat(",\n\"single_request\":[", absl::StrJoin(json_single_, ","),
                   "],\n\"concurrency\":[", absl::StrJoin(json_scaling_, ","), "]");
  std::cout << MarkdownTable(all_) << std::flush;
  return out.Write("seeds", extra, all_, concurrency_runs,
                   "tandem-bench seeds: latency against concurrency");
}

void SeedsPreset::SingleRequests(const RunSpec& m, const std::string& name) {
  for (const std::string prompt : {"short", "medium", "long"}) {
    RunSpec s = m;
    s.label = absl::StrCat(name, " single");
    s.prompt = prompt;
    s.concurrency = 1;
    s.requests = iterations_;
    RunResult r = runner_.RunOnce(s);
    const double per_request_tps =
        r.e2e_ms.mean > 0 && r.ok > 0 ? (r.completion_tokens / double(r.ok)) / (r.e2e_ms.mean / 1e3)
                                      : 0;
    absl::StrAppend(&single_table_, "| ", name, " | ", prompt, " | ", Fmt(r.e2e_ms.p50), " | ",
                    Fmt(r.e2e_ms.mean), " | ", Fmt(r.ttft_ms.p50), " | ", Fmt(r.tpot_ms.p50), " | ",
                    Fmt(per_request_tps), " | ", CodesText(r), " |\n");
    json_single_.push_back(
        absl::StrCat("{\"model\":", QuoteForJson(name), ",\"prompt\":", QuoteForJson(prompt),
                     ",\"e2e_ms_p50\":", JsonNumber(r.e2e_ms.p50), ",\"e2e_ms_mean\":",
                     JsonNumber(r.e2e_ms.mean), ",\"ttft_ms_p50\":", JsonNumber(r.ttft_ms.p50),
                     ",\"tpot_ms_p50\":", JsonNumber(r.tpot_ms.p50),
                     ",\"tokens_per_second_per_request\":", JsonNumber(per_request_tps), "}"));
    all_.push_back(std::move(r));
  }
}

void SeedsPreset::Concurrency(const RunSpec& m, const std::string& name) {
  double base_tps = 0;  // tokens/s at concurrency 1
  for (int c : {1, 2, 4, 8, 16}) {
    RunSpec s = m;
    s.label = absl::StrCat(name, " concurrency");
    s.concurrency = c;
    s.requests = c * iterations_;
    RunResult r = runner_.RunOnce(s);
    const double tps = r.TokensPerSecond();
    if (c == 1) base_tps = tps;
    const double efficiency = base_tps > 0 ? tps / (c * base_tps) : 0;
    absl::StrAppend(&scaling_table_, "| ", name, " | ", c, " | ", Fmt(tps), " | ",
                    absl::StrFormat("%.0f%%", efficiency * 100), " | ", Fmt(r.e2e_ms.p50), " | ",
                    Fmt(r.e2e_ms.p99), " | ", Fmt(r.ttft_ms.p50), " | ", CodesText(r), " |\n");
    json_scaling_.push_back(absl::StrCat("{\"model\":", QuoteForJson(name), ",\"concurrency\":", c,
                                         ",\"aggregate_tokens_per_second\":", JsonNumber(tps),
                                         ",\"scaling_efficiency\":", JsonNumber(efficiency),
                                         ",\"e2e_ms_p50\":", JsonNumber(r.e2e_ms.p50),
                                         ",\"e2e_ms_p99\":", JsonNumber(r.e2e_ms.p99), "}"));
    all_.push_back(std::move(r));
  }
}

}  // namespace tandem::bench
