#include "router/second_opinion.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace tandem::router {
namespace {

// What each of the usual classes means, for the model; other classes are shown by name.
std::string Describe(const std::string& c) {
  if (c == "accuracy_critical") {
    return "needs knowledge, reasoning, mathematics, code or a plan of several steps";
  }
  if (c == "latency_critical") {
    return "chit-chat, a quick command or lookup, labelling or extracting from given text, or a "
           "step inside an agent loop";
  }
  return c;
}

}  // namespace

SecondOpinionQuestion SecondOpinionPrompt(const std::vector<std::string>& classes,
                                          std::string_view text) {
  SecondOpinionQuestion q;
  q.system = "You sort requests for an LLM gateway. Reply with one letter only.\n";
  for (size_t i = 0; i < classes.size() && i < 26; ++i) {
    q.system += static_cast<char>('A' + i);
    q.system += ": " + classes[i] + " - " + Describe(classes[i]) + "\n";
  }
  // Cut at a UTF-8 character boundary.
  size_t n = std::min(text.size(), kSecondOpinionTextBytes);
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  q.user = "Request:\n";
  q.user.append(text.data(), n);
  q.user += "\n\nLetter:";
  return q;
}

std::string SecondOpinionClass(const std::vector<std::string>& classes, std::string_view answer) {
  std::string_view a = answer;
  while (!a.empty() && absl::ascii_isspace(static_cast<unsigned char>(a.front())))
    a.remove_prefix(1);
  for (const std::string& c : classes) {
    if (a.size() < c.size()) continue;
    bool same = true;
    for (size_t i = 0; i < c.size() && same; ++i) {
      same = absl::ascii_tolower(static_cast<unsigned char>(a[i])) ==
             absl::ascii_tolower(static_cast<unsigned char>(c[i]));
    }
    if (same) return c;
  }
  if (a.empty()) return "";
  const char letter = absl::ascii_toupper(static_cast<unsigned char>(a[0]));
  // "A", "A.", "A:" or "A " - not the first letter of a word ("Accuracy", "Because").
  if (a.size() > 1 && absl::ascii_isalnum(static_cast<unsigned char>(a[1]))) return "";
  const size_t i = static_cast<size_t>(letter - 'A');
  return letter >= 'A' && i < classes.size() ? classes[i] : "";
}

}  // namespace tandem::router
