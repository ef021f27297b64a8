#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace tandem {

// Caller text made safe to put in a log line or an error message: in double quotes, with `"`,
// `\` and every byte outside printable ASCII written as a C escape (\n, \t, \xNN), so a newline
// cannot forge a log line and the result is always valid UTF-8 and one line. At most `max_bytes`
// of the input are shown; a longer input ends in `..." (N bytes)`, so a 4 MB field makes a line
// of about max_bytes, not 4 MB.
std::string QuoteForLog(absl::string_view text, size_t max_bytes = 64);

// How much of a status message a log line shows: messages quote caller text already cut to 64
// bytes, so this bounds only what Tandem itself wrote.
inline constexpr size_t kMaxLoggedMessageBytes = 1024;

// Whether `text` is safe as a gRPC metadata (HTTP/2 header) value and a log field as it is: 1 to
// `max_bytes` bytes of visible ASCII (0x21-0x7E, so no space, control byte or non-ASCII byte).
bool IsPlainToken(absl::string_view text, size_t max_bytes);

}  // namespace tandem
