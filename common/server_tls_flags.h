#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics_server.h"

namespace tandem {

// The gRPC port's transport security from the flags every Tandem server shares:
//   --tls_cert, --tls_key   the server's certificate chain and key (PEM);
//   --tls_client_ca         roots that sign client certificates: clients must present one
//                           (mutual TLS);
//   --tls_refresh_interval  how often the files are re-read (rotation without restart);
//   --plaintext             no TLS at all; must be chosen explicitly, and is logged as a warning.
// An error names the flags: no TLS files and no --plaintext, both, bad files, a key that is not
// the certificate's, or (with `require_client_ca`) TLS without --tls_client_ca.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFlags(
    const std::string& binary, bool require_client_ca);

// The gRPC port's TLS files (--tls_cert, --tls_key, --tls_client_ca, --tls_refresh_interval),
// for other ports that serve with them; empty with --plaintext. Call after
// ServerCredentialsFromFlags has accepted them.
TlsFiles ServerTlsFilesFromFlags();

// --tls_refresh_interval, for other TLS files the server reads (the gateway's worker client).
absl::Duration TlsRefreshIntervalFromFlags();

// "tls", "mtls" or "plaintext": what the flags configure, for the start-up line.
std::string ServerTransportFromFlags();

// The /metrics port's options from the flags every Tandem server shares:
//   --metrics_tls                  HTTPS with the gRPC port's --tls_cert/--tls_key, and with its
//                                  --tls_client_ca, if any, client certificates required;
//   --metrics_max_connections      connections open at once;
//   --metrics_request_timeout      the most one request may take;
//   --metrics_idle_timeout         how long a kept-alive connection may wait for the next.
// Call after ServerCredentialsFromFlags has accepted the TLS files. An error names the flag:
// --metrics_tls with --plaintext, or a value out of range.
absl::StatusOr<MetricsServerOptions> MetricsServerOptionsFromFlags();

// Like ServerTransportFromFlags, for the /metrics port.
std::string MetricsTransportFromFlags();

}  // namespace tandem
