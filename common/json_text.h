#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace tandem {

// `text` as a JSON string literal: in double quotes, with `"`, `\` and newline escaped (\", \\,
// \n), the other control bytes (below 0x20) as \u00XX, and every other byte as it is, so UTF-8
// text stays readable. Unlike QuoteForLog (common/log_text.h) nothing is cut and no \xNN escape
// (which JSON has not) is written; the text is not checked for valid UTF-8.
std::string QuoteForJson(absl::string_view text);
// QuoteForJson appended to `out`, for writers that reuse one buffer.
void AppendJsonString(absl::string_view text, std::string* out);

}  // namespace tandem
