// The OpenAI-compatible front's conventions, against a real gateway with tenants over raw
// sockets: who the caller is comes from the headers before any body is parsed (a depth bomb
// without a key is a 401, with one a 400, and never a crash), 401s say their scheme, methods and
// unknown paths answer as RFC 9110 and OpenAI do, CORS is opt-in, models are retrieved by the
// names chat accepts, and bodies are read strictly (duplicate keys, stream_options without stream,
// unanswered tool results).
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "policies/tenant_config.h"
#include "tests/support/stack.h"
#include "tests/support/temp_path.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kKey[] = "Authorization: Bearer app-secret";

std::string Header(const HttpAnswer& a, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(a.headers, "\r\n")) {
    const size_t colon = line.find(':');
    if (colon != absl::string_view::npos && absl::EqualsIgnoreCase(line.substr(0, colon), name)) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "";
}

// A request in raw form on a connection of its own: the answer, or an error if none came.
absl::StatusOr<HttpAnswer> Send(const std::string& address, const std::string& method,
                                const std::string& path, const std::string& body,
                                const std::vector<std::string>& headers) {
  std::string req =
      absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
  for (const std::string& h : headers) absl::StrAppend(&req, h, "\r\n");
  if (!body.empty()) absl::StrAppend(&req, "Content-Length: ", body.size(), "\r\n");
  absl::StrAppend(&req, "\r\n", body);
  return HttpExchangeRaw(address, req);
}

class HttpFrontTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<std::string> entries;
    for (const char* model : {"qwen", "nemotron"}) {
      auto w = StartWorker(model, {"--synthetic_time_scale=0"});
      ASSERT_TRUE(w.ok()) << w.status();
      entries.push_back(absl::StrCat(model, "=", w->grpc_address));
      workers_->push_back(std::move(*w));
    }
    const std::string tenants =
        WriteTempFile("tenants.yaml", absl::StrCat("tenants:\n  - name: app\n    keys: [",
                                                   policies::TenantKeyEntry("app-secret"), "]\n"));
    auto gateway = StartGateway(entries, {"--tenants=" + tenants, "--http_listen=127.0.0.1:0",
                                          "--http_cors_origins=https://app.example.com"});
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    *gateway_ = std::move(*gateway);
    ASSERT_TRUE(WaitForReadyModels(gateway_->metrics_address, {"qwen", "nemotron"}));
  }
  static void TearDownTestSuite() {
    *gateway_ = {};
    workers_->clear();
  }

  static absl::StatusOr<HttpAnswer> Chat(const std::string& body,
                                         const std::vector<std::string>& headers = {kKey}) {
    std::vector<std::string> h = headers;
    h.push_back("Content-Type: application/json");
    return Send(gateway_->http_address, "POST", "/v1/chat/completions", body, h);
  }

  static void ExpectAlive() {
    ASSERT_EQ(kill(gateway_->process->pid(), 0), 0) << "the gateway is gone";
    auto ok = Chat(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})");
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ(ok->status, 200) << ok->body;
  }

  static Server* gateway_;
  static std::vector<Server>* workers_;
};

Server* HttpFrontTest::gateway_ = new Server;
std::vector<Server>* HttpFrontTest::workers_ = new std::vector<Server>;

TEST_F(HttpFrontTest, DeepBodiesAreRefusedWithOrWithoutAKeyAndNothingCrashes) {
  const std::string user = R"({"role":"user","content":"x"})";
  const std::vector<std::string> bodies = {
      // An unknown key beside `function` holding [[[...]]] 60,000 deep.
      absl::StrCat(R"({"messages":[)", user, R"(],"tools":[{"type":"function","x":)",
                   std::string(60000, '['), std::string(60000, ']'),
                   R"(,"function":{"name":"f"}}]})"),
      // messages[].tool_calls[].function.arguments as an object 70,000 deep.
      [&] {
        std::string deep;
        for (int i = 0; i < 70000; ++i) deep += R"({"a":)";
        deep += "1" + std::string(70000, '}');
        return absl::StrCat(R"({"messages":[)", user,
                            R"(,{"role":"assistant","tool_calls":[{"id":"c","type":"function",)",
                            R"("function":{"name":"f","arguments":)", deep, "}}]}]})");
      }()};
  for (const std::string& body : bodies) {
    for (const std::vector<std::string>& auth :
         std::vector<std::vector<std::string>>{{}, {"Authorization: Bearer wrong"}, {kKey}}) {
      auto a = Chat(body, auth);
      ASSERT_TRUE(a.ok()) << a.status();
      if (auth.empty() || auth[0] != kKey) {
        EXPECT_EQ(a->status, 401) << a->body.substr(0, 200);
        EXPECT_EQ(Header(*a, "www-authenticate"), "Bearer");
      } else {
        EXPECT_EQ(a->status, 400);
        EXPECT_THAT(a->body, HasSubstr("deeper than 64 levels (--max_json_depth)"));
      }
    }
  }
  // Without a key the body is not even read: headers announcing 30 MB get their 401 at once.
  const int fd = ConnectLoopback(gateway_->http_address);
  ASSERT_GE(fd, 0);
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 30000000\r\n\r\n{\"messages\": [";
  ASSERT_EQ(write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) answer.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(answer, HasSubstr("Connection: close"));
  // Malformed JSON without a key is a 401 too: the body is never looked at.
  auto junk = Chat("{not json", {});
  ASSERT_TRUE(junk.ok());
  EXPECT_EQ(junk->status, 401);
  ExpectAlive();
}

TEST_F(HttpFrontTest, AuthorizationMustBeOneBearerToken) {
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})";
  auto bare = Chat(body, {"Authorization: app-secret"});
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->status, 401);
  EXPECT_THAT(bare->body, HasSubstr("expected 'Bearer KEY'"));
  auto twice = Chat(body, {kKey, "Authorization: Bearer other"});
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->status, 400);
  EXPECT_THAT(twice->body, HasSubstr("more than once"));
  auto none = Chat(body, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->status, 401);
  EXPECT_THAT(none->body, ::testing::Not(HasSubstr("metadata")));
  auto x_api_key = Chat(body, {"x-api-key: app-secret"});
  ASSERT_TRUE(x_api_key.ok());
  EXPECT_EQ(x_api_key->status, 200) << x_api_key->body;
}

TEST_F(HttpFrontTest, MethodsPathsAndModels) {
  const std::string& at = gateway_->http_address;
  auto post_models = Send(at, "POST", "/v1/models", "{}", {kKey});
  ASSERT_TRUE(post_models.ok());
  EXPECT_EQ(post_models->status, 405);
  EXPECT_EQ(Header(*post_models, "allow"), "GET, HEAD, OPTIONS");
  auto options = Send(at, "OPTIONS", "/v1/chat/completions", "", {});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->status, 204);
  EXPECT_EQ(Header(*options, "allow"), "POST, OPTIONS");
  auto unknown = Send(at, "POST", "/v1/embeddings", "{}", {kKey});
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 404);
  EXPECT_TRUE(json::parse(unknown->body)["error"]["code"].is_null()) << unknown->body;
  // Retrieve a model by the names chat accepts: routing name, upstream id (slashes, any case,
  // %-escaped), "auto".
  auto list = Send(at, "GET", "/v1/models", "", {kKey});
  ASSERT_TRUE(list.ok());
  const json models = json::parse(list->body);
  std::string upstream;
  for (const json& m : models["data"]) {
    if (m["id"] == "qwen") upstream = m.value("root", "");
  }
  std::vector<std::string> ids = {"qwen", "auto"};
  if (!upstream.empty()) {
    ids.push_back(upstream);
    ids.push_back(absl::AsciiStrToUpper(upstream));
    ids.push_back(absl::StrReplaceAll(upstream, {{"/", "%2F"}}));
  }
  for (const std::string& id : ids) {
    auto one = Send(at, "GET", "/v1/models/" + id, "", {kKey});
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(one->status, 200) << id << " " << one->body;
  }
  auto missing = Send(at, "GET", "/v1/models/gpt-4", "", {kKey});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["code"], "model_not_found");
}

TEST_F(HttpFrontTest, CorsIsForListedOriginsOnly) {
  const std::string& at = gateway_->http_address;
  auto preflight = Send(at, "OPTIONS", "/v1/chat/completions", "",
                        {"Origin: https://app.example.com", "Access-Control-Request-Method: POST",
                         "Access-Control-Request-Headers: authorization, content-type"});
  ASSERT_TRUE(preflight.ok());
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(Header(*preflight, "access-control-allow-origin"), "https://app.example.com");
  EXPECT_THAT(Header(*preflight, "access-control-allow-methods"), HasSubstr("POST"));
  EXPECT_EQ(Header(*preflight, "access-control-allow-headers"), "authorization, content-type");
  auto stranger = Send(at, "OPTIONS", "/v1/chat/completions", "",
                       {"Origin: https://evil.example", "Access-Control-Request-Method: POST"});
  ASSERT_TRUE(stranger.ok());
  EXPECT_EQ(stranger->status, 403);
  EXPECT_EQ(Header(*stranger, "access-control-allow-origin"), "");
  // An answer to an allowed origin says so, and lets the page read Tandem's headers.
  auto chat = Chat(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})",
                   {kKey, "Origin: https://app.example.com"});
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->status, 200);
  EXPECT_EQ(Header(*chat, "access-control-allow-origin"), "https://app.example.com");
  EXPECT_THAT(Header(*chat, "access-control-expose-headers"), HasSubstr("x-tandem-model"));
  auto other = Chat(R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})",
                    {kKey, "Origin: https://evil.example"});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(Header(*other, "access-control-allow-origin"), "");
}

TEST_F(HttpFrontTest, BodiesAreReadStrictly) {
  struct Case {
    std::string body;
    std::string param;
    std::string says;
  };
  const std::string user = R"({"role":"user","content":"x"})";
  const std::vector<Case> cases = {
      {R"({"messages":[{"role":"user","content":"x","role":"system"}]})", "messages[0]",
       "is given twice"},
      {absl::StrCat(R"({"messages":[)", user, R"(],"stream_options":{"include_usage":true}})"),
       "stream_options", "only allowed when stream is true"},
      {absl::StrCat(R"({"messages":[)", user, R"(],"max_tokens":2147483648})"), "max_tokens",
       "2147483647"},
      {absl::StrCat(R"({"messages":[)", user,
                    R"(,{"role":"tool","tool_call_id":"c9","content":"r"}]})"),
       "messages[1].tool_call_id", "matches no tool call"},
      {absl::StrCat(R"({"messages":[)", user,
                    R"(,{"role":"assistant","tool_calls":[{"id":"c1","type":"function",)",
                    R"("function":{"name":"f","arguments":"[1]"}}]}]})"),
       "messages[1].tool_calls[0].function.arguments", "not a JSON object"},
  };
  for (const Case& c : cases) {
    auto a = Chat(c.body);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->status, 400) << c.body;
    const json e = json::parse(a->body, nullptr, false);
    EXPECT_EQ(e["error"].value("param", ""), c.param) << a->body;
    EXPECT_THAT(e["error"].value("message", ""), HasSubstr(c.says));
    EXPECT_THAT(a->body, ::testing::Not(HasSubstr("arguments_json")));
  }
  auto broken = Chat(R"({"messages": [)");
  ASSERT_TRUE(broken.ok());
  EXPECT_EQ(broken->status, 400);
  EXPECT_THAT(broken->body, HasSubstr("stops being JSON at byte"));
  EXPECT_THAT(broken->body, ::testing::Not(HasSubstr("json.exception")));
  ExpectAlive();
}

}  // namespace
}  // namespace tandem::testing
