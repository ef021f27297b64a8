#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "prometheus/collectable.h"

namespace tandem {

class TlsServerContext;

struct MetricsServerOptions {
  // HTTPS when tls.cert and tls.key are set; with tls.ca too, every client (Prometheus, the
  // gateway's scraper) must present a certificate that CA signed. Rotated files apply to new
  // connections within tls.refresh.
  TlsFiles tls;
  // Connections open at once, kept-alive ones included. A new one takes the place of an idle
  // kept-alive one when all are taken; with none idle, new ones wait in the listen backlog.
  int max_connections = 64;
  // The most one request may take: from its first byte (for a new connection, from the start of
  // its TLS handshake) to the last byte of the answer. A client that stalls is cut off.
  absl::Duration request_timeout = absl::Seconds(5);
  // How long a kept-alive connection may wait for its next request.
  absl::Duration idle_timeout = absl::Seconds(60);
};

// Serves a collectable (a registry, or one that adds other families to it) on
// http(s)://ADDRESS/metrics in the Prometheus text format (0.0.4), with
// HTTP/1.1 keep-alive (a scraper keeps one connection, so TLS handshakes are rare), from one
// thread of its own that multiplexes every connection with poll(2): a stalled client holds only
// its own connection slot. Tandem's own minimal server rather than prometheus-cpp's civetweb
// exposer: civetweb's threads have fixed small stacks, and libraries with large static TLS in the
// same process (cuBLASLt, threaded OpenBLAS) leave them no room, so the exposer failed to start
// or crashed on a request.
class MetricsServer {
 public:
  // `address` is HOST:PORT; port 0 picks a free port (see Address()). INVALID_ARGUMENT for a bad
  // address, options or TLS files; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Collectable> source,
      MetricsServerOptions options = {});
  // Stops at once, closing every connection, even mid-request.
  ~MetricsServer();

  // HOST:PORT actually bound.
  const std::string& Address() const { return address_; }
  // "https" or "http".
  const char* Scheme() const { return tls_ != nullptr ? "https" : "http"; }

  // For the end of main: stops the server (kept for call sites written for the old exposer,
  // whose stop took 1.5 s; this one stops at once).
  static void KeepUntilExit(std::unique_ptr<MetricsServer> server);

 private:
  struct Connection;
  using TimePoint = std::chrono::steady_clock::time_point;

  MetricsServer(int listen_fd, int wake_fd, std::string address,
                std::shared_ptr<prometheus::Collectable> source, MetricsServerOptions options,
                std::unique_ptr<TlsServerContext> tls);
  void Loop();
  // A connection for a socket just accepted; null when TLS cannot be set up on it.
  std::unique_ptr<Connection> Accept(int fd, TimePoint deadline);
  // Moves `c` on as far as its socket allows without blocking; false once it is finished.
  bool Advance(Connection& c);
  // The whole response to one request header; `keep_alive` says whether the connection stays.
  std::string Answer(const std::string& request, bool* keep_alive) const;

  const int listen_fd_;  // non-blocking
  const int wake_fd_;    // eventfd: written by the destructor to stop the loop
  const std::string address_;
  const std::shared_ptr<prometheus::Collectable> source_;
  const MetricsServerOptions options_;
  const std::unique_ptr<TlsServerContext> tls_;  // null: plain HTTP
  std::thread thread_;
};

}  // namespace tandem
