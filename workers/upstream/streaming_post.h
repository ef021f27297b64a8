#pragma once

#include <chrono>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace tandem::workers::upstream {

// One streaming HTTP(S) POST at a time over libcurl, the connection kept alive between posts.
// Not thread-safe: one per dispatch thread. The transfer is driven here in short polls, so a
// cancelled or expired call stops within `poll` and its connection is closed, which is how the
// engine learns to stop generating.
class StreamingPost {
 public:
  struct Options {
    TlsFiles tls;         // https: the CA that verifies the engine (empty: system roots)
    std::string api_key;  // sent as "Authorization: Bearer KEY" when set
    absl::Duration connect_timeout = absl::Seconds(5);
    // No byte from the engine for this long ends the call (resolution one second): a hung
    // engine is not waited on until the caller's deadline.
    absl::Duration idle_timeout = absl::Seconds(60);
    absl::Duration poll = absl::Milliseconds(20);
    // Bytes kept of an error response's body, for the message.
    size_t max_error_body = 4096;
  };
  struct Result {
    // UNAVAILABLE: the transfer failed (connect, reset, idle); CANCELLED: `should_stop` said so;
    // DEADLINE_EXCEEDED: the deadline came; or the status `on_body` returned.
    absl::Status status;
    long http_status = 0;
    // The start of a non-200 response's body.
    std::string error_body;
  };

  explicit StreamingPost(Options options);
  ~StreamingPost();
  StreamingPost(const StreamingPost&) = delete;
  StreamingPost& operator=(const StreamingPost&) = delete;

  // POSTs `body` (JSON) to `url`. The body of a 200 answer goes to `on_body` as it arrives (a
  // non-OK status from it aborts the call). `should_stop` is asked between polls.
  Result Post(const std::string& url, const std::string& body,
              std::chrono::steady_clock::time_point deadline,
              absl::FunctionRef<absl::Status(absl::string_view)> on_body,
              absl::FunctionRef<bool()> should_stop);

 private:
  // One attempt on the prepared handle; `transfer` is the write callback's state.
  Result Transfer(void* easy, void* multi, std::chrono::steady_clock::time_point deadline,
                  absl::FunctionRef<bool()> should_stop, void* transfer);

  const Options options_;
  void* easy_;   // CURL*
  void* multi_;  // CURLM*
};

}  // namespace tandem::workers::upstream
