// Tool calls end to end through a real gateway process, on both APIs: a scripted worker (this
// test's own tandem.v1.Worker server) answers a request with tools the way both shipped models
// do, in the XML call form, cut into small chunks; the gateway must hand back structured calls
// (gRPC Generate and GenerateStream; the official openai SDK, whole and streamed), forward the
// tools, the assistant's calls and the results to the worker, and answer the turn after the
// results. The prompt side on the real engines is tokenizer_test's (ToolPromptTest) and
// native_serving_test's.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/health_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/streams.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

// What a model that decided to call get_weather writes.
const std::string kCallText =
    "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
    "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";
const std::string kAnswerText = "It is -3C and snowing in Oslo.";

class ScriptedWorker final : public tandem::v1::Worker::Service {
 public:
  explicit ScriptedWorker(std::string model) : model_(std::move(model)) {}

  grpc::Status GetInfo(grpc::ServerContext*, const tandem::v1::WorkerInfoRequest*,
                       tandem::v1::WorkerInfo* info) override {
    info->set_model_name(model_);
    info->set_model_id("scripted/" + model_);
    info->set_engine("scripted");
    info->set_max_context_tokens(4096);
    info->set_max_output_tokens(512);
    info->set_reasoning(true);
    info->set_state(tandem::v1::WorkerInfo::STATE_READY);
    info->mutable_load()->set_max_batch_size(8);
    info->mutable_load()->set_max_queue(8);
    return grpc::Status::OK;
  }

  // Answers with a call when tools are offered and the last message is the user's, else with a
  // sentence; 5 bytes a chunk.
  grpc::Status Generate(grpc::ServerContext*, const tandem::v1::WorkerGenerateRequest* request,
                        grpc::ServerWriter<tandem::v1::WorkerGenerateChunk>* writer) override {
    {
      absl::MutexLock l(&mu_);
      requests_.push_back(*request);
    }
    const bool call = request->tools_size() > 0 && request->messages().rbegin()->role() == "user";
    const std::string& text = call ? kCallText : kAnswerText;
    // Thinking was turned off by these requests: no think block to close.
    int tokens = 0;
    for (size_t i = 0; i < text.size(); i += 5) {
      tandem::v1::WorkerGenerateChunk chunk;
      chunk.set_text(text.substr(i, 5));
      chunk.set_tokens(1);
      ++tokens;
      if (i == 0) chunk.set_prompt_tokens(10);
      if (i + 5 >= text.size()) {
        chunk.set_finish_reason(tandem::v1::FINISH_REASON_STOP);
        chunk.set_completion_tokens(tokens);
      }
      if (!writer->Write(chunk)) break;
    }
    return grpc::Status::OK;
  }

  tandem::v1::WorkerGenerateRequest Last() {
    absl::MutexLock l(&mu_);
    return requests_.empty() ? tandem::v1::WorkerGenerateRequest() : requests_.back();
  }

 private:
  const std::string model_;
  absl::Mutex mu_;
  std::vector<tandem::v1::WorkerGenerateRequest> requests_ ABSL_GUARDED_BY(mu_);
};

class ToolCallsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<std::string> entries;
    for (const char* model : {"qwen", "nemotron"}) {
      auto worker = std::make_unique<ScriptedWorker>(model);
      health_.SetServingStatus("", true);
      grpc::ServerBuilder builder;
      int port = 0;
      builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
      builder.RegisterService(worker.get());
      builder.RegisterService(&health_);
      servers_.push_back(builder.BuildAndStart());
      ASSERT_GT(port, 0);
      entries.push_back(absl::StrCat(model, "=127.0.0.1:", port));
      workers_.push_back(std::move(worker));
    }
    auto gateway = StartGateway(entries, {"--http_listen=127.0.0.1:0"});
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = new Server(std::move(*gateway));
    ASSERT_TRUE(WaitForHealth(gateway_->grpc_address, "model/qwen", true).ok());
    stub_ = tandem::v1::Gateway::NewStub(
        grpc::CreateChannel(gateway_->grpc_address, grpc::InsecureChannelCredentials()));
  }
  static void TearDownTestSuite() {
    delete gateway_;
    for (auto& s : servers_) s->Shutdown();
    servers_.clear();
    workers_.clear();
    stub_.reset();
  }

  static tandem::v1::GenerateRequest WithTools() {
    tandem::v1::GenerateRequest r = Prompt("What is the weather in Oslo?", 64);
    r.mutable_hints()->set_model("qwen");
    r.mutable_hints()->mutable_reasoning()->set_mode(tandem::v1::REASONING_MODE_OFF);
    auto* t = r.add_tools();
    t->set_name("get_weather");
    t->set_parameters_json(
        R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": )"
        R"("integer"}}})");
    return r;
  }

  static void ExpectTheCall(const tandem::v1::ToolCall& call) {
    EXPECT_EQ(call.name(), "get_weather");
    EXPECT_THAT(call.id(), ::testing::StartsWith("call_"));
    const auto args = nlohmann::json::parse(call.arguments_json());
    EXPECT_EQ(args["city"], "Oslo");
    EXPECT_EQ(args["days"], 2);  // typed by the schema
  }

  static std::vector<std::unique_ptr<ScriptedWorker>> workers_;
  static std::vector<std::unique_ptr<grpc::Server>> servers_;
  static HealthService health_;
  static Server* gateway_;
  static std::unique_ptr<tandem::v1::Gateway::Stub> stub_;
};

std::vector<std::unique_ptr<ScriptedWorker>> ToolCallsTest::workers_;
std::vector<std::unique_ptr<grpc::Server>> ToolCallsTest::servers_;
HealthService ToolCallsTest::health_;
Server* ToolCallsTest::gateway_ = nullptr;
std::unique_ptr<tandem::v1::Gateway::Stub> ToolCallsTest::stub_;

TEST_F(ToolCallsTest, GrpcRoundTrip) {
  tandem::v1::GenerateResponse first;
  ASSERT_TRUE(UnaryGenerate(stub_.get(), WithTools(), &first, std::chrono::seconds(20)).ok());
  EXPECT_EQ(first.finish_reason(), tandem::v1::FINISH_REASON_TOOL_CALLS);
  EXPECT_EQ(first.text(), "Let me check.\n\n");
  ASSERT_EQ(first.tool_calls_size(), 1);
  ExpectTheCall(first.tool_calls(0));
  // The worker got the tools.
  EXPECT_EQ(workers_[0]->Last().tools_size(), 1);

  // The results go back; the model answers from them.
  tandem::v1::GenerateRequest second = WithTools();
  auto* assistant = second.add_messages();
  assistant->set_role("assistant");
  assistant->add_content()->set_text(first.text());
  *assistant->add_tool_calls() = first.tool_calls(0);
  auto* result = second.add_messages();
  result->set_role("tool");
  result->set_tool_call_id(first.tool_calls(0).id());
  result->add_content()->set_text("-3C, snow");
  tandem::v1::GenerateResponse answer;
  ASSERT_TRUE(UnaryGenerate(stub_.get(), second, &answer, std::chrono::seconds(20)).ok());
  EXPECT_EQ(answer.text(), kAnswerText);
  EXPECT_EQ(answer.finish_reason(), tandem::v1::FINISH_REASON_STOP);
  EXPECT_EQ(answer.tool_calls_size(), 0);
  const tandem::v1::WorkerGenerateRequest forwarded = workers_[0]->Last();
  ASSERT_EQ(forwarded.messages_size(), 3);
  EXPECT_EQ(forwarded.messages(1).tool_calls(0).id(), first.tool_calls(0).id());
  EXPECT_EQ(forwarded.messages(2).tool_call_id(), first.tool_calls(0).id());
}

TEST_F(ToolCallsTest, GrpcStreamCarriesTheCallWhenItCloses) {
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(20));
  auto reader = stub_->GenerateStream(&ctx, WithTools());
  tandem::v1::GenerateStreamChunk chunk;
  std::string text;
  std::vector<tandem::v1::ToolCall> calls;
  tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_UNSPECIFIED;
  while (reader->Read(&chunk)) {
    text += chunk.text();
    for (const auto& c : chunk.tool_calls()) calls.push_back(c);
    if (chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      finish = chunk.finish_reason();
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(text, "Let me check.\n\n");
  ASSERT_EQ(calls.size(), 1u);
  ExpectTheCall(calls[0]);
  EXPECT_EQ(finish, tandem::v1::FINISH_REASON_TOOL_CALLS);
}

TEST_F(ToolCallsTest, OpenAiSdkRoundTrip) {
  const std::string modules = tandem::testing::SourcePath("/examples/node/node_modules");
  const auto [code, out] =
      RunToExit("/usr/bin/env",
                {"TANDEM_NODE_MODULES=" + modules,
                 "TANDEM_OPENAI_URL=http://" + gateway_->http_address + "/v1", "/usr/bin/node",
                 "--test", tandem::testing::SourcePath("/tests/clients/openai_tools.test.mjs")},
                absl::Seconds(60));
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("# fail 0")) << out;
}

}  // namespace
}  // namespace tandem::testing
