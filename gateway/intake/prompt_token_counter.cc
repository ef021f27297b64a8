#include "gateway/intake/prompt_token_counter.h"

#include <cmath>

#include "router/request_features.h"
#include "workers/vision/image_decoder.h"
#include "workers/vision/image_preprocessor.h"

namespace tandem::gateway {

int64_t ImagePromptTokens(const tandem::v1::Image& image) {
  absl::StatusOr<workers::vision::ImageSize> size =
      workers::vision::ProbeImageSize(image.data(), image.mime_type());
  if (!size.ok()) return router::kUnknownImageTokens;
  // The released settings: the served Qwen3.5 checkpoints' preprocessor_config.json.
  static const workers::vision::PreprocessorConfig kReleased;
  absl::StatusOr<workers::vision::ImageGrid> grid =
      workers::vision::GridOf(size->height, size->width, kReleased);
  if (!grid.ok()) return router::kUnknownImageTokens;
  return grid->num_tokens + router::kImageMarkerTokens;
}

std::vector<int64_t> ImageTokenCounts(const tandem::v1::GenerateRequest& request) {
  std::vector<int64_t> counts;
  for (const auto& message : request.messages()) {
    for (const auto& part : message.content()) {
      if (part.has_image()) counts.push_back(ImagePromptTokens(part.image()));
    }
  }
  return counts;
}

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
      tokens += part.has_image()
                    ? ImagePromptTokens(part.image())
                    : static_cast<int64_t>(tokenizer_->Encode(part.text(), false).size());
    }
  }
  return tokens;
}

}  // namespace tandem::gateway
