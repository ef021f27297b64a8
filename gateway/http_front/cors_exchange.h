#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/http_server.h"
#include "gateway/http_front/cors_policy.h"

namespace tandem::gateway {

// An exchange whose answer (whole or streamed) carries the CORS headers of an allowed origin,
// so that whatever answers it (the front, an OpenAiCall) needs to know nothing of CORS.
class CorsExchange final : public HttpExchange {
 public:
  // `policy` outlives the exchange.
  CorsExchange(std::shared_ptr<HttpExchange> inner, const CorsPolicy* policy, std::string origin)
      : inner_(std::move(inner)), policy_(policy), origin_(std::move(origin)) {}

  const HttpRequest& request() const override { return inner_->request(); }
  void Respond(HttpResponse response) override {
    policy_->AddResponseHeaders(origin_, &response.headers);
    inner_->Respond(std::move(response));
  }
  void StartStream(HttpResponse head) override {
    policy_->AddResponseHeaders(origin_, &head.headers);
    inner_->StartStream(std::move(head));
  }
  void Write(std::string bytes, std::function<void(bool ok)> done) override {
    inner_->Write(std::move(bytes), std::move(done));
  }
  void EndStream(std::string bytes) override { inner_->EndStream(std::move(bytes)); }
  void OnClientGone(std::function<void()> fn) override { inner_->OnClientGone(std::move(fn)); }

 private:
  const std::shared_ptr<HttpExchange> inner_;
  const CorsPolicy* const policy_;
  const std::string origin_;
};

}  // namespace tandem::gateway
