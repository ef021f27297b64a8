#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "common/http_server.h"

namespace tandem {
namespace http_internal {

// The JSON body of an answer of the server's own (a refusal), OpenAI's error shape.
std::string ErrorJson(absl::string_view message);

// Whether a handler's header may be sent as it is: a token name, a value without CR, LF or NUL,
// and not one of the framing headers the server writes itself.
bool SendableHeader(absl::string_view name, absl::string_view value);

// How an answer's body is delimited.
enum class Framing { kLength, kChunked, kUntilClose, kNone };

// The status line and headers of an answer: `length` is its Content-Length (kLength);
// `keep_alive` false adds Connection: close, and true to an HTTP/1.0 client (`http10`)
// Connection: keep-alive.
std::string HeadBytes(const HttpResponse& r, Framing framing, size_t length, bool keep_alive,
                      bool http10);

// Whether the handler's answer asks to close the connection after it.
bool SaysClose(const HttpResponse& r);

}  // namespace http_internal
}  // namespace tandem
