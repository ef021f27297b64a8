#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace tandem {

struct HttpServerOptions {
  // HTTPS when tls.cert and tls.key are set; with tls.ca too, clients must present a
  // certificate that CA signed. Rotated files apply to new connections within tls.refresh.
  TlsFiles tls;
  // Threads running the connections' I/O (parsing, TLS, writes).
  int threads = 2;
  // Connections open at once; one beyond it is closed as soon as it is accepted.
  int max_connections = 1024;
  // The request line and headers of one request, in bytes (431 beyond).
  int64_t max_header_bytes = 16 << 10;
  // The body of one request, in bytes (413 beyond).
  int64_t max_body_bytes = 4 << 20;
  // The most a connection may take to deliver a whole request, waiting for it included: from
  // its accept (the TLS handshake included) or the end of its previous answer to the request's
  // last byte. A kept-alive connection idle that long, or a client that stalls, is closed.
  absl::Duration read_timeout = absl::Seconds(30);
  // The most one write to the client may take (a client that stopped reading is cut off).
  absl::Duration write_timeout = absl::Seconds(30);
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // the path and query, as sent
  HttpHeaders headers;  // names lower-cased, in the order sent
  std::string body;
  // The value of header `name` (lower case); empty when absent.
  absl::string_view Header(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  HttpHeaders headers;
  std::string body;
};

// One request and its answer. Thread-safe: the answer may be given from any thread, after the
// handler returned. The connection stays open for as long as its exchange is referenced.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  virtual const HttpRequest& request() const = 0;
  // The whole answer; ends the exchange.
  virtual void Respond(HttpResponse response) = 0;
  // A streamed answer (chunked transfer encoding): the status line and headers of `head` (its
  // body is ignored), then each Write's bytes as they come, one write in flight at a time:
  // `done(ok)` runs once they are written (ok false: the client is gone or too slow).
  virtual void StartStream(HttpResponse head) = 0;
  virtual void Write(std::string bytes, std::function<void(bool ok)> done) = 0;
  // Writes `bytes` (may be empty) and the end of the stream; ends the exchange.
  virtual void EndStream(std::string bytes) = 0;
  // `fn` runs once if the connection is lost before the exchange ended (the client went away,
  // or a write timed out); at once if it already was.
  virtual void OnClientGone(std::function<void()> fn) = 0;
};

// HTTP/1.1 (keep-alive, pipelining) over Boost.Beast, plain or TLS, on threads of its own. Each
// request goes to the handler with its exchange; while the answer is pending, the connection is
// still read, so that a client that goes away is noticed at once (OnClientGone). Malformed and
// oversized requests are answered here (400, 413, 431) and the connection closed.
class HttpServer {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpExchange>)>;

  // `address` is HOST:PORT; port 0 picks a free port (see Address()). INVALID_ARGUMENT for a bad
  // address, options or TLS files; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           HttpServerOptions options,
                                                           Handler handler);
  // Stops accepting and closes every connection; answers still pending are dropped.
  ~HttpServer();

  // HOST:PORT actually bound.
  const std::string& Address() const { return address_; }
  // "https" or "http".
  const char* Scheme() const;

  struct Impl;

 private:
  explicit HttpServer(std::shared_ptr<Impl> impl, std::string address);
  std::shared_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace tandem
