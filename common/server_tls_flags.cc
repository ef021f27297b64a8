#include "common/server_tls_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain of the gRPC port (TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM roots for client certificates: clients must present one they signed (mutual TLS).");
ABSL_FLAG(absl::Duration, tls_refresh_interval, absl::Seconds(10),
          "How often the TLS files are re-read; rotated certificates apply to new connections "
          "without a restart (>= 1s).");
ABSL_FLAG(bool, plaintext, false,
          "Serve gRPC without TLS. Only for loopback development and tests: traffic is readable "
          "and peers are not authenticated.");

ABSL_FLAG(bool, metrics_tls, false,
          "Serve /metrics over HTTPS with --tls_cert/--tls_key; with --tls_client_ca, scrapers "
          "(Prometheus, the gateway) must present a client certificate it signed.");
ABSL_FLAG(int, metrics_max_connections, 64,
          "Connections /metrics keeps open at once (1-10000); when all are taken, a new one "
          "replaces an idle kept-alive one, or waits in the listen backlog.");
ABSL_FLAG(absl::Duration, metrics_request_timeout, absl::Seconds(5),
          "The most one /metrics request may take, first byte (or TLS handshake) to last byte "
          "of the answer (100ms-10m); a client that stalls is cut off.");
ABSL_FLAG(absl::Duration, metrics_idle_timeout, absl::Seconds(60),
          "How long a kept-alive /metrics connection may wait for its next request (1s-24h).");

namespace tandem {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFlags(
    const std::string& binary, bool require_client_ca) {
  TlsFiles files;
  files.cert = absl::GetFlag(FLAGS_tls_cert);
  files.key = absl::GetFlag(FLAGS_tls_key);
  files.ca = absl::GetFlag(FLAGS_tls_client_ca);
  files.refresh = absl::GetFlag(FLAGS_tls_refresh_interval);
  const bool any_tls = !files.cert.empty() || !files.key.empty() || !files.ca.empty();
  if (absl::GetFlag(FLAGS_plaintext)) {
    if (any_tls) {
      return absl::InvalidArgumentError(
          "--plaintext and --tls_cert/--tls_key/--tls_client_ca contradict each other; choose one");
    }
    spdlog::warn(
        "PLAINTEXT: {} serves gRPC without TLS (--plaintext): anyone on the network can read and "
        "forge its traffic. Use --tls_cert/--tls_key{} outside loopback development.",
        binary, require_client_ca ? "/--tls_client_ca" : "");
    return grpc::InsecureServerCredentials();
  }
  if (files.refresh < absl::Seconds(1)) {
    return absl::InvalidArgumentError("--tls_refresh_interval must be >= 1s");
  }
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(binary, " needs --tls_cert and --tls_key",
                                                   require_client_ca ? " and --tls_client_ca" : "",
                                                   " (TLS), or an explicit --plaintext"));
  }
  if (require_client_ca && files.ca.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(binary,
                     " serves only the gateway: --tls_client_ca is required so that only clients "
                     "with a certificate it signed (mutual TLS) can call it"));
  }
  return MakeServerCredentials(files, "--tls_cert/--tls_key/--tls_client_ca");
}

absl::Duration TlsRefreshIntervalFromFlags() { return absl::GetFlag(FLAGS_tls_refresh_interval); }

std::string ServerTransportFromFlags() {
  if (absl::GetFlag(FLAGS_plaintext)) return "plaintext";
  return absl::GetFlag(FLAGS_tls_client_ca).empty() ? "tls" : "mtls";
}

absl::StatusOr<MetricsServerOptions> MetricsServerOptionsFromFlags() {
  MetricsServerOptions options;
  options.max_connections = absl::GetFlag(FLAGS_metrics_max_connections);
  options.request_timeout = absl::GetFlag(FLAGS_metrics_request_timeout);
  options.idle_timeout = absl::GetFlag(FLAGS_metrics_idle_timeout);
  if (options.max_connections < 1 || options.max_connections > 10000) {
    return absl::InvalidArgumentError("--metrics_max_connections must be in [1, 10000]");
  }
  if (options.request_timeout < absl::Milliseconds(100) ||
      options.request_timeout > absl::Minutes(10)) {
    return absl::InvalidArgumentError("--metrics_request_timeout must be between 100ms and 10m");
  }
  if (options.idle_timeout < absl::Seconds(1) || options.idle_timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError("--metrics_idle_timeout must be between 1s and 24h");
  }
  if (absl::GetFlag(FLAGS_metrics_tls)) {
    if (absl::GetFlag(FLAGS_plaintext)) {
      return absl::InvalidArgumentError(
          "--metrics_tls serves /metrics with the gRPC port's --tls_cert/--tls_key; it cannot be "
          "combined with --plaintext");
    }
    options.tls = ServerTlsFilesFromFlags();
  }
  return options;
}

TlsFiles ServerTlsFilesFromFlags() {
  TlsFiles files;
  if (absl::GetFlag(FLAGS_plaintext)) return files;
  files.cert = absl::GetFlag(FLAGS_tls_cert);
  files.key = absl::GetFlag(FLAGS_tls_key);
  files.ca = absl::GetFlag(FLAGS_tls_client_ca);
  files.refresh = absl::GetFlag(FLAGS_tls_refresh_interval);
  return files;
}

std::string MetricsTransportFromFlags() {
  return absl::GetFlag(FLAGS_metrics_tls) ? ServerTransportFromFlags() : "plaintext";
}

}  // namespace tandem
