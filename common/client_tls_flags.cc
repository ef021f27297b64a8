#include "common/client_tls_flags.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "common/tls.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM roots that sign the gateway's certificate (empty: the system's roots).");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for gateways that require one.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(bool, plaintext, false, "Connect without TLS (a gateway started with --plaintext).");
ABSL_FLAG(std::string, api_key, "",
          "API key sent as 'authorization: Bearer KEY' (default: $TANDEM_API_KEY).");

namespace tandem {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFlags() {
  TlsFiles files;
  files.ca = absl::GetFlag(FLAGS_tls_ca);
  files.cert = absl::GetFlag(FLAGS_tls_cert);
  files.key = absl::GetFlag(FLAGS_tls_key);
  if (absl::GetFlag(FLAGS_plaintext)) {
    if (!files.ca.empty() || !files.cert.empty() || !files.key.empty()) {
      return absl::InvalidArgumentError(
          "--plaintext and --tls_ca/--tls_cert/--tls_key contradict each other; choose one");
    }
    return grpc::InsecureChannelCredentials();
  }
  return MakeChannelCredentials(files, "--tls_ca/--tls_cert/--tls_key");
}

std::string ApiKeyFromFlags() {
  std::string key = absl::GetFlag(FLAGS_api_key);
  if (key.empty()) {
    if (const char* env = std::getenv("TANDEM_API_KEY")) key = env;
  }
  return key;
}

void AddApiKey(grpc::ClientContext* context) {
  // Read once: load tools call this for every request.
  static const std::string* header = [] {
    const std::string key = ApiKeyFromFlags();
    return new std::string(key.empty() ? "" : "Bearer " + key);
  }();
  if (!header->empty()) context->AddMetadata("authorization", *header);
}

}  // namespace tandem
