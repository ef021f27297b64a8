#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tandem/v1/common.pb.h"

namespace tandem::workers {

// Turns generated token ids into text incrementally. Never returns a partial UTF-8 sequence:
// bytes of an unfinished character are held until a later token completes them.
class StreamDecoder {
 public:
  virtual ~StreamDecoder() = default;
  // Text that became complete with `token`; may be empty.
  virtual std::string Next(int32_t token) = 0;
  // Whatever is still held at the end of the sequence.
  virtual std::string Flush() = 0;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The model's prompt for a chat: template applied, generation prompt appended. With
  // `continue_final`, the last (assistant) message is left open so generation continues it.
  virtual absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final = false) const = 0;
  // The same with the tools the model may call, rendered as the model's chat template does. The
  // default serves a request without tools and refuses one with them.
  virtual absl::StatusOr<std::vector<int32_t>> EncodeChatWithTools(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final) const {
    if (!tools.empty()) {
      return absl::UnimplementedError("tools: this engine's tokenizer renders no tools");
    }
    return EncodeChat(messages, reasoning, continue_final);
  }
  // The same with images: `image_tokens` holds each image part's token count, in order of
  // appearance (the engine's image processor decides them). The default serves a request
  // without images and refuses one with them.
  virtual absl::StatusOr<std::vector<int32_t>> EncodeChatWithImages(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
      const google::protobuf::RepeatedPtrField<tandem::v1::Tool>& tools,
      const tandem::v1::ReasoningOptions& reasoning, bool continue_final,
      absl::Span<const int64_t> image_tokens) const {
    if (!image_tokens.empty()) {
      return absl::InvalidArgumentError("images: this engine's tokenizer renders no images");
    }
    return EncodeChatWithTools(messages, tools, reasoning, continue_final);
  }
  virtual std::unique_ptr<StreamDecoder> NewStreamDecoder() const = 0;
  // A decoder for the tokens generated after `prompt` (as EncodeChat made it). A continuation
  // (`continue_final`) may need one that joins its text to the partial answer's, e.g. with a
  // space; by default the same as NewStreamDecoder(), which suits tokenizers whose tokens carry
  // their own spacing (byte-level BPE).
  virtual std::unique_ptr<StreamDecoder> NewStreamDecoderAfter(
      absl::Span<const int32_t> prompt) const {
    (void)prompt;
    return NewStreamDecoder();
  }
  // The id of a special token such as "<think>" or "</think>"; -1 when the vocabulary has none.
  virtual int32_t SpecialTokenId(std::string_view text) const {
    (void)text;
    return -1;
  }
};

}  // namespace tandem::workers
