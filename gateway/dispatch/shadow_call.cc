#include "gateway/dispatch/shadow_call.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "common/request_validation.h"
#include "gateway/dispatch/dispatcher.h"

namespace tandem::gateway {
namespace {

constexpr char kShadowSuffix[] = "-shadow";

}  // namespace

ShadowCall::ShadowCall(Dispatcher* dispatcher, std::shared_ptr<Endpoint> endpoint,
                       std::string model, const Admission& admission, absl::Duration timeout)
    : dispatcher_(dispatcher),
      endpoint_(std::move(endpoint)),
      model_(std::move(model)),
      request_class_(admission.decision.request_class),
      request_(admission.worker_request),
      start_(std::chrono::steady_clock::now()) {
  // Cut so that the suffixed id still passes the worker's check (at most kMaxRequestIdBytes).
  request_.set_request_id(
      absl::StrCat(admission.request_id.substr(0, kMaxRequestIdBytes - std::strlen(kShadowSuffix)),
                   kShadowSuffix));
  context_.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  context_.AddMetadata("x-request-id", request_.request_id());
  endpoint_->AddOutstanding(1);
  endpoint_->client().Generate(&context_, &request_, this);
  StartRead(&chunk_);
  StartCall();
}

void ShadowCall::OnReadDone(bool ok) {
  if (!ok) return;
  tokens_ += chunk_.tokens();
  StartRead(&chunk_);
}

void ShadowCall::OnDone(const grpc::Status& status) {
  dispatcher_->ShadowEnded(this);
  GatewayMetrics& metrics = dispatcher_->metrics();
  if (GatewayMetrics::Model* m = metrics.ForModel(model_); m != nullptr) {
    m->shadow_duration->Observe(Seconds(std::chrono::steady_clock::now() - start_));
    m->shadow_completion_tokens->Increment(tokens_);
  }
  metrics.CountShadow(model_, request_class_, GrpcCodeName(status.error_code()));
  endpoint_->AddOutstanding(-1);
  dispatcher_->CallEnded();
  delete this;
}

}  // namespace tandem::gateway
