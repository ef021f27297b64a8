#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace tandem {

// Blocking HTTP GET, used only from the signal engine's and the upstream engine's own threads
// (never from a reactor). The seam lets tests serve canned bodies.
class HttpClient {
 public:
  virtual ~HttpClient() = default;
  // The body of a 200 response; UNAVAILABLE for connection errors and timeouts, and for any
  // other status with the status and the start of the body in the message.
  virtual absl::StatusOr<std::string> Get(const std::string& url, absl::Duration timeout) = 0;
};

// libcurl. Not thread-safe: one per thread. Connections are kept alive between calls.
class CurlHttpClient final : public HttpClient {
 public:
  // For https:// URLs: `tls.ca` verifies the server (empty: the system roots), `tls.cert` and
  // `tls.key` are the client certificate shown to servers that require one, and the files are
  // re-read for new connections (the CA within tls.refresh). `server_name`, when set, is the
  // name the server's certificate must carry instead of the URL's host (which is still the
  // address dialled).
  // `headers` ("Name: value") go with every request (e.g. an engine's Authorization).
  explicit CurlHttpClient(TlsFiles tls = {}, std::string server_name = "",
                          std::vector<std::string> headers = {});
  ~CurlHttpClient() override;
  CurlHttpClient(const CurlHttpClient&) = delete;
  CurlHttpClient& operator=(const CurlHttpClient&) = delete;

  absl::StatusOr<std::string> Get(const std::string& url, absl::Duration timeout) override;
  // The same for a POST of a JSON body.
  absl::StatusOr<std::string> PostJson(const std::string& url, const std::string& json,
                                       absl::Duration timeout);

  // Percent-encodes a query parameter value.
  static std::string Escape(const std::string& text);

 private:
  // GET when `json` is null, else a POST of it.
  absl::StatusOr<std::string> Perform(const std::string& url, const std::string* json,
                                      absl::Duration timeout);

  const TlsFiles tls_;
  const std::string server_name_;
  const std::vector<std::string> headers_;
  void* curl_;  // CURL*
};

}  // namespace tandem
