#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace tandem {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  // The path and query: as sent for the origin form, the absolute form's path and query
  // ("POST http://h/v1/x?q HTTP/1.1" gives "/v1/x?q"), "*" for OPTIONS *.
  std::string target;
  int version = 11;     // 10 for HTTP/1.0, 11 for HTTP/1.1
  HttpHeaders headers;  // names lower-cased, in the order sent
  std::string body;     // empty in the header phase (HttpServerOptions::on_headers)
  // The value of header `name` (lower case); empty when absent.
  absl::string_view Header(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  // Framing headers (Content-Length, Transfer-Encoding, Connection) are the server's: any given
  // here are dropped ("connection: close" still closes the connection after the answer), and so
  // is a header whose name is not a token or whose value holds CR, LF or NUL.
  HttpHeaders headers;
  std::string body;
};

struct HttpServerOptions {
  // HTTPS when tls.cert and tls.key are set; with tls.ca too, clients must present a
  // certificate that CA signed. Rotated files apply to new connections within tls.refresh.
  TlsFiles tls;
  // Threads running the connections' I/O (parsing, TLS, writes).
  int threads = 2;
  // Connections open at once. A new one beyond it takes the place of the connection idle the
  // longest (kept alive between requests); with none idle it is answered 503 (JSON, with
  // Retry-After and Connection: close) and closed.
  int max_connections = 1024;
  // The request line and headers of one request, in bytes (431 beyond).
  int64_t max_header_bytes = 16 << 10;
  // The body of one request, in bytes (413 beyond).
  int64_t max_body_bytes = 4 << 20;
  // The most a connection may take to deliver a whole request: from its accept (the TLS
  // handshake included), or from the first byte of a later request, to the request's last byte.
  // A client that stalls mid-request is answered 408 and closed; one that sent nothing, closed.
  absl::Duration read_timeout = absl::Seconds(30);
  // The most a kept-alive connection may wait for the first byte of its next request, from the
  // end of its previous answer; it is closed then (no answer: there is no request to answer).
  absl::Duration idle_timeout = absl::Seconds(60);
  // The most one write to the client may take (a client that stopped reading is cut off).
  absl::Duration write_timeout = absl::Seconds(30);
  // Runs on an I/O thread once a request's line and headers are parsed and its framing checked,
  // before its body is read and before 100 Continue is sent. A response it returns is sent with
  // Connection: close and the connection closed without reading the body; nullopt lets the
  // request go on. Must not block. Unset: every request goes on.
  std::function<std::optional<HttpResponse>(const HttpRequest& head)> on_headers;
  // Runs on an I/O thread for each connection refused because max_connections were open and
  // none was idle (the 503 above, or a close when even refusals are too many): a metric's hook.
  std::function<void()> on_connection_refused;
  // Runs with the number of open connections (those counted against max_connections) and of
  // those idle (evictable: between requests, or lingering after a last answer) after either
  // changed; calls are serialised, and the last one has the current numbers: gauges' hook. A
  // connection becomes idle once its answer's write has completed here, which can be after the
  // client has read the answer.
  std::function<void(int open, int idle)> on_connections_changed;
};

// One request and its answer. Thread-safe: the answer may be given from any thread, after the
// handler returned. The connection stays open for as long as its exchange is referenced.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  virtual const HttpRequest& request() const = 0;
  // The whole answer; ends the exchange. To HEAD, its headers and the Content-Length of its
  // body, without the body. 1xx, 204 and 304 carry no body.
  virtual void Respond(HttpResponse response) = 0;
  // A streamed answer: the status line and headers of `head` (its body is ignored), then each
  // Write's bytes as they come, one write in flight at a time: `done(ok)` runs once they are
  // written (ok false: the client is gone or too slow). Chunked for an HTTP/1.1 client; for an
  // HTTP/1.0 one the raw bytes, ended by closing the connection. To HEAD, the headers only
  // (each Write is done(true) at once).
  virtual void StartStream(HttpResponse head) = 0;
  virtual void Write(std::string bytes, std::function<void(bool ok)> done) = 0;
  // Writes `bytes` (may be empty) and the end of the stream; ends the exchange.
  virtual void EndStream(std::string bytes) = 0;
  // `fn` runs once if the connection is lost before the exchange ended (the client went away,
  // or a write timed out); at once if it already was.
  virtual void OnClientGone(std::function<void()> fn) = 0;
};

// HTTP/1.1 (RFC 9110/9112: keep-alive, pipelining, 100-continue, HEAD, HTTP/1.0 clients) over
// Boost.Beast, plain or TLS, on threads of its own. Each request goes to the handler with its
// exchange, and the answers go out in the order of the requests; while an answer is pending, the
// connection is still read (the next request's headers at most), so that a client that goes
// away is noticed at once (OnClientGone). Requests that cannot be read are answered here, after
// the answers to the complete requests before them, and the connection closed: 400 (malformed,
// ambiguous framing, no Host in HTTP/1.1), 408 (stalled mid-request), 413, 417, 431, 501
// (a transfer coding other than chunked), 505 (not HTTP/1.x). A closing connection shuts its
// side first and drops what the client still sends for a moment (so the kernel does not reset
// the answer away).
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
  // Connections serving no one: lingering after their last answer, or kept alive and waiting
  // for their next request. The ones a full server evicts: lingering first, then the longest
  // idle.
  int IdleConnections() const;

  struct Impl;

 private:
  explicit HttpServer(std::shared_ptr<Impl> impl, std::string address);
  std::shared_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace tandem
