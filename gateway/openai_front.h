#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "gateway/gateway_service.h"

namespace tandem::gateway {

// The OpenAI-compatible HTTP front (tandem-gateway --http_listen):
//   POST /v1/chat/completions   a generation through the same request path as the gRPC API
//                               (OpenAiCall), answered whole or as Server-Sent Events;
//   GET  /v1/models[/ID]        the models the caller may use, and "auto".
// The caller's API key comes as "Authorization: Bearer KEY" (or x-api-key), as on gRPC. Errors
// are OpenAI's error JSON with the HTTP status of the gRPC code (openai_codec.h).
class OpenAiFront {
 public:
  // `service` outlives the front.
  static absl::StatusOr<std::unique_ptr<OpenAiFront>> Start(const std::string& address,
                                                            HttpServerOptions options,
                                                            GatewayService* service);

  const std::string& Address() const { return server_->Address(); }
  const char* Scheme() const { return server_->Scheme(); }

 private:
  explicit OpenAiFront(GatewayService* service) : service_(service) {}

  void Handle(std::shared_ptr<HttpExchange> exchange);
  void ChatCompletions(std::shared_ptr<HttpExchange> exchange);
  void Models(const std::shared_ptr<HttpExchange>& exchange, const std::string& id);

  GatewayService* const service_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace tandem::gateway
