#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

namespace tandem {

// Serves one registry on http://ADDRESS/metrics in the Prometheus text format (0.0.4), from one
// thread of its own. Tandem's own minimal HTTP/1.x server rather than prometheus-cpp's civetweb
// exposer: civetweb's threads have fixed small stacks, and libraries with large static TLS in
// the same process (cuBLASLt, threaded OpenBLAS) leave them no room, so the exposer failed to
// start or crashed on a request.
class MetricsServer {
 public:
  // `address` is HOST:PORT; port 0 picks a free port (see Address()).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Registry> registry);
  ~MetricsServer();

  // HOST:PORT actually bound.
  const std::string& Address() const { return address_; }

  // For the end of main: stops the server (kept for call sites written for the old exposer,
  // whose stop took 1.5 s; this one stops at once).
  static void KeepUntilExit(std::unique_ptr<MetricsServer> server);

 private:
  MetricsServer(int listen_fd, int wake_fd, std::string address,
                std::shared_ptr<prometheus::Registry> registry);
  void Loop();
  void Serve(int fd);

  const int listen_fd_;
  const int wake_fd_;  // eventfd: written by the destructor to stop the loop
  const std::string address_;
  const std::shared_ptr<prometheus::Registry> registry_;
  std::thread thread_;
};

}  // namespace tandem
