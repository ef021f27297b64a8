#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::gateway {

// Blocking HTTP GET, used only from the signal engine's own threads (never from a reactor). The
// seam lets tests serve canned bodies.
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
  CurlHttpClient();
  ~CurlHttpClient() override;
  CurlHttpClient(const CurlHttpClient&) = delete;
  CurlHttpClient& operator=(const CurlHttpClient&) = delete;

  absl::StatusOr<std::string> Get(const std::string& url, absl::Duration timeout) override;

  // Percent-encodes a query parameter value.
  static std::string Escape(const std::string& text);

 private:
  void* curl_;  // CURL*
};

}  // namespace tandem::gateway
