#include "common/json_text.h"

#include "absl/strings/str_format.h"

namespace tandem {

std::string QuoteForJson(absl::string_view text) {
  std::string out;
  AppendJsonString(text, &out);
  return out;
}

void AppendJsonString(absl::string_view text, std::string* out) {
  out->reserve(out->size() + text.size() + 2);
  out->push_back('"');
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      *out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

}  // namespace tandem
