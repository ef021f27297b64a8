#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/http_server.h"
#include "common/http_session_base.h"

namespace tandem {
namespace http_internal {

// The most a request body reserves up front, in bytes: its announced length is only a claim.
constexpr size_t kMaxReserveBytes = 64 << 10;

// Like http::string_body, but the announced Content-Length reserves at most kMaxReserveBytes:
// a client that announces 32 MiB and sends a byte must not cost 32 MiB (the body limit is the
// parser's). Read only: answers are written by the session.
struct GrowingStringBody {
  using value_type = std::string;
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>& length, beast::error_code& ec) {
      if (length) body_.reserve(static_cast<size_t>(std::min<uint64_t>(*length, kMaxReserveBytes)));
      ec = {};
    }
    template <class ConstBufferSequence>
    size_t put(const ConstBufferSequence& buffers, beast::error_code& ec) {
      size_t n = 0;
      for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
           ++it) {
        body_.append(static_cast<const char*>(it->data()), it->size());
        n += it->size();
      }
      ec = {};
      return n;
    }
    void finish(beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

using RequestParser = http::request_parser<GrowingStringBody>;

// A request that cannot be served, and what to answer.
struct Refusal {
  int status;
  std::string message;
};

// The tokens of a comma-separated header list (RFC 9110 section 5.6.1), lower-cased, empty
// elements skipped.
std::vector<std::string> ListTokens(absl::string_view value);

// What the request's line and headers say about it, checked: the version, Host (RFC 9112
// section 3.2) and the body's framing (section 6): a Transfer-Encoding must end in chunked
// (400, the length is unknowable otherwise) and hold nothing else (501), and comes neither with
// Content-Length nor from an HTTP/1.0 client (400). Beast has checked Content-Length.
std::optional<Refusal> CheckHead(const RequestParser& parser, HttpRequest* head);

// The request's line and headers, its body left out.
HttpRequest ToHead(const RequestParser& parser);

// What to answer a request the parser failed on: 413, 431, else 400 (the message of 413 and
// 431 is the session's, which knows the limits).
Refusal RefusalFor(beast::error_code ec);

}  // namespace http_internal
}  // namespace tandem
