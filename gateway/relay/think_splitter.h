#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace tandem::gateway {

// Splits a thinking model's answer, as it streams, into its reasoning (the text before
// "</think>": both shipped chat templates open the think block in the prompt, so the answer
// starts inside it) and its content (after, less the blank lines the templates put there). A
// request that does not think is all content. An answer that ends before "</think>" (cut off by
// max_tokens, or a model that never closed it) is all reasoning, as it would be streamed.
class ThinkSplitter {
 public:
  explicit ThinkSplitter(bool thinking) : thinking_(thinking), content_started_(!thinking) {}

  // Appends what `text` adds to `reasoning` and `content`. A possible start of "</think>" at its
  // end is held back until the next call (or Flush) says whether it is the tag.
  void Feed(absl::string_view text, std::string* reasoning, std::string* content);
  // The end of the answer: whatever was held back.
  void Flush(std::string* reasoning, std::string* content);

 private:
  void AppendContent(absl::string_view text, std::string* content);

  bool thinking_;
  bool content_started_;  // no blank lines to strip: no think block, or content seen
  std::string held_;      // a suffix of the reasoning that "</think>" starts with
};

}  // namespace tandem::gateway
