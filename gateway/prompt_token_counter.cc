#include "gateway/prompt_token_counter.h"

#include <cmath>

#include "router/request_features.h"

namespace tandem::gateway {

absl::StatusOr<std::unique_ptr<PromptTokenCounter>> PromptTokenCounter::Load(
    const std::string& tokenizer_json, double band) {
  absl::StatusOr<std::unique_ptr<workers::BpeTokenizer>> tokenizer =
      workers::BpeTokenizer::Load(tokenizer_json);
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<PromptTokenCounter>(new PromptTokenCounter(std::move(*tokenizer), band));
}

bool PromptTokenCounter::Near(int64_t estimate, const std::vector<int64_t>& thresholds) const {
  for (int64_t t : thresholds) {
    if (t > 0 && std::abs(static_cast<double>(estimate - t)) <= band_ * static_cast<double>(t)) {
      return true;
    }
  }
  return false;
}

int64_t PromptTokenCounter::Count(const tandem::v1::GenerateRequest& request) const {
  int64_t tokens = 0;
  for (const auto& message : request.messages()) {
    tokens += router::kPerMessageTemplateTokens;
    for (const auto& part : message.content()) {
      if (!part.has_image()) {
        tokens += static_cast<int64_t>(tokenizer_->Encode(part.text(), false).size());
      }
    }
  }
  return tokens;
}

}  // namespace tandem::gateway
