#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tandem {

// Channel credentials for the command-line tools (tandemctl, tandem-bench) from their flags:
//   --tls_ca               roots that sign the gateway's certificate (empty: system roots);
//   --tls_cert, --tls_key  a client certificate, for a gateway that requires one;
//   --plaintext            no TLS, for a gateway started with --plaintext.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFlags();

// --api_key, else the TANDEM_API_KEY environment variable (which keeps it out of `ps`); empty
// when neither is set.
std::string ApiKeyFromFlags();

// Adds "authorization: Bearer KEY" when ApiKeyFromFlags() is set.
void AddApiKey(grpc::ClientContext* context);

}  // namespace tandem
