#pragma once

// Prompt files and reference answers shared by tandem-worker-client (which streams answers from
// a worker and compares them) and tandem-kit-reference (which writes the CPU engine's answers).
// Both are JSON lines:
//   prompts:   {"id": "p1", "messages": [{"role": "user", "content": "..."}]}
//   reference: {"id": "p1", "text": "...", "tokens": [ids], "text_ends": [bytes of text after
//               each token], "margins": [top-1 minus top-2 logit of each token], "stopped": b}
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tandem/v1/chat.pb.h"

namespace tandem::tools {

struct Prompt {
  std::string id;
  google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage> messages;
};

struct ReferenceAnswer {
  std::string id;
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<int64_t> text_ends;
  std::vector<double> margins;
  // The last token is a stop token: it has no text and the worker does not count it.
  bool stopped = false;

  int32_t CompletionTokens() const { return static_cast<int32_t>(tokens.size()) - stopped; }
};

absl::StatusOr<std::vector<Prompt>> ReadPrompts(const std::string& path);
absl::StatusOr<std::vector<ReferenceAnswer>> ReadReference(const std::string& path);
std::string ReferenceToJson(const ReferenceAnswer& answer);

// How a streamed answer relates to its reference. Greedy decoding in BF16 on a GPU may pick a
// different token than fp32 on the CPU where the CPU's top-2 margin is small, and everything
// after that differs; so an answer agrees when it equals the reference, or first differs at a
// token whose reference margin is below `margin`.
struct Comparison {
  enum Result { kExact, kLowMargin, kMismatch };
  Result result = kExact;
  // Reference tokens whose text the answer reproduces before the first difference.
  int32_t tokens_agree = 0;
  // The smallest reference margin among the tokens up to the first difference.
  double margin_at_divergence = 0;
  // Leading reference tokens with a margin of at least `margin`: those the answer must
  // reproduce (how much the comparison can see).
  int32_t clear_tokens = 0;
};

// `completion_tokens` is the worker's count; the answer's tokens themselves are not streamed, so
// the first difference is located by text: the divergent token is the first reference token
// whose text is not wholly inside the common prefix (an upper bound on the true position, so the
// margin test can only be lenient, never fail a correct engine).
Comparison Compare(const ReferenceAnswer& reference, const std::string& text,
                   int32_t completion_tokens, double margin);
const char* ResultName(Comparison::Result r);

}  // namespace tandem::tools
