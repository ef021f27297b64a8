#include "tools/bench/plain_run.h"

#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/bench/markdown.h"

namespace tandem::bench {
namespace {

// The specs of the run: `base` alone, or one per entry of the sweep.
absl::StatusOr<std::vector<RunSpec>> Specs(const RunSpec& base, const PlainRunOptions& options) {
  if (!options.rates.empty() && !options.concurrencies.empty()) {
    return absl::InvalidArgumentError("--rates and --concurrencies are exclusive");
  }
  std::vector<RunSpec> specs;
  if (!options.rates.empty()) {
    ASSIGN_OR_RETURN(std::vector<double> list, ParseList("rates", options.rates));
    for (double r : list) {
      RunSpec s = base;
      s.rate = r;
      specs.push_back(s);
    }
  } else if (!options.concurrencies.empty()) {
    ASSIGN_OR_RETURN(std::vector<double> list, ParseList("concurrencies", options.concurrencies));
    for (double c : list) {
      RunSpec s = base;
      s.rate = 0;
      s.concurrency = static_cast<int>(c);
      specs.push_back(s);
    }
  } else {
    specs.push_back(base);
  }
  return specs;
}

}  // namespace

absl::Status RunPlain(const Runner& runner, const RunSpec& base, const PlainRunOptions& options,
                      const OutputFiles& out) {
  RETURN_IF_ERROR(runner.WaitReady(base.target, base.address, base.model));
  ASSIGN_OR_RETURN(const std::vector<RunSpec> specs, Specs(base, options));
  runner.Warmup(base);
  std::vector<RunResult> results;
  for (const RunSpec& s : specs) {
    results.push_back(runner.RunOnce(s));
    std::cerr << "done " << s.label << " " << LoadText(s) << ": " << results.back().ok << " ok, "
              << CodesText(results.back()) << "\n";
  }
  std::string extra;
  std::string text_report;
  if (options.text_check != nullptr) {
    const TextCheck::Summary t = options.text_check->Summarize();
    extra = TextCheck::Json(t);
    text_report = TextCheck::Text(t);
  }
  std::cout << MarkdownTable(results) << std::flush;
  RETURN_IF_ERROR(
      out.Write("", extra, results, results,
                absl::StrCat("tandem-bench: ", base.label, " ", base.prompt, " prompt")));
  std::cout << text_report << std::flush;
  if (!text_report.empty()) std::cerr << text_report;
  return absl::OkStatus();
}

}  // namespace tandem::bench
