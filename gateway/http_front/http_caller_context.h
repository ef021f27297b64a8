#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "common/http_server.h"
#include "gateway/dispatch/caller_context.h"

namespace tandem::gateway {

// An HTTP caller (the OpenAI-compatible front): its key from the Authorization (or x-api-key)
// header, its request id from x-request-id, its deadline from x-tandem-timeout-ms, and its
// cancellation when the connection goes away (Cancel).
class HttpCallerContext final : public CallerContext {
 public:
  HttpCallerContext(const HttpRequest& request, std::chrono::system_clock::time_point deadline);

  const char* api() const override { return "openai"; }
  std::string ApiKey() const override { return api_key_; }
  std::string RequestIdHeader() const override { return request_id_; }
  std::string SessionIdHeader() const override { return session_id_; }
  std::string SessionTokenHeader() const override { return session_token_; }
  std::chrono::system_clock::time_point deadline() const override { return deadline_; }
  bool IsCancelled() const override;
  void SetRetryAfterMs(int64_t ms) override { retry_after_ms_.store(ms); }
  std::unique_ptr<grpc::ClientContext> NewWorkerContext() const override;

  // The client went away.
  void Cancel() { cancelled_.store(true); }
  // The retry advice of a refusal in milliseconds (0: none), for Retry-After.
  int64_t retry_after_ms() const { return retry_after_ms_.load(); }

 private:
  const std::string api_key_;
  const std::string request_id_;
  const std::string session_id_;
  const std::string session_token_;
  const std::chrono::system_clock::time_point deadline_;
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> retry_after_ms_{0};
};

}  // namespace tandem::gateway
