#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "common/json_depth.h"
#include "gateway/dispatch/dispatcher.h"
#include "gateway/http_front/cors_policy.h"

namespace tandem::gateway {

struct OpenAiFrontOptions {
  // Bodies nest at most this deep (--max_json_depth), counted from the body's top.
  int max_json_depth = kDefaultMaxJsonDepth;
  // Web origins browsers may call from (--http_cors_origins); empty: CORS off.
  std::vector<std::string> cors_origins;
};

// The OpenAI-compatible HTTP front (tandem-gateway --http_listen):
//   POST /v1/chat/completions   a generation through the same request path as the gRPC API
//                               (OpenAiCall), answered whole or as Server-Sent Events;
//   GET  /v1/models[/ID]        the models the caller may use, and "auto" (HEAD too);
//   OPTIONS                     the methods a path takes, and CORS preflights
//   (--http_cors_origins).
// The caller's API key comes as "Authorization: Bearer KEY" (or x-api-key), as on gRPC, and is
// checked from the headers before a body is parsed. Errors are OpenAI's error JSON with the HTTP
// status of the gRPC code (openai_codec.h); a 401 carries WWW-Authenticate: Bearer.
class OpenAiFront {
 public:
  // `dispatcher` outlives the front.
  static absl::StatusOr<std::unique_ptr<OpenAiFront>> Start(const std::string& address,
                                                            HttpServerOptions options,
                                                            OpenAiFrontOptions front_options,
                                                            Dispatcher* dispatcher);

  const std::string& Address() const { return server_->Address(); }
  const char* Scheme() const { return server_->Scheme(); }

 private:
  OpenAiFront(Dispatcher* dispatcher, OpenAiFrontOptions options, CorsPolicy cors)
      : dispatcher_(dispatcher), options_(std::move(options)), cors_(std::move(cors)) {}

  void Handle(std::shared_ptr<HttpExchange> exchange);
  void ChatCompletions(std::shared_ptr<HttpExchange> exchange);
  void Models(const std::shared_ptr<HttpExchange>& exchange, absl::string_view raw_id);
  // The header-phase check (HttpServerOptions::on_headers): a chat request whose caller does not
  // authenticate is answered before its body is read.
  std::optional<HttpResponse> CheckHeaders(const HttpRequest& head) const;
  // OPTIONS: 204 with Allow, and the CORS headers when an allowed origin asks.
  HttpResponse Preflight(const HttpRequest& r, const char* allowed) const;
  // The caller of a request, from its headers: INVALID_ARGUMENT for two Authorization headers,
  // UNAUTHENTICATED for one that is not a bearer token, then the tenants' answer.
  absl::StatusOr<TenantRegistry::Caller> Authenticate(const HttpRequest& r) const;

  Dispatcher* const dispatcher_;
  const OpenAiFrontOptions options_;
  const CorsPolicy cors_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace tandem::gateway
