#include "tools/bench/run_spec.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem::bench {

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string TargetName(Target t) {
  return t == Target::kGateway ? "gateway" : t == Target::kWorker ? "worker" : "openai";
}
std::string ApiName(Api a) { return a == Api::kUnary ? "unary" : "stream"; }

absl::StatusOr<int> PromptWords(const std::string& size) {
  if (size == "short") return 16;
  if (size == "medium") return 128;
  if (size == "long") return 700;
  return absl::InvalidArgumentError(
      absl::StrCat("--prompt=", size, ": expected short, medium or long"));
}

// About one token per word for BPE tokenizers, and about one for the gateway's estimate
// (4 ASCII bytes per token): short common words, each with its space.
std::string PromptText(int words) {
  static const char* kWords[] = {"the", "cat", "sat", "on", "a",   "mat", "and", "we",
                                 "ran", "to",  "see", "it", "now", "far", "but", "all"};
  std::string text = "Summarize:";
  for (int i = 0; i < words - 1; ++i) {
    text += ' ';
    text += kWords[(i * 7 + i / 16) % 16];
  }
  return text;
}

absl::StatusOr<std::vector<double>> ParseList(const std::string& flag, const std::string& value) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", value, ": expected positive numbers separated by commas"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace tandem::bench
