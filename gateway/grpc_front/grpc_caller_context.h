#pragma once

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "gateway/dispatch/caller_context.h"

namespace tandem::gateway {

// The value of one metadata key (lower case) of a call; empty when absent.
std::string MetadataValue(const grpc::CallbackServerContext* context, std::string_view key);
// The call's x-request-id metadata value; empty when none.
std::string MetadataRequestId(const grpc::CallbackServerContext* context);

// A gRPC caller: metadata, deadline and cancellation of a callback server call. Holds a
// reference to the call for its own lifetime: an attempt's ClientContext keeps only a raw pointer
// to it (for deadline and cancellation propagation) until its call is created, and a hedge may
// start just after the caller's call finished and gRPC released it.
class GrpcCallerContext final : public CallerContext {
 public:
  explicit GrpcCallerContext(grpc::CallbackServerContext* context);
  ~GrpcCallerContext() override;
  GrpcCallerContext(const GrpcCallerContext&) = delete;
  GrpcCallerContext& operator=(const GrpcCallerContext&) = delete;

  const char* api() const override { return "grpc"; }
  std::string ApiKey() const override;
  std::string RequestIdHeader() const override;
  std::string SessionIdHeader() const override;
  std::string SessionTokenHeader() const override;
  std::chrono::system_clock::time_point deadline() const override;
  bool IsCancelled() const override;
  void SetRetryAfterMs(int64_t ms) override;
  std::unique_ptr<grpc::ClientContext> NewWorkerContext() const override;

 private:
  grpc::CallbackServerContext* const context_;
  grpc_call* const call_;
};

}  // namespace tandem::gateway
