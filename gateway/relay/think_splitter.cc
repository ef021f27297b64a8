#include "gateway/relay/think_splitter.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tandem::gateway {
namespace {

constexpr absl::string_view kThinkClose = "</think>";

// The length of the longest suffix of `text` that is a proper prefix of "</think>".
size_t HeldLength(absl::string_view text) {
  for (size_t n = std::min(text.size(), kThinkClose.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == kThinkClose.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

void ThinkSplitter::Feed(absl::string_view text, std::string* reasoning, std::string* content) {
  if (!thinking_) return AppendContent(text, content);
  std::string joined;
  if (!held_.empty()) {
    joined = absl::StrCat(held_, text);
    held_.clear();
    text = joined;
  }
  const size_t close = text.find(kThinkClose);
  if (close != absl::string_view::npos) {
    reasoning->append(text.data(), close);
    thinking_ = false;
    return AppendContent(text.substr(close + kThinkClose.size()), content);
  }
  const size_t held = HeldLength(text);
  reasoning->append(text.data(), text.size() - held);
  held_.assign(text.data() + text.size() - held, held);
}

void ThinkSplitter::Flush(std::string* reasoning, std::string* /*content*/) {
  reasoning->append(held_);
  held_.clear();
}

void ThinkSplitter::AppendContent(absl::string_view text, std::string* content) {
  if (!content_started_) {
    // The templates put "\n\n" after </think>; the answer starts at its first visible byte.
    text = absl::StripLeadingAsciiWhitespace(text);
    if (text.empty()) return;
    content_started_ = true;
  }
  content->append(text.data(), text.size());
}

}  // namespace tandem::gateway
