#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "prometheus/registry.h"

namespace tandem {

class TlsServerContext;

struct MetricsServerOptions {
  // HTTPS when tls.cert and tls.key are set; with tls.ca too, every client (Prometheus, the
  // gateway's scraper) must present a certificate that CA signed. Rotated files apply to new
  // connections within tls.refresh.
  TlsFiles tls;
  // Connections served at once; further ones wait in the listen backlog. A client that stalls
  // holds one for at most `connection_timeout`.
  int threads = 4;
  // Budget for one connection's whole exchange: TLS handshake, request, response.
  absl::Duration connection_timeout = absl::Seconds(5);
};

// Serves one registry on http(s)://ADDRESS/metrics in the Prometheus text format (0.0.4), from
// `threads` threads of its own; one request per connection (Connection: close). Tandem's own
// minimal HTTP/1.x server rather than prometheus-cpp's civetweb exposer: civetweb's threads have
// fixed small stacks, and libraries with large static TLS in the same process (cuBLASLt, threaded
// OpenBLAS) leave them no room, so the exposer failed to start or crashed on a request.
class MetricsServer {
 public:
  // `address` is HOST:PORT; port 0 picks a free port (see Address()). INVALID_ARGUMENT for a bad
  // address, options or TLS files; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Registry> registry,
      MetricsServerOptions options = {});
  // Stops at once, cutting off connections being served.
  ~MetricsServer();

  // HOST:PORT actually bound.
  const std::string& Address() const { return address_; }
  // "https" or "http".
  const char* Scheme() const { return tls_ != nullptr ? "https" : "http"; }

  // For the end of main: stops the server (kept for call sites written for the old exposer,
  // whose stop took 1.5 s; this one stops at once).
  static void KeepUntilExit(std::unique_ptr<MetricsServer> server);

 private:
  MetricsServer(int listen_fd, int wake_fd, std::string address,
                std::shared_ptr<prometheus::Registry> registry, MetricsServerOptions options,
                std::unique_ptr<TlsServerContext> tls);
  void Loop();
  void Serve(int fd);

  const int listen_fd_;  // non-blocking: the threads race to accept
  const int wake_fd_;    // eventfd: written by the destructor to stop every thread
  const std::string address_;
  const std::shared_ptr<prometheus::Registry> registry_;
  const MetricsServerOptions options_;
  const std::unique_ptr<TlsServerContext> tls_;  // null: plain HTTP
  std::vector<std::thread> threads_;
};

}  // namespace tandem
