#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/time/time.h"
#include "gateway/dispatch/caller_context.h"

namespace tandem::gateway {

// When a refusal may be retried: said as RetryInfo (with a QuotaFailure naming the quota's
// subject when a quota refused) in the status details (Detailed), and where the caller's
// protocol says it (CallerContext::SetRetryAfterMs: gRPC's retry-after-ms trailer, HTTP's
// Retry-After) for clients without error-details support.
class RetryAdvice {
 public:
  void Set(double seconds, std::string quota_subject, CallerContext& caller);
  // `status` with the advice in its details; as it is when OK or without advice.
  grpc::Status Detailed(const grpc::Status& status) const;
  // Zero when there is no advice.
  absl::Duration after() const { return after_; }

 private:
  absl::Duration after_;
  std::string quota_subject_;
};

}  // namespace tandem::gateway
