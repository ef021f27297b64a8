// Inputs that once crashed a process or met the wrong status, sent as the same bytes to a real
// gateway (gRPC and its HTTP front) and real workers: JSON nested tens of thousands deep in each
// field that carries JSON, requests over the size limit, image types and field names on the HTTP
// front, a policy file nested thousands deep. Each must be refused with INVALID_ARGUMENT (HTTP
// 400/413) naming the field and the limit, and every process must go on serving.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

// `{"a":` `levels` times around 1, closed.
std::string DeepObject(int levels) {
  std::string out;
  out.reserve(6 * static_cast<size_t>(levels) + 1);
  for (int i = 0; i < levels; ++i) out += R"({"a":)";
  out += "1";
  out.append(static_cast<size_t>(levels), '}');
  return out;
}

// A tool schema whose one property nests `levels` deep (the shape that crashed the relay).
std::string DeepSchema(int levels) {
  return absl::StrCat(R"({"type":"object","properties":{"p":)", DeepObject(levels), "}}");
}

// 1 MB of nesting: far past any stack.
constexpr int kMegabyteBomb = 175000;

class InputLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto qwen = std::make_unique<Server>();
    auto nemotron = std::make_unique<Server>();
    auto gateway = std::make_unique<Server>();
    ASSERT_NO_FATAL_FAILURE(StartTwoModelStack({"--http_listen=127.0.0.1:0"}, qwen.get(),
                                               nemotron.get(), gateway.get()));
    qwen_ = qwen.release();
    nemotron_ = nemotron.release();
    gateway_ = gateway.release();
  }
  static void TearDownTestSuite() {
    delete gateway_;
    delete qwen_;
    delete nemotron_;
  }

  void SetUp() override {
    ASSERT_NE(gateway_, nullptr);
    stub_ = tandem::v1::Gateway::NewStub(
        grpc::CreateChannel(gateway_->grpc_address, grpc::InsecureChannelCredentials()));
  }

  grpc::Status Call(const tandem::v1::GenerateRequest& request) {
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(30));
    tandem::v1::GenerateResponse response;
    return stub_->Generate(&ctx, request, &response);
  }

  // The whole answer of a streamed call (the path that relays chunks through the tool parser).
  grpc::Status Stream(const tandem::v1::GenerateRequest& request) {
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(30));
    auto stream = stub_->GenerateStream(&ctx, request);
    tandem::v1::GenerateStreamChunk chunk;
    while (stream->Read(&chunk)) {
    }
    return stream->Finish();
  }

  // Every process alive, and the gateway answering on both fronts.
  void ExpectServing() {
    for (const Server* s : {gateway_, qwen_, nemotron_}) {
      ASSERT_EQ(kill(s->process->pid(), 0), 0) << "a process is gone";
    }
    const grpc::Status s = Call(Prompt("still there?", 4));
    EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
    auto http =
        HttpPost(gateway_->http_address, "/v1/chat/completions",
                 R"({"messages":[{"role":"user","content":"still there?"}],"max_tokens":4})");
    ASSERT_TRUE(http.ok()) << http.status();
    EXPECT_EQ(http->status, 200) << http->body;
  }

  static Server* qwen_;
  static Server* nemotron_;
  static Server* gateway_;
  std::unique_ptr<tandem::v1::Gateway::Stub> stub_;
};

Server* InputLimitsTest::qwen_ = nullptr;
Server* InputLimitsTest::nemotron_ = nullptr;
Server* InputLimitsTest::gateway_ = nullptr;

tandem::v1::GenerateRequest WithTool(const std::string& parameters_json) {
  tandem::v1::GenerateRequest r = Prompt("call the tool", 8);
  auto* tool = r.add_tools();
  tool->set_name("lookup");
  tool->set_parameters_json(parameters_json);
  return r;
}

tandem::v1::GenerateRequest WithToolCallArguments(const std::string& arguments_json) {
  tandem::v1::GenerateRequest r = Prompt("call the tool", 8);
  auto* assistant = r.add_messages();
  assistant->set_role("assistant");
  auto* call = assistant->add_tool_calls();
  call->set_name("lookup");
  call->set_arguments_json(arguments_json);
  auto* result = r.add_messages();
  result->set_role("tool");
  result->add_content()->set_text("42");
  return r;
}

TEST_F(InputLimitsTest, DeepJsonInEveryGrpcFieldIsRefusedAndTheGatewayServes) {
  struct Case {
    tandem::v1::GenerateRequest request;
    std::string field;
  };
  const std::vector<Case> cases = {
      // 60,000 under `properties` crashed the relay's tool parser with the first chunk.
      {WithTool(DeepSchema(60000)), "tools[0].parameters_json"},
      {WithTool(DeepSchema(kMegabyteBomb)), "tools[0].parameters_json"},
      {WithTool(DeepObject(60000)), "tools[0].parameters_json"},
      {WithToolCallArguments(DeepObject(20000)), "messages[1].tool_calls[0].arguments_json"},
      {WithToolCallArguments(DeepObject(kMegabyteBomb)),
       "messages[1].tool_calls[0].arguments_json"},
  };
  for (const Case& c : cases) {
    for (const bool pinned : {false, true}) {
      tandem::v1::GenerateRequest r = c.request;
      if (pinned) r.mutable_hints()->set_model("qwen");
      for (const grpc::Status& s : {Call(r), Stream(r)}) {
        EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
        EXPECT_THAT(s.error_message(), HasSubstr(c.field));
        EXPECT_THAT(s.error_message(), HasSubstr("deeper than 64 levels (--max_json_depth)"));
      }
    }
  }
  // At the limit a schema is served, on both paths.
  tandem::v1::GenerateRequest at_limit = WithTool(DeepSchema(62));  // 2 + 62 = 64 levels
  EXPECT_TRUE(Call(at_limit).ok());
  EXPECT_TRUE(Stream(at_limit).ok());
  ExpectServing();
}

TEST_F(InputLimitsTest, WorkersRefuseDeepJsonThemselves) {
  // A worker validates what reaches it whoever sends it: its prompt builders once recursed per
  // level (20,000 deep crashed the qwen worker; the nemotron builder recursed the same way).
  for (const Server* worker : {qwen_, nemotron_}) {
    auto stub = tandem::v1::Worker::NewStub(
        grpc::CreateChannel(worker->grpc_address, grpc::InsecureChannelCredentials()));
    for (const auto& request :
         {WithTool(DeepSchema(20000)), WithToolCallArguments(DeepObject(20000)),
          WithTool(DeepSchema(kMegabyteBomb))}) {
      tandem::v1::WorkerGenerateRequest w;
      *w.mutable_messages() = request.messages();
      *w.mutable_tools() = request.tools();
      w.mutable_sampling()->set_max_tokens(4);
      grpc::ClientContext ctx;
      Deadline(&ctx, std::chrono::seconds(30));
      auto stream = stub->Generate(&ctx, w);
      tandem::v1::WorkerGenerateChunk chunk;
      while (stream->Read(&chunk)) {
      }
      const grpc::Status s = stream->Finish();
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("--max_json_depth"));
    }
  }
  ExpectServing();
}

TEST_F(InputLimitsTest, DeepJsonBodiesGet400OnTheHttpFront) {
  const std::string user = R"({"role":"user","content":"x"})";
  struct Case {
    std::string body;
    std::string param;  // the path the error names
  };
  const std::vector<Case> cases = {
      // 150,000 deep under tools[0].function.parameters crashed the gateway.
      {absl::StrCat(R"({"messages":[)", user,
                    R"(],"tools":[{"type":"function","function":{"name":"f","parameters":)",
                    DeepSchema(150000), "}}]}"),
       "tools[0].function.parameters.properties.p.a"},
      // An unknown key beside `function` holding [[[...]]] 60,000 deep.
      {absl::StrCat(R"({"messages":[)", user, R"(],"tools":[{"type":"function","x":)",
                    std::string(60000, '['), std::string(60000, ']'),
                    R"(,"function":{"name":"f"}}]})"),
       "tools[0].x[0]"},
      // Tool-call arguments as a JSON object 70,000 deep.
      {absl::StrCat(R"({"messages":[)", user,
                    R"(,{"role":"assistant","tool_calls":[{"id":"c","type":"function",)",
                    R"("function":{"name":"f","arguments":)", DeepObject(70000), "}}]}]}"),
       "messages[1].tool_calls[0].function.arguments"},
      // The same as a string: parsed later, refused by the intake under its OpenAI name.
      {absl::StrCat(R"({"messages":[)", user,
                    R"(,{"role":"assistant","tool_calls":[{"id":"c","type":"function",)",
                    R"("function":{"name":"f","arguments":)",
                    nlohmann::json(DeepObject(kMegabyteBomb)).dump(), "}}]}]}"),
       "messages[1].tool_calls[0].function.arguments"},
  };
  for (const Case& c : cases) {
    auto answer = HttpPost(gateway_->http_address, "/v1/chat/completions", c.body);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 400) << answer->body.substr(0, 300);
    const nlohmann::json error = nlohmann::json::parse(answer->body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << answer->body.substr(0, 300);
    const std::string message = error["error"].value("message", "");
    EXPECT_THAT(message, HasSubstr("deeper than 64 levels (--max_json_depth)"));
    EXPECT_TRUE(error["error"]["param"].is_string()) << answer->body;
    EXPECT_THAT(error["error"].value("param", ""), HasSubstr(c.param)) << message;
  }
  ExpectServing();
}

TEST_F(InputLimitsTest, OversizedRequestsAreInvalidArgumentNotRetryable) {
  // 17 MiB passed gRPC's own limit (then 16 MiB) as RESOURCE_EXHAUSTED, which clients retry.
  // Above --max_request_bytes (32 MiB) every size up to the headroom is our INVALID_ARGUMENT.
  for (const size_t bytes : {size_t{17} << 20, size_t{40} << 20}) {
    const grpc::Status s = Call(Prompt(std::string(bytes, 'a'), 4));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bytes << s.error_message();
    if (bytes > (32u << 20)) {
      EXPECT_THAT(s.error_message(), HasSubstr("(--max_request_bytes)"));
    }
  }
  // A 20 MiB image (--max_image_bytes) fits a request, and as base64 an HTTP body.
  tandem::v1::GenerateRequest image = Prompt("what is this?", 4);
  auto* part = image.mutable_messages(0)->add_content()->mutable_image();
  part->set_mime_type("image/png");
  part->set_data(std::string(20 << 20, 'x'));
  const grpc::Status s = Call(image);
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("--max_request_bytes")));
  // Over the limit on the HTTP front: 413 naming the flag, from the Content-Length alone.
  const int fd = ConnectLoopback(gateway_->http_address);
  ASSERT_GE(fd, 0);
  const std::string head = absl::StrCat(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: ",
      (32 << 20) + 1, "\r\n\r\n");
  ASSERT_EQ(write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) answer.append(buf, n);
  close(fd);
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(answer, HasSubstr("--max_request_bytes"));
  ExpectServing();
}

TEST_F(InputLimitsTest, HttpErrorsNameTheOpenAiFieldAndImageJpgIsJpeg) {
  const std::string bmp =
      absl::StrCat(R"({"messages":[{"role":"user","content":[{"type":"text","text":"what?"},)",
                   R"({"type":"image_url","image_url":{"url":"data:image/bmp;base64,Qk0="}}]}]})");
  auto answer = HttpPost(gateway_->http_address, "/v1/chat/completions", bmp);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 400);
  const nlohmann::json error = nlohmann::json::parse(answer->body, nullptr, false);
  EXPECT_EQ(error["error"].value("param", ""), "messages[0].content[1].image_url.url")
      << answer->body;
  EXPECT_THAT(error["error"].value("message", ""),
              ::testing::StartsWith("messages[0].content[1].image_url.url: unsupported"));
  EXPECT_THAT(answer->body, ::testing::Not(HasSubstr("mime_type")));

  // image/jpg (sent by several OpenAI clients) is taken as JPEG by the gateway.
  tandem::v1::GenerateRequest jpg = Prompt("what is this?", 4);
  auto* part = jpg.mutable_messages(0)->add_content()->mutable_image();
  part->set_mime_type("image/jpg");
  part->set_data("\xff\xd8\xff\xe0 not really a jpeg");
  const grpc::Status s = Call(jpg);
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("unsupported image type")));
  ExpectServing();
}

TEST(PolicyNestingTest, ADeepPolicyFileIsRefusedSayingHowAndWhere) {
  const std::string path = WriteTempFile(
      "deep.yaml",
      absl::StrCat("schema: 1\nrules: ", std::string(5000, '['), std::string(5000, ']'), "\n"));
  const auto [code, output] =
      RunToExit(tandem::testing::GatewayBin(), {"--validate_policy=" + path}, absl::Seconds(20));
  EXPECT_NE(code, 0);
  EXPECT_THAT(output, HasSubstr("deep.yaml:2:"));
  EXPECT_THAT(output, HasSubstr("nested deeper than 64 levels"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("bad file")));
}

}  // namespace
}  // namespace tandem::testing
