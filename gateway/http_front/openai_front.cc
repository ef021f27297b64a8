#include "gateway/http_front/openai_front.h"

#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gateway/http_front/cors_exchange.h"
#include "gateway/http_front/openai_call.h"
#include "gateway/http_front/openai_codec.h"
#include "gateway/http_front/openai_request.h"

namespace tandem::gateway {
namespace {

constexpr absl::string_view kTimeoutHeader = "x-tandem-timeout-ms";
constexpr absl::string_view kChatPath = "/v1/chat/completions";
constexpr absl::string_view kModelsPath = "/v1/models";

HttpResponse ErrorResponse(const absl::Status& status,
                           openai::ErrorCode code = openai::ErrorCode::kDefault) {
  HttpResponse r;
  r.status = openai::HttpStatusFor(status.code());
  r.headers.emplace_back("content-type", "application/json");
  // RFC 9110 section 11.6.1: a 401 says which scheme it wants.
  if (r.status == 401) r.headers.emplace_back("www-authenticate", "Bearer");
  r.body = openai::ErrorJson(status, code);
  return r;
}

void RespondError(HttpExchange& exchange, const absl::Status& status,
                  openai::ErrorCode code = openai::ErrorCode::kDefault) {
  exchange.Respond(ErrorResponse(status, code));
}

// The methods each path takes, for 405's Allow and OPTIONS; null for a path not served.
const char* AllowedMethods(absl::string_view path) {
  if (path == kChatPath) return "POST, OPTIONS";
  if (path == kModelsPath || absl::StartsWith(path, "/v1/models/")) return "GET, HEAD, OPTIONS";
  return nullptr;
}

// 405 with the methods the path takes.
void RespondWrongMethod(HttpExchange& exchange, absl::string_view method, absl::string_view path,
                        const char* allowed) {
  HttpResponse r = ErrorResponse(absl::InvalidArgumentError(
      absl::StrCat(path, " does not take ", method, "; it takes ", allowed)));
  r.status = 405;
  r.headers.emplace_back("allow", allowed);
  exchange.Respond(std::move(r));
}

// "%2F" and the like decoded; false for a malformed escape.
bool PercentDecode(absl::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    int value = 0;
    if (i + 2 >= in.size() || !absl::ascii_isxdigit(in[i + 1]) ||
        !absl::ascii_isxdigit(in[i + 2])) {
      return false;
    }
    for (const char c : in.substr(i + 1, 2)) {
      value = value * 16 + (absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10);
    }
    out->push_back(static_cast<char>(value));
    i += 2;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<OpenAiFront>> OpenAiFront::Start(const std::string& address,
                                                                HttpServerOptions options,
                                                                OpenAiFrontOptions front_options,
                                                                Dispatcher* dispatcher) {
  absl::StatusOr<CorsPolicy> cors = CorsPolicy::Create(front_options.cors_origins);
  if (!cors.ok()) return cors.status();
  std::unique_ptr<OpenAiFront> front(
      new OpenAiFront(dispatcher, std::move(front_options), *std::move(cors)));
  OpenAiFront* self = front.get();
  // Who is calling, from the headers alone: a chat body from a caller without a valid key is
  // never read, let alone parsed.
  options.on_headers = [self](const HttpRequest& head) { return self->CheckHeaders(head); };
  auto server =
      HttpServer::Start(address, std::move(options),
                        [self](std::shared_ptr<HttpExchange> e) { self->Handle(std::move(e)); });
  if (!server.ok()) return server.status();
  front->server_ = std::move(*server);
  return front;
}

absl::StatusOr<TenantRegistry::Caller> OpenAiFront::Authenticate(const HttpRequest& r) const {
  int authorizations = 0;
  for (const auto& [name, value] : r.headers) authorizations += name == "authorization";
  if (authorizations > 1) {
    // Which one would count is a guess two parsers may make differently: neither does.
    return absl::InvalidArgumentError("authorization: the header is given more than once");
  }
  const absl::string_view authorization = r.Header("authorization");
  if (authorization.size() > 0 &&
      !(authorization.size() > 7 &&
        absl::EqualsIgnoreCase(authorization.substr(0, 7), "Bearer "))) {
    return absl::UnauthenticatedError(
        "authorization: expected 'Bearer KEY' (the header holds no bearer token)");
  }
  return dispatcher_->access().Authenticate(
      ApiKeyFromHeaders(authorization, r.Header("x-api-key")));
}

std::optional<HttpResponse> OpenAiFront::CheckHeaders(const HttpRequest& head) const {
  absl::string_view path = head.target;
  path = path.substr(0, path.find('?'));
  if (head.method != "POST" || path != kChatPath) return std::nullopt;
  absl::StatusOr<TenantRegistry::Caller> caller = Authenticate(head);
  if (caller.ok()) return std::nullopt;
  HttpResponse refused = ErrorResponse(caller.status());
  // A browser page of an allowed origin may read why.
  if (const absl::string_view origin = head.Header("origin"); cors_.Allows(origin)) {
    cors_.AddResponseHeaders(origin, &refused.headers);
  }
  return refused;
}

void OpenAiFront::Handle(std::shared_ptr<HttpExchange> exchange) {
  const HttpRequest& r = exchange->request();
  absl::string_view path = r.target;
  path = path.substr(0, path.find('?'));
  const char* allowed = AllowedMethods(path);
  const absl::string_view origin = r.Header("origin");
  if (r.method == "OPTIONS") {
    // A CORS preflight, or a plain OPTIONS: answered before any authentication (a browser sends
    // no credentials on a preflight).
    return exchange->Respond(Preflight(r, allowed));
  }
  if (!origin.empty() && cors_.Allows(origin)) {
    exchange = std::make_shared<CorsExchange>(std::move(exchange), &cors_, std::string(origin));
  }
  if (allowed == nullptr) {
    return RespondError(*exchange,
                        absl::NotFoundError(absl::StrCat(
                            "no such endpoint: ", r.method, " ", path,
                            " (this gateway serves POST /v1/chat/completions and GET /v1/models)")),
                        openai::ErrorCode::kNone);
  }
  if (path == kChatPath) {
    if (r.method != "POST") return RespondWrongMethod(*exchange, r.method, path, allowed);
    return ChatCompletions(std::move(exchange));
  }
  if (r.method != "GET" && r.method != "HEAD") {
    return RespondWrongMethod(*exchange, r.method, path, allowed);
  }
  absl::string_view id = path;
  absl::ConsumePrefix(&id, kModelsPath);
  absl::ConsumePrefix(&id, "/");
  Models(exchange, id);
}

HttpResponse OpenAiFront::Preflight(const HttpRequest& r, const char* allowed) const {
  HttpResponse out;
  out.status = 204;
  if (allowed == nullptr) {
    return ErrorResponse(absl::NotFoundError(absl::StrCat("no such endpoint: ", r.target)),
                         openai::ErrorCode::kNone);
  }
  out.headers.emplace_back("allow", allowed);
  const absl::string_view origin = r.Header("origin");
  if (origin.empty()) return out;  // not a browser's preflight
  if (!cors_.Allows(origin)) {
    HttpResponse refused = ErrorResponse(absl::PermissionDeniedError(absl::StrCat(
        "origin not allowed: this gateway serves browsers only from --http_cors_origins")));
    refused.headers.emplace_back("vary", "Origin");
    return refused;
  }
  cors_.AddPreflightHeaders(origin, allowed, r.Header("access-control-request-headers"),
                            &out.headers);
  return out;
}

void OpenAiFront::ChatCompletions(std::shared_ptr<HttpExchange> exchange) {
  // The caller was authenticated from the headers (CheckHeaders) before the body was read.
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
  absl::StatusOr<openai::ChatRequest> decoded =
      openai::DecodeChatRequest(r.body, options_.max_json_depth);
  if (decoded.ok()) {
    auto* hints = decoded->request.mutable_hints();
    if (!hints->model().empty())
      hints->set_model(dispatcher_->access().ResolveModel(hints->model()));
  }
  OpenAiCall::Start(dispatcher_, std::move(exchange), std::move(decoded), deadline);
}

void OpenAiFront::Models(const std::shared_ptr<HttpExchange>& exchange, absl::string_view raw_id) {
  const HttpRequest& r = exchange->request();
  absl::StatusOr<TenantRegistry::Caller> caller = Authenticate(r);
  if (!caller.ok()) return RespondError(*exchange, caller.status());
  std::string id;
  if (!PercentDecode(raw_id, &id)) {
    return RespondError(*exchange,
                        absl::InvalidArgumentError("model: a malformed %-escape in the path"));
  }
  const int64_t created = absl::ToUnixSeconds(absl::Now());
  const std::vector<tandem::v1::ModelStatus> models = dispatcher_->access().VisibleModels(*caller);
  HttpResponse out;
  out.headers.emplace_back("content-type", "application/json");
  if (id.empty() && raw_id.empty()) {
    out.body = openai::ModelListJson(models, created);
    return exchange->Respond(std::move(out));
  }
  // The names chat accepts: a routing name, or a model's upstream id (any case), or "auto".
  const std::string name = dispatcher_->access().ResolveModel(id);
  for (const auto& m : models) {
    if (m.name() == name) out.body = openai::ModelJson(m.name(), m.model_id(), created);
  }
  if (id == "auto") out.body = openai::ModelJson("auto", "", created);
  if (out.body.empty()) {
    return RespondError(*exchange,
                        absl::NotFoundError(absl::StrCat("model '", id, "' is not served here")));
  }
  exchange->Respond(std::move(out));
}

}  // namespace tandem::gateway
