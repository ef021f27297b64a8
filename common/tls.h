#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem {

// PEM files for one side of a TLS connection. gRPC re-reads them every `refresh` (at least 1 s),
// so certificates rotate without a restart; replace them atomically (write, then rename) so a
// half-written pair is never read.
struct TlsFiles {
  // Certificate chain and its private key: this side's identity. Required for servers; for
  // clients, the identity shown for mutual TLS (optional).
  std::string cert;
  std::string key;
  // Roots. A server with a CA requires and verifies client certificates against it (mutual
  // TLS); a client verifies the server against it (empty: the system roots).
  std::string ca;
  absl::Duration refresh = absl::Seconds(10);
};

// Reads the files now so that a missing file, a non-PEM file or a key that does not belong to
// its certificate is a clear start-up error rather than a failed handshake later. `what` names
// the flags in messages ("--tls_cert/--tls_key").
absl::Status CheckTlsFiles(const TlsFiles& files, const std::string& what);

// OpenSSL's pem_password_cb that refuses to ask for a passphrase: OpenSSL's default callback
// would prompt on the terminal and hang a server or tool started from a shell.
int NoPassphrase(char* buf, int size, int rwflag, void* userdata);

// TLS server credentials watching `files` (cert and key required); with files.ca, clients must
// present a certificate it signed.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, const std::string& what);

// TLS channel credentials watching `files`: verifies the server against files.ca (or the
// system roots) and presents files.cert when set.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files, const std::string& what);

}  // namespace tandem
