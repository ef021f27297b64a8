#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tandem/v1/common.pb.h"
#include "workers/upstream/engine_profile.h"

namespace tandem::workers::upstream {

// Turns an engine's chat-completion stream (the data of each SSE event, or one whole
// non-streamed response) into the text a native worker would have produced, so everything
// above the worker (think splitting, tool-call parsing, failover's continuation) works
// unchanged: reasoning streams as the inside of the think block the chat template opened and is
// closed by "</think>" before the answer; tool calls come back in the models' XML form
// (<tool_call><function=NAME><parameter=P>VALUE</parameter>...), written once each is complete.
class ChatStreamDecoder {
 public:
  struct Piece {
    std::string text;
    // Generated tokens `text` stands for: one per engine chunk that carried text (engines
    // stream a token per chunk); the usage at the end corrects the total.
    int32_t tokens = 0;
  };

  // `thinking`: the request thinks (its reasoning mode is not OFF), so the answer starts inside
  // the think block.
  ChatStreamDecoder(const EngineProfile& profile, bool thinking);

  // One event's data ("[DONE]" included). INTERNAL for data that is not a chat-completion
  // chunk or an error object the engine sent (with its message).
  absl::Status Feed(absl::string_view data, Piece* out);
  // The stream ended (after [DONE], or the connection closed): what is left to write. An
  // answer without a finish reason was cut short, and one the engine aborted ("abort",
  // "error") is not whole: INTERNAL.
  absl::Status Finish(Piece* out);

  bool done() const { return done_; }
  tandem::v1::FinishReason finish_reason() const { return finish_reason_; }
  // From the engine's usage; 0 when it sent none.
  int32_t prompt_tokens() const { return prompt_tokens_; }
  // The engine's count when it sent usage, else the chunks counted.
  int32_t completion_tokens() const {
    return usage_completion_tokens_ > 0 ? usage_completion_tokens_ : counted_tokens_;
  }

 private:
  struct PendingCall {
    std::string name;
    std::string arguments;
  };
  void Reasoning(absl::string_view text, Piece* out);
  void Content(absl::string_view text, Piece* out);
  void CloseThink(Piece* out);
  absl::Status Choice(const void* choice_json, Piece* out);
  void WriteCalls(Piece* out);

  const EngineProfile& profile_;
  const bool thinking_;
  bool think_closed_;
  bool strip_open_tag_;  // raw text may open with the template's "<think>" (no reasoning parser)
  bool reasoning_ended_with_newline_ = false;
  std::map<int, PendingCall> calls_;
  bool done_ = false;
  bool saw_finish_ = false;
  std::string aborted_;  // the finish reason of an answer the engine gave up on
  tandem::v1::FinishReason finish_reason_ = tandem::v1::FINISH_REASON_UNSPECIFIED;
  int32_t prompt_tokens_ = 0;
  int32_t usage_completion_tokens_ = 0;
  int32_t counted_tokens_ = 0;
};

}  // namespace tandem::workers::upstream
