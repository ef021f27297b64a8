#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tools/bench/run_spec.h"

namespace tandem::bench {

// Workers and gateways alike, as the --tls_ca/--tls_cert/--tls_key/--plaintext flags say
// (common/client_tls_flags.h). Exits with status 2 when those flags are wrong.
std::shared_ptr<grpc::ChannelCredentials> CredentialsFor(Target target);

// `n` channels (each its own connection) to `address`, made once per process and address.
std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(Target target, const std::string& address,
                                                         int n);

// Waits up to `timeout`: a gateway until `model` (or, when empty, some model) has a ready worker
// (ListModels); a worker until its state is READY (GetInfo).
absl::Status WaitReady(Target target, const std::string& address, const std::string& model,
                       absl::Duration timeout);

}  // namespace tandem::bench
