#include "router/content_cues.h"

#include <array>
#include <cctype>
#include <string>

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

template <size_t N>
int Count(const std::string& text, const std::array<std::string_view, N>& phrases) {
  int n = 0;
  for (std::string_view p : phrases) {
    for (size_t at = text.find(p); at != std::string::npos; at = text.find(p, at + p.size())) ++n;
  }
  return n;
}

// "12 * 7", "3+4", "x = 2": a digit, optional spaces, an operator, optional spaces, a digit.
int ArithmeticCount(const std::string& t) {
  int n = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(t[i]))) continue;
    size_t j = i + 1;
    while (j < t.size() && t[j] == ' ') ++j;
    if (j >= t.size() ||
        (t[j] != '+' && t[j] != '*' && t[j] != '/' && t[j] != '^' && t[j] != '=')) {
      continue;
    }
    ++j;
    while (j < t.size() && t[j] == ' ') ++j;
    if (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) {
      ++n;
      i = j;
    }
  }
  return n;
}

}  // namespace

void ScanContentCues(std::string_view text, ContentCues* cues) {
  std::string lower(text.substr(0, kMaxCueScanBytes));
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  cues->code += Count(lower, kCode);
  cues->math += Count(lower, kMath) + ArithmeticCount(lower);
  cues->reasoning += Count(lower, kReasoning);
  cues->structured_output += Count(lower, kStructured);
}

}  // namespace tandem::router
