#include "workers/thinking_budget.h"

#include <utility>

namespace tandem::workers {

ThinkingMarkers ThinkingMarkers::Of(const Tokenizer& tokenizer) {
  ThinkingMarkers m;
  m.start = tokenizer.SpecialTokenId("<think>");
  if (const int32_t end = tokenizer.SpecialTokenId("</think>"); end >= 0) m.end.push_back(end);
  return m;
}

ThinkingBudget::ThinkingBudget(ThinkingMarkers markers, int32_t budget,
                               absl::Span<const int32_t> prompt)
    : markers_(std::move(markers)), budget_(budget) {
  recent_.reserve(markers_.end.size());
  for (const int32_t t : prompt) Observe(t, /*count=*/false);
}

int32_t ThinkingBudget::Next(int32_t sampled) {
  // Once forcing has begun it runs through the whole end sequence, even though the count no
  // longer says "spent" halfway (a multi-token end must not be cut).
  const bool spent =
      thinking_ && budget_ > 0 && !markers_.end.empty() && thinking_tokens_ >= budget_;
  int32_t token = sampled;
  if ((spent || forced_ > 0) && forced_ < markers_.end.size()) token = markers_.end[forced_++];
  Observe(token, /*count=*/true);
  return token;
}

void ThinkingBudget::Observe(int32_t token, bool count) {
  if (markers_.start >= 0 && token == markers_.start) {
    thinking_ = true;
    thinking_tokens_ = 0;
    forced_ = 0;
    recent_.clear();
    return;
  }
  if (const size_t n = markers_.end.size(); n > 0) {
    if (recent_.size() == n) recent_.erase(recent_.begin());
    recent_.push_back(token);
    if (recent_ == markers_.end) {
      thinking_ = false;
      forced_ = 0;
      recent_.clear();
      return;
    }
  }
  if (thinking_ && count) ++thinking_tokens_;
}

}  // namespace tandem::workers
