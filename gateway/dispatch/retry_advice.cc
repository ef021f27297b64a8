#include "gateway/dispatch/retry_advice.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "common/grpc_status.h"

namespace tandem::gateway {

void RetryAdvice::Set(double seconds, std::string quota_subject, CallerContext& caller) {
  after_ = absl::Seconds(seconds);
  quota_subject_ = std::move(quota_subject);
  caller.SetRetryAfterMs(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

grpc::Status RetryAdvice::Detailed(const grpc::Status& status) const {
  if (status.ok() || after_ <= absl::ZeroDuration()) return status;
  return WithRetryInfo(status, after_, quota_subject_);
}

}  // namespace tandem::gateway
