#include "gateway/openai_front.h"

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gateway/openai_call.h"
#include "gateway/openai_codec.h"

namespace tandem::gateway {
namespace {

constexpr absl::string_view kTimeoutHeader = "x-tandem-timeout-ms";

void RespondError(HttpExchange& exchange, const absl::Status& status) {
  HttpResponse r;
  r.status = openai::HttpStatusFor(status.code());
  r.headers.emplace_back("content-type", "application/json");
  r.body = openai::ErrorJson(status);
  exchange.Respond(std::move(r));
}

// 405 with the method the path takes.
void RespondWrongMethod(HttpExchange& exchange, absl::string_view path, const char* allowed) {
  HttpResponse r;
  r.status = 405;
  r.headers.emplace_back("content-type", "application/json");
  r.headers.emplace_back("allow", allowed);
  r.body = openai::ErrorJson(absl::InvalidArgumentError(absl::StrCat(path, " takes ", allowed)));
  exchange.Respond(std::move(r));
}

}  // namespace

absl::StatusOr<std::unique_ptr<OpenAiFront>> OpenAiFront::Start(const std::string& address,
                                                                HttpServerOptions options,
                                                                GatewayService* service) {
  std::unique_ptr<OpenAiFront> front(new OpenAiFront(service));
  OpenAiFront* self = front.get();
  auto server =
      HttpServer::Start(address, std::move(options),
                        [self](std::shared_ptr<HttpExchange> e) { self->Handle(std::move(e)); });
  if (!server.ok()) return server.status();
  front->server_ = std::move(*server);
  return front;
}

void OpenAiFront::Handle(std::shared_ptr<HttpExchange> exchange) {
  const HttpRequest& r = exchange->request();
  absl::string_view path = r.target;
  path = path.substr(0, path.find('?'));
  if (path == "/v1/chat/completions") {
    if (r.method != "POST") return RespondWrongMethod(*exchange, path, "POST");
    return ChatCompletions(std::move(exchange));
  }
  if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/")) {
    absl::string_view id = path;
    absl::ConsumePrefix(&id, "/v1/models");
    absl::ConsumePrefix(&id, "/");
    return Models(exchange, std::string(id));
  }
  RespondError(*exchange,
               absl::NotFoundError(absl::StrCat(
                   "no such endpoint: ", r.method, " ", path,
                   " (this gateway serves POST /v1/chat/completions and GET /v1/models)")));
}

void OpenAiFront::ChatCompletions(std::shared_ptr<HttpExchange> exchange) {
  const HttpRequest& r = exchange->request();
  auto deadline = std::chrono::system_clock::time_point::max();
  if (absl::string_view t = r.Header(kTimeoutHeader); !t.empty()) {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(t, &ms) || ms < 1) {
      return RespondError(*exchange,
                          absl::InvalidArgumentError(absl::StrCat(
                              kTimeoutHeader, ": expected a whole number of milliseconds >= 1")));
    }
    deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
  }
  absl::StatusOr<openai::ChatRequest> decoded = openai::DecodeChatRequest(r.body, service_->intake().options().limits.max_json_depth);
  if (decoded.ok()) {
    auto* hints = decoded->request.mutable_hints();
    if (!hints->model().empty()) hints->set_model(service_->ResolveModel(hints->model()));
  }
  OpenAiCall::Start(service_, std::move(exchange), std::move(decoded), deadline);
}

void OpenAiFront::Models(const std::shared_ptr<HttpExchange>& exchange, const std::string& id) {
  const HttpRequest& r = exchange->request();
  if (r.method != "GET") {
    return RespondError(
        *exchange, absl::Status(absl::StatusCode::kFailedPrecondition, "/v1/models takes GET"));
  }
  absl::StatusOr<TenantRegistry::Caller> caller =
      service_->Authenticate(ApiKeyFromHeaders(r.Header("authorization"), r.Header("x-api-key")));
  if (!caller.ok()) return RespondError(*exchange, caller.status());
  const int64_t created = absl::ToUnixSeconds(absl::Now());
  const std::vector<tandem::v1::ModelStatus> models = service_->VisibleModels(*caller);
  HttpResponse out;
  out.headers.emplace_back("content-type", "application/json");
  if (id.empty()) {
    out.body = openai::ModelListJson(models, created);
    return exchange->Respond(std::move(out));
  }
  for (const auto& m : models) {
    if (m.name() == id) out.body = openai::ModelJson(m.name(), m.model_id(), created);
  }
  if (id == "auto") out.body = openai::ModelJson("auto", "", created);
  if (out.body.empty()) {
    return RespondError(*exchange,
                        absl::NotFoundError(absl::StrCat("model '", id, "' is not served here")));
  }
  exchange->Respond(std::move(out));
}

}  // namespace tandem::gateway
