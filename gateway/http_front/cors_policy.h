#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/http_server.h"

namespace tandem::gateway {

// Which web origins may call the HTTP front from a browser (--http_cors_origins), and the CORS
// headers that say so (the Fetch standard's CORS protocol). Off unless origins are listed: a
// browser page on another origin then gets no CORS headers and cannot read the answers. Keys are
// sent in the Authorization header, never as cookies, so no Allow-Credentials is ever sent.
class CorsPolicy {
 public:
  // Off.
  CorsPolicy() = default;
  // `origins`: "*" (any origin) or each exactly scheme://host[:port] with http or https and
  // nothing after (as browsers send Origin). INVALID_ARGUMENT naming the first that is not.
  static absl::StatusOr<CorsPolicy> Create(const std::vector<std::string>& origins);

  bool enabled() const { return any_ || !origins_.empty(); }
  // Whether a page from `origin` (an Origin header) may call the front; compared without regard
  // to case.
  bool Allows(absl::string_view origin) const;

  // The headers of an allowed preflight (OPTIONS with Origin): the origin, the methods the path
  // takes, the request headers the browser asked for (when each is a header name; otherwise
  // none, and the browser refuses), and how long a browser may cache the answer.
  void AddPreflightHeaders(absl::string_view origin, absl::string_view methods,
                           absl::string_view requested_headers, HttpHeaders* out) const;
  // The headers of an answer to an allowed origin: the origin, and the response headers a page
  // may read (Tandem's x-tandem-*, retry hints).
  void AddResponseHeaders(absl::string_view origin, HttpHeaders* out) const;

 private:
  bool any_ = false;
  std::vector<std::string> origins_;  // lower case
};

}  // namespace tandem::gateway
