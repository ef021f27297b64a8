#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace tandem {

// absl::StatusCode values equal gRPC's, so conversion keeps code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Upper-case code name as gRPC spells it ("OK", "INVALID_ARGUMENT", ...), used as a metric label.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace tandem
