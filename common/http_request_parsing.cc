#include "common/http_request_parsing.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem {
namespace http_internal {
namespace {

// The path and query of an absolute-form target ("http://host:port/p?q" gives "/p?q" and the
// authority "host:port"); the origin form as it is. RFC 9112 section 3.2.
std::optional<Refusal> NormalizeTarget(absl::string_view method, std::string* target,
                                       std::string* authority) {
  if (absl::StartsWith(*target, "/")) return std::nullopt;
  if (method == "OPTIONS" && *target == "*") return std::nullopt;
  if (method == "CONNECT" && !target->empty()) return std::nullopt;  // the authority form
  const size_t scheme = absl::StartsWithIgnoreCase(*target, "http://")    ? 7
                        : absl::StartsWithIgnoreCase(*target, "https://") ? 8
                                                                          : 0;
  if (scheme > 0) {
    const absl::string_view rest = absl::string_view(*target).substr(scheme);
    const size_t end = std::min(rest.find_first_of("/?"), rest.size());
    *authority = std::string(rest.substr(0, end));
    if (authority->empty()) return Refusal{400, "the absolute request target has no host"};
    const absl::string_view path = rest.substr(end);
    std::string normalized;
    if (path.empty() || path.front() == '?') normalized = "/";
    absl::StrAppend(&normalized, path);
    *target = std::move(normalized);
    return std::nullopt;
  }
  return Refusal{400, "the request target must be a path (/...) or an absolute http(s) URI"};
}

}  // namespace

std::vector<std::string> ListTokens(absl::string_view value) {
  std::vector<std::string> out;
  for (absl::string_view t : absl::StrSplit(value, ',')) {
    t = absl::StripAsciiWhitespace(t);
    if (!t.empty()) out.push_back(absl::AsciiStrToLower(t));
  }
  return out;
}

std::optional<Refusal> CheckHead(const RequestParser& parser, HttpRequest* head) {
  const auto& m = parser.get();
  if (m.version() / 10 != 1) {
    return Refusal{505, "this server speaks HTTP/1.1 (and answers HTTP/1.0)"};
  }
  int hosts = 0, lengths = 0, encodings = 0;
  std::string coding_list;
  for (const auto& [k, v] : head->headers) {
    if (k == "host") ++hosts;
    if (k == "content-length") ++lengths;
    if (k == "transfer-encoding") {
      ++encodings;
      absl::StrAppend(&coding_list, coding_list.empty() ? "" : ",", v);
    }
  }
  if (m.version() == 11 && hosts != 1) {
    return Refusal{
        400, hosts == 0 ? "an HTTP/1.1 request needs a Host header" : "more than one Host header"};
  }
  if (hosts > 1) return Refusal{400, "more than one Host header"};
  std::string authority;
  if (auto r = NormalizeTarget(head->method, &head->target, &authority)) return r;
  if (!authority.empty()) {
    // The absolute form's authority is the request's host (section 3.2.2).
    bool replaced = false;
    for (auto& [k, v] : head->headers) {
      if (k == "host") v = authority, replaced = true;
    }
    if (!replaced) head->headers.emplace_back("host", authority);
  }
  if (encodings == 0) return std::nullopt;
  if (m.version() == 10) return Refusal{400, "Transfer-Encoding in an HTTP/1.0 request"};
  if (lengths > 0) return Refusal{400, "both Transfer-Encoding and Content-Length"};
  const std::vector<std::string> codings = ListTokens(coding_list);
  if (codings.empty() || codings.back() != "chunked") {
    return Refusal{400, "the final transfer coding must be chunked"};
  }
  if (std::count(codings.begin(), codings.end(), "chunked") > 1) {
    return Refusal{400, "chunked applied more than once"};
  }
  if (codings.size() > 1) {
    return Refusal{501, absl::StrCat("transfer coding '", codings.front(),
                                     "' is not supported (only chunked)")};
  }
  // Beast must read the body as chunked too, or the two would disagree on where it ends.
  if (!parser.chunked()) return Refusal{400, "malformed Transfer-Encoding"};
  return std::nullopt;
}

HttpRequest ToHead(const RequestParser& parser) {
  const auto& r = parser.get();
  HttpRequest out;
  out.method = std::string(r.method_string());
  out.target = std::string(r.target());
  out.version = static_cast<int>(r.version());
  for (const auto& f : r) {
    out.headers.emplace_back(
        absl::AsciiStrToLower(absl::string_view(f.name_string().data(), f.name_string().size())),
        std::string(f.value()));
  }
  return out;
}

Refusal RefusalFor(beast::error_code ec) {
  if (ec == http::error::body_limit) return {413, ""};
  if (ec == http::error::header_limit) return {431, ""};
  return {400, absl::StrCat("malformed HTTP request: ", ec.message())};
}

}  // namespace http_internal
}  // namespace tandem
