#include "gateway/grpc_front/grpc_caller_context.h"

#include <string>

#include "gateway/intake/access.h"

namespace tandem::gateway {

std::string MetadataValue(const grpc::CallbackServerContext* context, std::string_view key) {
  const auto& md = context->client_metadata();
  auto it = md.find(grpc::string_ref(key.data(), key.size()));
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

std::string MetadataRequestId(const grpc::CallbackServerContext* context) {
  return MetadataValue(context, "x-request-id");
}

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
