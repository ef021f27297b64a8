#include "tools/gpu_kit/answers.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace tandem::tools {
namespace {

using Json = nlohmann::json;

// Calls `f` on each non-empty line of `path` parsed as JSON.
template <typename F>
absl::Status ForEachJsonLine(const std::string& path, F f) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": not a JSON object"));
    }
    try {
      f(j);
    } catch (const std::exception& e) {  // nlohmann's type errors, and ours
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n, ": ", e.what()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Prompt>> ReadPrompts(const std::string& path) {
  std::vector<Prompt> out;
  absl::Status s = ForEachJsonLine(path, [&](const Json& j) {
    Prompt p;
    p.id = j.at("id").get<std::string>();
    for (const Json& m : j.at("messages")) {
      tandem::v1::ChatMessage* message = p.messages.Add();
      message->set_role(m.at("role").get<std::string>());
      message->add_content()->set_text(m.at("content").get<std::string>());
    }
    out.push_back(std::move(p));
  });
  if (!s.ok()) return s;
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no prompts"));
  return out;
}

absl::StatusOr<std::vector<ReferenceAnswer>> ReadReference(const std::string& path) {
  std::vector<ReferenceAnswer> out;
  absl::Status s = ForEachJsonLine(path, [&](const Json& j) {
    ReferenceAnswer a;
    a.id = j.at("id").get<std::string>();
    a.text = j.at("text").get<std::string>();
    a.tokens = j.at("tokens").get<std::vector<int32_t>>();
    a.text_ends = j.at("text_ends").get<std::vector<int64_t>>();
    a.margins = j.at("margins").get<std::vector<double>>();
    a.stopped = j.at("stopped").get<bool>();
    if (a.text_ends.size() != a.tokens.size() || a.margins.size() != a.tokens.size()) {
      throw std::runtime_error("tokens, text_ends and margins differ in length");
    }
    out.push_back(std::move(a));
  });
  if (!s.ok()) return s;
  return out;
}

std::string ReferenceToJson(const ReferenceAnswer& a) {
  return Json{{"id", a.id},           {"text", a.text},
              {"tokens", a.tokens},   {"text_ends", a.text_ends},
              {"margins", a.margins}, {"stopped", a.stopped}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

Comparison Compare(const ReferenceAnswer& ref, const std::string& text, int32_t completion_tokens,
                   double margin) {
  Comparison c;
  const int32_t n = static_cast<int32_t>(ref.tokens.size());
  while (c.clear_tokens < ref.CompletionTokens() && ref.margins[c.clear_tokens] >= margin) {
    ++c.clear_tokens;
  }
  if (text == ref.text && completion_tokens == ref.CompletionTokens()) {
    c.tokens_agree = ref.CompletionTokens();
    return c;
  }
  const size_t common =
      std::mismatch(text.begin(), text.end(), ref.text.begin(), ref.text.end()).first -
      text.begin();
  int32_t k = 0;
  while (k < n && ref.text_ends[k] <= static_cast<int64_t>(common)) ++k;
  // Same text but another token count (the difference is in tokens without text, e.g. the stop
  // token), or every reference token reproduced and then more: the last one decides.
  if (text == ref.text) k = std::min(k, std::min(completion_tokens, n));
  c.tokens_agree = k;
  const int32_t last = std::min(k, n - 1);
  c.margin_at_divergence = std::numeric_limits<double>::infinity();
  for (int32_t i = 0; i <= last; ++i) {
    c.margin_at_divergence = std::min(c.margin_at_divergence, ref.margins[i]);
  }
  c.result =
      n > 0 && c.margin_at_divergence < margin ? Comparison::kLowMargin : Comparison::kMismatch;
  return c;
}

const char* ResultName(Comparison::Result r) {
  switch (r) {
    case Comparison::kExact:
      return "exact";
    case Comparison::kLowMargin:
      return "low_margin";
    case Comparison::kMismatch:
      return "MISMATCH";
  }
  return "?";
}

}  // namespace tandem::tools
