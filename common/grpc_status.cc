#include "common/grpc_status.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace tandem {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::Status WithRetryInfo(const grpc::Status& status, absl::Duration retry_delay,
                           const std::string& quota_subject) {
  if (status.ok()) return status;
  google::rpc::Status details;
  details.set_code(static_cast<int32_t>(status.error_code()));
  details.set_message(status.error_message());
  google::rpc::RetryInfo retry;
  const absl::Duration delay = std::max(retry_delay, absl::ZeroDuration());
  const int64_t seconds = absl::ToInt64Seconds(delay);  // truncates
  retry.mutable_retry_delay()->set_seconds(seconds);
  retry.mutable_retry_delay()->set_nanos(
      static_cast<int32_t>(absl::ToInt64Nanoseconds(delay - absl::Seconds(seconds))));
  details.add_details()->PackFrom(retry);
  if (!quota_subject.empty()) {
    google::rpc::QuotaFailure quota;
    auto* v = quota.add_violations();
    v->set_subject(quota_subject);
    v->set_description(status.error_message());
    details.add_details()->PackFrom(quota);
  }
  return grpc::Status(status.error_code(), status.error_message(), details.SerializeAsString());
}

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace tandem
