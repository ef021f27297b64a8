#include "router/content_cues.h"

#include <array>
#include <cctype>
#include <string>
#include <vector>

namespace tandem::router {
namespace {

// Phrases are lower case; the text is lowered once before matching.
constexpr std::array<std::string_view, 17> kCode = {"```",
                                                    "#include",
                                                    "def ",
                                                    "import ",
                                                    "function ",
                                                    "=>",
                                                    "};",
                                                    "std::",
                                                    "printf(",
                                                    "console.",
                                                    "self.",
                                                    "public static",
                                                    "</",
                                                    "traceback (most recent call last)",
                                                    "select * from",
                                                    "#!/",
                                                    "fn main"};
constexpr std::array<std::string_view, 14> kMath = {
    "solve",       "equation", "integral", "derivative", "calculate", "how many", "how much",
    "probability", "\\frac",   "sqrt",     "theorem",    "percent",   "average",  "sum of"};
constexpr std::array<std::string_view, 12> kReasoning = {
    "step by step",  "explain why", "why does", "prove",   "derive",    "reason about",
    "think through", "compare",     "analyze",  "analyse", "trade-off", "justify"};
constexpr std::array<std::string_view, 9> kStructured = {
    "json",         "yaml",           "schema",    "csv",
    "xml",          "markdown table", "key-value", "respond only with",
    "output format"};

// All phrases indexed by their first byte, so one pass over the text tests at each position only
// the few phrases that can start there, and of those (every phrase has two bytes or more) only the
// ones whose second byte follows: a whole comparison per candidate was most of the scan's time.
struct PhraseIndex {
  struct Entry {
    std::string_view phrase;
    char second;
    int ContentCues::*counter;
  };
  std::array<std::vector<Entry>, 256> by_first;

  PhraseIndex() {
    auto add = [&](const auto& phrases, int ContentCues::*counter) {
      for (std::string_view p : phrases) {
        by_first[static_cast<unsigned char>(p[0])].push_back({p, p[1], counter});
      }
    };
    add(kCode, &ContentCues::code);
    add(kMath, &ContentCues::math);
    add(kReasoning, &ContentCues::reasoning);
    add(kStructured, &ContentCues::structured_output);
  }
};

const PhraseIndex& Index() {
  static const PhraseIndex* index = new PhraseIndex();
  return *index;
}

// "12 * 7", "3+4", "x = 2": a digit, optional spaces, an operator, optional spaces, a digit.
int ArithmeticCount(const std::string& t) {
  int n = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] < '0' || t[i] > '9') continue;
    size_t j = i + 1;
    while (j < t.size() && t[j] == ' ') ++j;
    if (j >= t.size() ||
        (t[j] != '+' && t[j] != '*' && t[j] != '/' && t[j] != '^' && t[j] != '=')) {
      continue;
    }
    ++j;
    while (j < t.size() && t[j] == ' ') ++j;
    if (j < t.size() && t[j] >= '0' && t[j] <= '9') {
      ++n;
      i = j;
    }
  }
  return n;
}

}  // namespace

void ScanContentCues(std::string_view text, ContentCues* cues) {
  thread_local std::string lower;
  lower.assign(text.substr(0, kMaxCueScanBytes));
  // ASCII only, inline: std::tolower goes through the locale for every byte.
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + ('a' - 'A'));
  }
  const PhraseIndex& index = Index();
  const std::string_view t(lower);
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    for (const auto& e : index.by_first[static_cast<unsigned char>(t[i])]) {
      if (t[i + 1] == e.second && t.compare(i, e.phrase.size(), e.phrase) == 0) {
        ++(cues->*e.counter);
      }
    }
  }
  cues->math += ArithmeticCount(lower);
}

}  // namespace tandem::router
