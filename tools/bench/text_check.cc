#include "tools/bench/text_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_text.h"

namespace tandem::bench {

void TextCheck::Add(const std::string& key, const std::string& text,
                    const tandem::v1::Recovery& r) {
  absl::MutexLock lock(&mu_);
  Texts& t = texts_[key][text];
  if (r.failovers() > 0) {
    ++t.failovers;
  } else if (r.retries() > 0) {
    ++t.retries;
  } else {
    ++t.clean;
  }
  if (t.events.empty() && r.events_size() > 0) t.events = absl::StrJoin(r.events(), "; ");
}

TextCheck::Summary TextCheck::Summarize() const {
  absl::MutexLock lock(&mu_);
  Summary s;
  for (const auto& [key, texts] : texts_) {
    // The reference: the text most fault-free answers had.
    const std::string* reference = nullptr;
    int64_t best = 0;
    for (const auto& [text, t] : texts) {
      s.answers += t.clean + t.failovers + t.retries;
      if (t.clean > best) {
        best = t.clean;
        reference = &text;
      }
    }
    for (const auto& [text, t] : texts) {
      const int64_t n = t.clean + t.failovers + t.retries;
      if (reference == nullptr) {
        s.unreferenced += n;
        continue;
      }
      s.checked += n;
      s.failovers += t.failovers;
      s.retries += t.retries;
      if (text == *reference) continue;
      s.mismatches += n;
      s.failover_mismatches += t.failovers;
      if (s.examples.size() < 3) s.examples.push_back(Describe(key, *reference, text, t));
    }
  }
  return s;
}

std::string TextCheck::Json(const Summary& t) {
  std::vector<std::string> examples;
  for (const auto& e : t.examples) examples.push_back(QuoteForJson(e));
  return absl::StrCat(",\n\"text_check\":{\"text_answers\":", t.answers,
                      ",\"text_checked\":", t.checked, ",\"text_failovers_checked\":", t.failovers,
                      ",\"text_retries_checked\":", t.retries,
                      ",\"text_mismatches\":", t.mismatches,
                      ",\"text_failover_mismatches\":", t.failover_mismatches,
                      ",\"text_unreferenced\":", t.unreferenced, ",\"text_mismatch_examples\":[",
                      absl::StrJoin(examples, ","), "]}");
}

std::string TextCheck::Text(const Summary& t) {
  std::string text = absl::StrCat("text check: ", t.checked, " of ", t.answers,
                                  " OK answers compared with a fault-free reference (", t.failovers,
                                  " failed over, ", t.retries, " retried): ", t.mismatches,
                                  " mismatches (", t.failover_mismatches, " failed over); ",
                                  t.unreferenced, " without a reference\n");
  for (const auto& e : t.examples) absl::StrAppend(&text, "  mismatch: ", e, "\n");
  return text;
}

// Where two texts part, with some context on both sides (whole UTF-8 characters).
std::string TextCheck::Describe(const std::string& key, const std::string& want,
                                const std::string& got, const Texts& t) {
  size_t at = 0;
  while (at < want.size() && at < got.size() && want[at] == got[at]) ++at;
  const auto window = [at](const std::string& s) {
    size_t begin = at > 40 ? at - 40 : 0;
    size_t end = std::min(s.size(), at + 40);
    while (begin > 0 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
    while (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) ++end;
    return absl::StrCat(begin > 0 ? "..." : "", s.substr(begin, end - begin),
                        end < s.size() ? "..." : "");
  };
  return absl::StrCat(key, ": ", t.clean + t.failovers + t.retries, " answers (", t.failovers,
                      " failed over, ", t.retries, " retried) differ at byte ", at, ": want \"",
                      window(want), "\", got \"", window(got), "\"",
                      t.events.empty() ? "" : absl::StrCat("; recovery: ", t.events));
}

}  // namespace tandem::bench
