#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tandem/v1/gateway.pb.h"
#include "workers/tokenizer/bpe_tokenizer.h"

namespace tandem::gateway {

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
  // estimate counts it). Images count nothing here, as in the estimate.
  int64_t Count(const tandem::v1::GenerateRequest& request) const;

 private:
  PromptTokenCounter(std::unique_ptr<workers::BpeTokenizer> tokenizer, double band)
      : tokenizer_(std::move(tokenizer)), band_(band) {}

  const std::unique_ptr<workers::BpeTokenizer> tokenizer_;
  const double band_;
};

}  // namespace tandem::gateway
