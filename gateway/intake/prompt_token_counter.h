#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tandem/v1/gateway.pb.h"
#include "workers/tokenizer/bpe_tokenizer.h"

namespace tandem::gateway {

// The prompt tokens one image takes in the vision model's (Qwen3.5's) prompt: the token grid of
// the size its header declares, at the released processor settings (vision::PreprocessorConfig:
// smart_resize to multiples of 32 within 65,536 to 16,777,216 pixels, one token per 32 x 32),
// plus router::kImageMarkerTokens; router::kUnknownImageTokens when the header cannot be read
// (a bad or unsupported image, which the worker refuses itself) or the size is refused (an
// aspect ratio over 200). Reads the header only (vision::ProbeImageSize), never decodes: no
// pixel buffer, and a cost that does not grow with the image's pixels.
int64_t ImagePromptTokens(const tandem::v1::Image& image);

// ImagePromptTokens of each image of `request`, in message order: router::ExtractFeatures'
// image_tokens.
std::vector<int64_t> ImageTokenCounts(const tandem::v1::GenerateRequest& request);

// Exact prompt token counts with a model's own tokenizer, for the requests whose estimate is near
// a threshold that decides something (a policy's prompt_tokens condition, --max_prompt_tokens, a
// tenant's token burst): the estimate errs by 15.5% on average and up to 152%, and a request on
// the wrong side of a threshold is routed or refused wrongly. Tokenizing costs far more than
// estimating, so only those requests pay for it. Thread-safe (immutable).
class PromptTokenCounter {
 public:
  // `tokenizer_json`: a Hugging Face tokenizer.json (--tokenizer). `band`: an estimate within
  // band x T of a threshold T is counted exactly (--exact_token_band).
  static absl::StatusOr<std::unique_ptr<PromptTokenCounter>> Load(const std::string& tokenizer_json,
                                                                  double band);

  // Whether `estimate` is near any of `thresholds` (0 and negative ones are ignored).
  bool Near(int64_t estimate, const std::vector<int64_t>& thresholds) const;

  // The prompt's tokens: every text part's, plus the chat template's per message (as the
  // estimate counts it), plus each image's ImagePromptTokens (the estimate's count: exact when
  // its header is read).
  int64_t Count(const tandem::v1::GenerateRequest& request) const;

 private:
  PromptTokenCounter(std::unique_ptr<workers::BpeTokenizer> tokenizer, double band)
      : tokenizer_(std::move(tokenizer)), band_(band) {}

  const std::unique_ptr<workers::BpeTokenizer> tokenizer_;
  const double band_;
};

}  // namespace tandem::gateway
