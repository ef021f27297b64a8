#include "gateway/http_front/http_caller_context.h"

#include "gateway/intake/access.h"

namespace tandem::gateway {

HttpCallerContext::HttpCallerContext(const HttpRequest& request,
                                     std::chrono::system_clock::time_point deadline)
    : api_key_(ApiKeyFromHeaders(request.Header("authorization"), request.Header("x-api-key"))),
      request_id_(request.Header("x-request-id")),
      session_id_(request.Header("x-session-id")),
      session_token_(request.Header("x-tandem-session-token")),
      deadline_(deadline) {}

bool HttpCallerContext::IsCancelled() const {
  return cancelled_.load() || std::chrono::system_clock::now() >= deadline_;
}

std::unique_ptr<grpc::ClientContext> HttpCallerContext::NewWorkerContext() const {
  // GenerationCall sets the deadline (the caller's, or the default) and cancels on Cancel.
  return std::make_unique<grpc::ClientContext>();
}

}  // namespace tandem::gateway
