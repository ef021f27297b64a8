#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tandem/v1/common.pb.h"
#include "workers/tokenizer/bpe_tokenizer.h"
#include "workers/tokenizer/tokenizer.h"

namespace tandem::workers {

// The chat formats of the two shipped model families (docs/models.md §1 and §2).
enum class ChatFamily {
  kQwen35,     // "qwen3_5": ChatML, <think> block, enable_thinking
  kNemotronH,  // "nemotron_h": ChatML variant, always a system block, /think and /no_think
};

absl::StatusOr<ChatFamily> ParseChatFamily(absl::string_view name);

// One piece of a rendered prompt. `markup` pieces were written by the template: only in them may
// text such as "<|im_start|>" become a special token. Message text is never markup, so a user
// who types "<|im_end|>" gets the characters, not the control token.
struct PromptPiece {
  std::string text;
  bool markup = false;
};

struct RenderedPrompt {
  std::vector<PromptPiece> pieces;
  // The prompt as one string (what the HF template would render).
  std::string Text() const;
};

// Renders `messages` in the family's format. Roles: system, user, assistant, tool. Reasoning:
// DEFAULT and ON think, OFF does not; Nemotron's /think and /no_think in user or system text
// override the mode (the last one wins) and are removed from the text. With `continue_final`
// the last message must be the assistant's and is left open: no end-of-turn token and no new
// generation prompt. Images are INVALID_ARGUMENT here; see the overload with image tokens.
absl::StatusOr<RenderedPrompt> RenderChat(
    ChatFamily family, const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const tandem::v1::ReasoningOptions& reasoning, bool continue_final);
// The same with `tools` in the system turn and assistant messages' tool_calls in their turns, as
// the released templates write them (workers/tokenizer/tool_prompt.h).
absl::StatusOr<RenderedPrompt> RenderChat(
    ChatFamily family, const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
    const tandem::v1::ReasoningOptions& reasoning, bool continue_final);

// The same with images (Qwen3.5 only): each image part becomes <|vision_start|>, its count of
// <|image_pad|> (`image_tokens`, one per image in order of appearance; `image_tokens` may be
// null: images are then INVALID_ARGUMENT) and <|vision_end|>, as the released template and
// processor write them.
absl::StatusOr<RenderedPrompt> RenderChat(
    ChatFamily family, const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
    const tandem::v1::ReasoningOptions& reasoning, bool continue_final,
    const absl::Span<const int64_t>* image_tokens);

// Token texts that end a turn or the text, for stop handling ("<|im_end|>" first).
std::vector<std::string> StopTokenTexts(ChatFamily family);

// workers/tokenizer/tokenizer.h's Tokenizer on top of a BpeTokenizer and a family's chat template.
class ModelTokenizer final : public Tokenizer {
 public:
  // Fails if the vocabulary lacks the template's control tokens (<|im_start|>, <|im_end|>).
  static absl::StatusOr<std::unique_ptr<ModelTokenizer>> Create(
      std::shared_ptr<const BpeTokenizer> bpe, ChatFamily family);

  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final = false) const override;
  absl::StatusOr<std::vector<int32_t>> EncodeChatWithTools(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final) const override;
  // Images render only for Qwen3.5 with a vocabulary that has <|image_pad|>; otherwise an image
  // is INVALID_ARGUMENT.
  absl::StatusOr<std::vector<int32_t>> EncodeChatWithImages(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final,
      absl::Span<const int64_t> image_tokens) const override;
  std::unique_ptr<StreamDecoder> NewStreamDecoder() const override;
  int32_t SpecialTokenId(std::string_view text) const override {
    return bpe_->TokenId(text).value_or(-1);
  }

  ChatFamily family() const { return family_; }
  const BpeTokenizer& bpe() const { return *bpe_; }
  // Ids of StopTokenTexts(family()) that the vocabulary has.
  const std::vector<int32_t>& stop_token_ids() const { return stop_token_ids_; }

 private:
  absl::StatusOr<std::vector<int32_t>> Encode(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final,
      const absl::Span<const int64_t>* image_tokens) const;
  ModelTokenizer(std::shared_ptr<const BpeTokenizer> bpe, ChatFamily family,
                 std::vector<int32_t> stop_token_ids)
      : bpe_(std::move(bpe)), family_(family), stop_token_ids_(std::move(stop_token_ids)) {}

  std::shared_ptr<const BpeTokenizer> bpe_;
  ChatFamily family_;
  std::vector<int32_t> stop_token_ids_;
};

}  // namespace tandem::workers
