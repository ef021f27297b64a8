#include "gateway/http_front/cors_policy.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/log_text.h"

namespace tandem::gateway {
namespace {

// A preflight may be cached this long (seconds): browsers cap it at 2 h (Chromium) or 24 h.
constexpr absl::string_view kMaxAge = "600";
// Most request headers one preflight may ask for.
constexpr size_t kMaxRequestedHeaders = 64;

bool IsOrigin(absl::string_view o) {
  if (!absl::ConsumePrefix(&o, "https://") && !absl::ConsumePrefix(&o, "http://")) return false;
  if (o.empty() || o.size() > 253 + 6) return false;
  return std::all_of(o.begin(), o.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']';
  });
}

bool IsHeaderName(absl::string_view h) {
  return !h.empty() && h.size() <= 128 && std::all_of(h.begin(), h.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '-' || c == '_';
  });
}

}  // namespace

absl::StatusOr<CorsPolicy> CorsPolicy::Create(const std::vector<std::string>& origins) {
  CorsPolicy p;
  for (const std::string& o : origins) {
    if (o == "*") {
      p.any_ = true;
    } else if (IsOrigin(o)) {
      p.origins_.push_back(absl::AsciiStrToLower(o));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--http_cors_origins: ", QuoteForLog(o),
          " is not an origin; expected * or scheme://host[:port] (http or https, no path)"));
    }
  }
  return p;
}

bool CorsPolicy::Allows(absl::string_view origin) const {
  if (any_) return IsOrigin(origin) || origin == "null";
  return std::any_of(origins_.begin(), origins_.end(),
                     [&](const std::string& o) { return absl::EqualsIgnoreCase(o, origin); });
}

void CorsPolicy::AddPreflightHeaders(absl::string_view origin, absl::string_view methods,
                                     absl::string_view requested_headers, HttpHeaders* out) const {
  AddResponseHeaders(origin, out);
  out->emplace_back("access-control-allow-methods", std::string(methods));
  std::vector<absl::string_view> names =
      absl::StrSplit(requested_headers, ',', absl::SkipWhitespace());
  for (absl::string_view& n : names) n = absl::StripAsciiWhitespace(n);
  if (!names.empty() && names.size() <= kMaxRequestedHeaders &&
      std::all_of(names.begin(), names.end(), IsHeaderName)) {
    out->emplace_back("access-control-allow-headers", absl::StrJoin(names, ", "));
  }
  out->emplace_back("access-control-max-age", std::string(kMaxAge));
}

void CorsPolicy::AddResponseHeaders(absl::string_view origin, HttpHeaders* out) const {
  out->emplace_back("access-control-allow-origin", std::string(origin));
  // The answer differs by Origin: caches must not hand one origin's answer to another.
  out->emplace_back("vary", "Origin");
  out->emplace_back("access-control-expose-headers",
                    "x-tandem-request-id, x-tandem-model, x-tandem-class, x-tandem-rule, "
                    "x-tandem-reasoning, x-tandem-session-token, retry-after, retry-after-ms");
}

}  // namespace tandem::gateway
