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
ABSL_FLAG(int, metrics_threads, 4,
          "Connections /metrics serves at once (1-1024); more wait in the listen backlog.");
ABSL_FLAG(absl::Duration, metrics_connection_timeout, absl::Seconds(5),
          "The most one /metrics connection may take, TLS handshake to last byte (100ms-10m); a "
          "client that stalls is cut off.");

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
  options.threads = absl::GetFlag(FLAGS_metrics_threads);
  options.connection_timeout = absl::GetFlag(FLAGS_metrics_connection_timeout);
  if (options.threads < 1 || options.threads > 1024) {
    return absl::InvalidArgumentError("--metrics_threads must be in [1, 1024]");
  }
  if (options.connection_timeout < absl::Milliseconds(100) ||
      options.connection_timeout > absl::Minutes(10)) {
    return absl::InvalidArgumentError("--metrics_connection_timeout must be between 100ms and 10m");
  }
  if (absl::GetFlag(FLAGS_metrics_tls)) {
    if (absl::GetFlag(FLAGS_plaintext)) {
      return absl::InvalidArgumentError(
          "--metrics_tls serves /metrics with the gRPC port's --tls_cert/--tls_key; it cannot be "
          "combined with --plaintext");
    }
    options.tls.cert = absl::GetFlag(FLAGS_tls_cert);
    options.tls.key = absl::GetFlag(FLAGS_tls_key);
    options.tls.ca = absl::GetFlag(FLAGS_tls_client_ca);
    options.tls.refresh = absl::GetFlag(FLAGS_tls_refresh_interval);
  }
  return options;
}

std::string MetricsTransportFromFlags() {
  return absl::GetFlag(FLAGS_metrics_tls) ? ServerTransportFromFlags() : "plaintext";
}

}  // namespace tandem
