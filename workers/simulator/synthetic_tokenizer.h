#pragma once

#include <cstddef>
#include <string_view>

#include "workers/tokenizer/tokenizer.h"

namespace tandem::workers {

// Tokenizer of the synthetic engine (a test tool): prompts are split into word, number,
// punctuation and space pieces hashed to ids, with ChatML-sized template overhead; generated ids
// index a fixed word list that includes multi-byte UTF-8 words.
//
// Continuations (EncodeChat with `continue_final`): when the open assistant message is the
// simulator's own words (as a mid-stream failover passes on the partial answer: words joined by
// single spaces), the prompt is the one a fresh request with the earlier messages gets, then a
// resume marker, then one id per word of the partial answer. The engine then resumes the fresh
// answer's word stream after those words (ParseContinuation), and the decoder puts a space
// before the first new word, so the continued text equals the fresh answer. Any other open
// message is encoded as text, left open; it starts a word stream of its own.
class SyntheticTokenizer final : public Tokenizer {
 public:
  // What a prompt says about the answer it asks for.
  struct Continuation {
    // The leading prompt tokens that choose the answer's word stream (the whole prompt unless it
    // resumes the simulator's words).
    size_t stream_prefix = 0;
    // Words of the answer already generated: the stream resumes at this index.
    int32_t resume_at = 0;
    // The first generated word follows text that ends in a word: a space goes before it.
    bool leading_space = false;
  };

  // `tokens_per_image` of 0 means the model rejects images.
  explicit SyntheticTokenizer(int32_t tokens_per_image) : tokens_per_image_(tokens_per_image) {}

  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final = false) const override;
  // The simulator's prompt ignores the tools (its token counts are a measuring tool's, not a
  // model's), so tool requests run on it.
  absl::StatusOr<std::vector<int32_t>> EncodeChatWithTools(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final) const override {
    (void)tools;
    return EncodeChat(messages, reasoning, continue_final);
  }
  std::unique_ptr<StreamDecoder> NewStreamDecoder() const override;
  std::unique_ptr<StreamDecoder> NewStreamDecoderAfter(
      absl::Span<const int32_t> prompt) const override;

  // Number of generated-token ids that are words (ids >= this are not produced).
  static int32_t VocabularySize();
  static std::string_view Word(int32_t id);
  // The id of one of the simulator's words; -1 for any other text.
  static int32_t WordId(std::string_view word);
  // Reads a prompt made by EncodeChat.
  static Continuation ParseContinuation(absl::Span<const int32_t> prompt);

  void EncodeText(std::string_view text, std::vector<int32_t>* out) const;

 private:
  const int32_t tokens_per_image_;
};

}  // namespace tandem::workers
