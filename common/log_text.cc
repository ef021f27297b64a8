#include "common/log_text.h"

#include "absl/strings/str_cat.h"

namespace tandem {

std::string QuoteForLog(absl::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  const absl::string_view shown = text.substr(0, max_bytes);
  std::string out;
  out.reserve(shown.size() + 2);
  out.push_back('"');
  for (const unsigned char c : shown) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out.push_back(static_cast<char>(c));
        } else {
          out += "\\x";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xf]);
        }
    }
  }
  if (shown.size() < text.size()) {
    absl::StrAppend(&out, "...\" (", text.size(), " bytes)");
  } else {
    out.push_back('"');
  }
  return out;
}

bool IsPlainToken(absl::string_view text, size_t max_bytes) {
  if (text.empty() || text.size() > max_bytes) return false;
  for (const unsigned char c : text) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace tandem
