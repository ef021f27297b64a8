#pragma once

#include <string_view>

#include "workers/tokenizer.h"

namespace tandem::workers {

// Tokenizer of the synthetic engine (a test tool): prompts are split into word, number,
// punctuation and space pieces hashed to ids, with ChatML-sized template overhead; generated ids
// index a fixed word list that includes multi-byte UTF-8 words.
class SyntheticTokenizer final : public Tokenizer {
 public:
  // `tokens_per_image` of 0 means the model rejects images.
  explicit SyntheticTokenizer(int32_t tokens_per_image) : tokens_per_image_(tokens_per_image) {}

  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final = false) const override;
  std::unique_ptr<StreamDecoder> NewStreamDecoder() const override;

  // Number of generated-token ids that are words (ids >= this are not produced).
  static int32_t VocabularySize();
  static std::string_view Word(int32_t id);

  void EncodeText(std::string_view text, std::vector<int32_t>* out) const;

 private:
  const int32_t tokens_per_image_;
};

}  // namespace tandem::workers
