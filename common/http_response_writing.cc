#include "common/http_response_writing.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/http_request_parsing.h"
#include "common/http_session_base.h"

namespace tandem {
namespace http_internal {
namespace {

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::StrContains("!#$%&'*+-.^_`|~", c);
}

}  // namespace

std::string ErrorJson(absl::string_view message) {
  // Messages are the server's own, without quotes or backslashes.
  return absl::StrCat(R"({"error":{"message":")", message,
                      R"(","type":"invalid_request_error","param":null,"code":null}})");
}

bool SendableHeader(absl::string_view name, absl::string_view value) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), IsTokenChar)) return false;
  if (value.find_first_of(absl::string_view("\r\n\0", 3)) != absl::string_view::npos) return false;
  return !absl::EqualsIgnoreCase(name, "content-length") &&
         !absl::EqualsIgnoreCase(name, "transfer-encoding") &&
         !absl::EqualsIgnoreCase(name, "connection");
}

std::string HeadBytes(const HttpResponse& r, Framing framing, size_t length, bool keep_alive,
                      bool http10) {
  const auto reason = http::obsolete_reason(static_cast<http::status>(r.status));
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ",
                                 absl::string_view(reason.data(), reason.size()), "\r\n");
  for (const auto& [k, v] : r.headers) {
    if (SendableHeader(k, v)) absl::StrAppend(&out, k, ": ", v, "\r\n");
  }
  if (r.status >= 200) {
    absl::StrAppend(&out, "Date: ",
                    absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", absl::Now(), absl::UTCTimeZone()),
                    "\r\n");
  }
  if (framing == Framing::kLength) absl::StrAppend(&out, "Content-Length: ", length, "\r\n");
  if (framing == Framing::kChunked) absl::StrAppend(&out, "Transfer-Encoding: chunked\r\n");
  if (!keep_alive) {
    absl::StrAppend(&out, "Connection: close\r\n");
  } else if (http10) {
    absl::StrAppend(&out, "Connection: keep-alive\r\n");
  }
  absl::StrAppend(&out, "\r\n");
  return out;
}

bool SaysClose(const HttpResponse& r) {
  for (const auto& [k, v] : r.headers) {
    if (!absl::EqualsIgnoreCase(k, "connection")) continue;
    const std::vector<std::string> tokens = ListTokens(v);
    if (std::find(tokens.begin(), tokens.end(), "close") != tokens.end()) return true;
  }
  return false;
}

}  // namespace http_internal
}  // namespace tandem
