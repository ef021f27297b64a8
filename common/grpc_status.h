#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tandem {

// absl::StatusCode values equal gRPC's, so conversion keeps code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// `status` (not OK) with gRPC's rich error details (google.rpc.Status in
// grpc-status-details-bin): a RetryInfo of `retry_delay`, and a QuotaFailure naming
// `quota_subject` (e.g. "tenant:search") with the status message when the subject is not empty.
// Clients with standard error-details support read when to retry without parsing the message.
grpc::Status WithRetryInfo(const grpc::Status& status, absl::Duration retry_delay,
                           const std::string& quota_subject = "");

// Upper-case code name as gRPC spells it ("OK", "INVALID_ARGUMENT", ...), used as a metric label.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace tandem
