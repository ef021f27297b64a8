#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "workers/tokenizer/tokenizer.h"

namespace tandem::workers {

// The tokens that open and close a thinking block in one vocabulary.
struct ThinkingMarkers {
  // "<think>"; -1 when the vocabulary has none.
  int32_t start = -1;
  // What closes a block and what a spent budget forces, in order ("</think>"); empty when the
  // vocabulary has none, and then no budget is ever enforced.
  std::vector<int32_t> end;

  // The markers of a tokenizer's special tokens "<think>" and "</think>".
  static ThinkingMarkers Of(const Tokenizer& tokenizer);
};

// Enforces one sequence's thinking-token budget (SequenceSpec::thinking_budget) on the tokens an
// engine samples. Every engine (CPU and CUDA) runs its sampled tokens through Next, so the rule
// lives in one place: once `budget` tokens have been generated inside a thinking block, the end
// markers are emitted in place of whatever was sampled, one per step, and the answer follows.
// Tokens of the prompt never count; a block the model closes itself ends as usual, and a new
// start marker opens a block with a fresh count. Not thread-safe; one per sequence.
class ThinkingBudget {
 public:
  // Inert: no markers, no budget.
  ThinkingBudget() = default;
  // `prompt` says whether generation starts inside a block: it does when the prompt's last
  // start marker has no end after it (a generation prompt "<|im_start|>assistant\n<think>\n").
  // `budget` 0 (or less) means no separate budget; the block is still tracked.
  ThinkingBudget(ThinkingMarkers markers, int32_t budget, absl::Span<const int32_t> prompt);

  // The token to emit for this step given the one sampled: `sampled`, or the next end marker
  // while the budget forces the end of the block. Advances the state by the returned token.
  int32_t Next(int32_t sampled);

  // Inside a thinking block after the last token seen.
  bool thinking() const { return thinking_; }
  // Tokens generated inside the current block (end markers excluded).
  int32_t thinking_tokens() const { return thinking_tokens_; }

 private:
  // Follows `token` through the block structure; `count` says whether it was generated.
  void Observe(int32_t token, bool count);

  ThinkingMarkers markers_;
  int32_t budget_ = 0;
  bool thinking_ = false;
  int32_t thinking_tokens_ = 0;
  // How many end markers have been forced so far (0 when not forcing).
  size_t forced_ = 0;
  // The last markers_.end.size() tokens seen, to recognise a multi-token end however it came.
  std::vector<int32_t> recent_;
};

}  // namespace tandem::workers
