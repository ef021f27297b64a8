#include "gateway/grpc_caller_context.h"

#include <string>

#include "gateway/gateway_service.h"

namespace tandem::gateway {

GrpcCallerContext::GrpcCallerContext(grpc::CallbackServerContext* context)
    : context_(context), call_(context->c_call()) {
  grpc_call_ref(call_);
}

GrpcCallerContext::~GrpcCallerContext() { grpc_call_unref(call_); }

std::string GrpcCallerContext::ApiKey() const {
  return ApiKeyFromMetadata(context_->client_metadata());
}

std::string GrpcCallerContext::RequestIdHeader() const { return MetadataRequestId(context_); }

std::string GrpcCallerContext::SessionIdHeader() const {
  return MetadataValue(context_, "x-session-id");
}

std::string GrpcCallerContext::SessionTokenHeader() const {
  return MetadataValue(context_, "x-tandem-session-token");
}

std::chrono::system_clock::time_point GrpcCallerContext::deadline() const {
  return context_->deadline();
}

bool GrpcCallerContext::IsCancelled() const { return context_->IsCancelled(); }

void GrpcCallerContext::SetRetryAfterMs(int64_t ms) {
  context_->AddTrailingMetadata("retry-after-ms", std::to_string(ms));
}

std::unique_ptr<grpc::ClientContext> GrpcCallerContext::NewWorkerContext() const {
  return grpc::ClientContext::FromCallbackServerContext(*context_);
}

}  // namespace tandem::gateway
