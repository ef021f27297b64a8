#include "common/metrics_server.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "common/process.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::shared_ptr<prometheus::Registry> registry) {
  auto host_port = ParseHostPort("metrics-address", address);
  if (!host_port.ok()) return host_port.status();
  std::unique_ptr<prometheus::Exposer> exposer;
  // civetweb reports a failed bind by throwing; this is its one call site.
  try {
    exposer = std::make_unique<prometheus::Exposer>(
        absl::StrCat(host_port->first.empty() ? "0.0.0.0" : host_port->first, ":",
                     host_port->second),
        /*num_threads=*/1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  exposer->RegisterCollectable(registry);
  const auto ports = exposer->GetListeningPorts();
  if (ports.empty()) return absl::UnavailableError("metrics server bound no port");
  std::string bound =
      absl::StrCat(host_port->first.empty() ? "0.0.0.0" : host_port->first, ":", ports.front());
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(exposer), std::move(bound)));
}

namespace {
// Reachable until exit; see KeepUntilExit.
MetricsServer* kept_until_exit = nullptr;
}  // namespace

void MetricsServer::KeepUntilExit(std::unique_ptr<MetricsServer> server) {
  kept_until_exit = server.release();
}

}  // namespace tandem
