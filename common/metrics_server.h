#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace tandem {

// Serves one registry on http://ADDRESS/metrics in the Prometheus text format.
class MetricsServer {
 public:
  // `address` is HOST:PORT; port 0 picks a free port (see Address()).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Registry> registry);

  // HOST:PORT actually bound.
  const std::string& Address() const { return address_; }

  // For the end of main: keeps `server` serving until the process exits instead of stopping
  // it, because civetweb's stop waits out a 1.5 s poll timeout and at exit there is nothing left
  // to flush. The server stays reachable from a static, so leak checkers do not report it.
  static void KeepUntilExit(std::unique_ptr<MetricsServer> server);

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, std::string address)
      : exposer_(std::move(exposer)), address_(std::move(address)) {}

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

}  // namespace tandem
