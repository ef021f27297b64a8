#include "workers/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "common/utf8.h"

namespace tandem::workers {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
  for (const auto& s : stops_) hold_bytes_ = std::max(hold_bytes_, s.size() - 1);
}

std::string StopMatcher::Push(std::string_view text, bool* stopped) {
  *stopped = false;
  pending_.append(text);
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    *stopped = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  const size_t emit = pending_.size() > hold_bytes_ ? pending_.size() - hold_bytes_ : 0;
  const size_t safe = CompleteUtf8PrefixLength(std::string_view(pending_).substr(0, emit));
  std::string out = pending_.substr(0, safe);
  pending_.erase(0, safe);
  return out;
}

std::string StopMatcher::Flush() { return std::exchange(pending_, std::string()); }

}  // namespace tandem::workers
