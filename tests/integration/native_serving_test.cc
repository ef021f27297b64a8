// The native engine end to end: random-weight checkpoints of both architectures written in the
// released layout by tandem-make-checkpoint (with the Qwen3 tokenizer), served by real
// tandem-worker --engine=native processes behind a real gateway, streamed to the client.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/support/golden_files.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/streams.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

class NativeServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& [model, arch] : std::vector<std::pair<std::string, std::string>>{
             {"qwen", "qwen3_5_moe"}, {"nemotron", "nemotron_h"}}) {
      // --max_image_pixels: the test images fit, a header claiming 1000x1000 does not.
      auto w = StartWorker(
          model, {"--engine=native", "--checkpoint=" + NativeCheckpoint(arch),
                  "--memory_budget=268435456", "--native_threads=1", "--max_image_pixels=100000"});
      ASSERT_TRUE(w.ok()) << w.status();
      entries_.push_back(model + "=" + w->grpc_address);
      workers_.push_back(std::move(*w));
    }
    auto g = StartGateway(entries_);
    ASSERT_TRUE(g.ok()) << g.status();
    gateway_ = std::move(*g);
    ASSERT_TRUE(WaitForHealth(gateway_.grpc_address, "model/qwen", true).ok());
    ASSERT_TRUE(WaitForHealth(gateway_.grpc_address, "model/nemotron", true).ok());
    stub_ = tandem::v1::Gateway::NewStub(
        grpc::CreateChannel(gateway_.grpc_address, grpc::InsecureChannelCredentials()));
  }

  struct Streamed {
    grpc::Status status;
    std::string text;
    std::string model;
    int32_t completion_tokens = 0;
    int chunks = 0;
    tandem::v1::FinishReason finish = tandem::v1::FINISH_REASON_UNSPECIFIED;
  };
  Streamed Stream(const tandem::v1::GenerateRequest& req) {
    Streamed out;
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(60));
    auto reader = stub_->GenerateStream(&ctx, req);
    tandem::v1::GenerateStreamChunk c;
    while (reader->Read(&c)) {
      ++out.chunks;
      if (c.has_route()) out.model = c.route().model();
      out.text += c.text();
      if (c.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
        out.finish = c.finish_reason();
        out.completion_tokens = c.usage().completion_tokens();
      }
    }
    out.status = reader->Finish();
    return out;
  }

  std::vector<Server> workers_;
  std::vector<std::string> entries_;
  Server gateway_;
  std::unique_ptr<tandem::v1::Gateway::Stub> stub_;
};

TEST_F(NativeServingTest, BothNativeModelsStreamThroughTheGateway) {
  for (const auto& [objective, model] : std::vector<std::pair<tandem::v1::Objective, std::string>>{
           {tandem::v1::OBJECTIVE_ACCURACY, "qwen"}, {tandem::v1::OBJECTIVE_LATENCY, "nemotron"}}) {
    tandem::v1::GenerateRequest req = Prompt("Write a haiku about queues. 日本語も", 12);
    req.mutable_hints()->set_objective(objective);
    const Streamed s = Stream(req);
    ASSERT_TRUE(s.status.ok()) << s.status.error_message();
    EXPECT_EQ(s.model, model);
    EXPECT_GT(s.completion_tokens, 0);
    EXPECT_LE(s.completion_tokens, 12);
    EXPECT_NE(s.finish, tandem::v1::FINISH_REASON_UNSPECIFIED);
    EXPECT_GE(s.chunks, 2);
    // Greedy decoding of the same prompt is reproducible.
    const Streamed again = Stream(req);
    EXPECT_EQ(again.text, s.text) << model;
  }
  // The workers report the native engine; the multimodal qwen checkpoint takes images.
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Server& w = workers_[i];
    tandem::v1::WorkerInfo info;
    ASSERT_TRUE(GetWorkerInfo(w.grpc_address, &info).ok());
    EXPECT_EQ(info.engine(), "native");
    EXPECT_EQ(info.vision(), info.model_name() == "qwen") << info.model_name();
    EXPECT_THAT(info.model_id(), HasSubstr("random-weights/"));
  }
  auto metrics = HttpGet(workers_[0].metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(MetricValue(*metrics, "tandem_worker_sequence_memory_budget_bytes").value_or(0),
            268435456);
}

tandem::v1::Image* AddImage(tandem::v1::GenerateRequest* req, const std::string& path,
                            const std::string& mime) {
  auto* image = req->mutable_messages(0)->add_content()->mutable_image();
  image->set_data(ReadFileText(path));
  image->set_mime_type(mime);
  return image;
}

// Images reach qwen: a PNG and a JPEG in one request are decoded, preprocessed, encoded by the
// vision tower and answered; the image tokens show in the prompt count.
TEST_F(NativeServingTest, ImagesAreAnsweredByQwen) {
  const std::string png =
      tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl/a_wide_352x192.png");
  const std::string jpeg = tandem::testing::SourcePath("/tests/images/checker_96x64.jpg");
  tandem::v1::GenerateRequest text_only = Prompt("What do these pictures show?", 8);
  tandem::v1::GenerateRequest req = text_only;
  AddImage(&req, png, "image/png");
  AddImage(&req, jpeg, "image/jpeg");
  tandem::v1::GenerateResponse resp;
  const grpc::Status status = UnaryGenerate(stub_.get(), req, &resp, std::chrono::seconds(60));
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.route().model(), "qwen");
  EXPECT_GT(resp.usage().completion_tokens(), 0);
  grpc::ClientContext ctx2;
  Deadline(&ctx2, std::chrono::seconds(60));
  text_only.mutable_hints()->set_model("qwen");
  tandem::v1::GenerateResponse text_resp;
  ASSERT_TRUE(stub_->Generate(&ctx2, text_only, &text_resp).ok());
  // 352x192 takes 66 tokens and 96x64 (scaled up to the 65536-pixel minimum: 320x224) 70, each
  // wrapped in vision start/end.
  EXPECT_EQ(resp.usage().prompt_tokens() - text_resp.usage().prompt_tokens(), 66 + 70 + 4);
  // The same request streamed gives the same greedy answer.
  req.mutable_sampling()->set_temperature(0);
  tandem::v1::GenerateResponse first;
  ASSERT_TRUE(UnaryGenerate(stub_.get(), req, &first, std::chrono::seconds(60)).ok());
  const Streamed streamed = Stream(req);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  EXPECT_EQ(streamed.text, first.text());
}

// `png` with its header's size set to width x height (the chunk's CRC recomputed).
std::string WithPngSize(std::string png, uint32_t width, uint32_t height) {
  auto put = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + i] = static_cast<char>((v >> (24 - 8 * i)) & 0xFF);
  };
  put(16, width);
  put(20, height);
  uint32_t crc = 0xFFFFFFFFu;  // CRC-32 (PNG's) over the chunk type and data, bytes 12..28
  for (size_t i = 12; i < 29; ++i) {
    crc ^= static_cast<uint8_t>(png[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  put(29, crc ^ 0xFFFFFFFFu);
  return png;
}

// Bad images are INVALID_ARGUMENT naming the part; the worker keeps serving.
TEST_F(NativeServingTest, BadImagesAreInvalidArgumentNamingThePart) {
  const std::string png_path =
      tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl/a_wide_352x192.png");
  const std::string png = ReadFileText(png_path);
  struct Case {
    std::string name;
    std::string data;
    std::string mime;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"truncated", png.substr(0, png.size() / 2), "image/png", "messages[0].content[1].image: "},
      {"garbage", std::string(200, 'x'), "image/png", "messages[0].content[1].image: "},
      {"label says jpeg", png, "image/jpeg", "messages[0].content[1].image: "},
      {"unsupported type", "BM" + std::string(100, '\0'), "image/bmp",
       "messages[0].content[1].image"},
      {"over --max_image_pixels", WithPngSize(png, 1000, 1000), "image/png",
       "messages[0].content[1].image: "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    tandem::v1::GenerateRequest req = Prompt("Look", 4);
    auto* image = req.mutable_messages(0)->add_content()->mutable_image();
    image->set_data(c.data);
    image->set_mime_type(c.mime);
    tandem::v1::GenerateResponse resp;
    const grpc::Status status = UnaryGenerate(stub_.get(), req, &resp, std::chrono::seconds(30));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.want));
  }
  // Images pinned to nemotron are refused by the gateway, which knows it takes none.
  tandem::v1::GenerateRequest pinned = Prompt("Look", 4);
  AddImage(&pinned, png_path, "image/png");
  pinned.mutable_hints()->set_model("nemotron");
  tandem::v1::GenerateResponse resp;
  const grpc::Status status = UnaryGenerate(stub_.get(), pinned, &resp, std::chrono::seconds(30));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("does not accept images"));
  // And a good request still succeeds.
  tandem::v1::GenerateRequest ok = Prompt("Still there?", 4);
  grpc::ClientContext ctx2;
  Deadline(&ctx2, std::chrono::seconds(30));
  EXPECT_TRUE(stub_->Generate(&ctx2, ok, &resp).ok());
}

// The tool loop on the native engines: tools rendered into the prompt by the real tokenizer and
// template (the prompt grows by their block), then the assistant's call and its result sent
// back, answered like any turn. Random weights write no calls; the parsing is
// tool_calls_test's.
TEST_F(NativeServingTest, ToolRequestsAndResultsRunOnBothNativeModels) {
  for (const std::string model : {"qwen", "nemotron"}) {
    tandem::v1::GenerateRequest plain = Prompt("What is the weather in Oslo?", 4);
    plain.mutable_hints()->set_model(model);
    tandem::v1::GenerateRequest with_tools = plain;
    auto* tool = with_tools.add_tools();
    tool->set_name("get_weather");
    tool->set_description("The weather in a city");
    tool->set_parameters_json(R"({"type": "object", "properties": {"city": {"type": "string"}}})");
    auto prompt_tokens = [this](const tandem::v1::GenerateRequest& r) {
      tandem::v1::GenerateResponse response;
      const grpc::Status s = UnaryGenerate(stub_.get(), r, &response, std::chrono::seconds(60));
      EXPECT_TRUE(s.ok()) << s.error_message();
      return response.usage().prompt_tokens();
    };
    const int32_t without = prompt_tokens(plain);
    const int32_t with = prompt_tokens(with_tools);
    EXPECT_GT(with, without + 100) << model;  // the tools block and the instructions

    tandem::v1::GenerateRequest results = with_tools;
    auto* assistant = results.add_messages();
    assistant->set_role("assistant");
    auto* call = assistant->add_tool_calls();
    call->set_id("call_1");
    call->set_name("get_weather");
    call->set_arguments_json(R"({"city": "Oslo"})");
    auto* result = results.add_messages();
    result->set_role("tool");
    result->set_tool_call_id("call_1");
    result->add_content()->set_text("-3C, snow");
    EXPECT_GT(prompt_tokens(results), with) << model;
  }
}

// classifier.second_opinion on the native engine (random weights: the mechanics, not the
// answer's quality). The shipped classifier is never sure enough here (min_confidence 1), so every
// request asks nemotron one token; with an answer or without, the request is served, and the
// question is counted and timed. A nemotron that cannot answer (stopped) leaves the default class.
std::string SecondOpinionPolicy(const std::string& timeout) {
  return WriteTempFile("second_opinion_" + timeout + ".yaml",
                       absl::StrCat(R"(schema: 1
version: second-opinion-test
models:
  qwen: {vision: true}
  nemotron: {}
classes: [accuracy_critical, latency_critical]
default_class: accuracy_critical
classifier:
  model: )",
                                    SourcePath("/router/classifier/model.tcls"), R"(
  min_confidence: 1
  second_opinion: {model: nemotron, timeout: )",
                                    timeout, R"(}
rules:
  - {name: latency, when: {class: latency_critical}, action: {route: nemotron}}
  - {name: rest, action: {route: qwen}}
)"));
}

double SecondOpinions(const std::string& metrics, const std::vector<std::string>& results) {
  double n = 0;
  for (const std::string& r : results) {
    n += std::max(0.0, ScrapeMetric(metrics, "tandem_gateway_second_opinions_total",
                                    {{"model_name", "nemotron"}, {"result", r}}));
  }
  return n;
}

TEST_F(NativeServingTest, AnUnsureClassifierAsksNemotronAndServesEitherWay) {
  // A stopped worker stays usable to these gateways (its probes time out 100 times first), so
  // the question goes out to it below rather than finding no usable worker.
  const std::string patient = "--worker_probe_timeouts=100";
  auto g = StartServingGateway(entries_, {"--policy=" + SecondOpinionPolicy("5s"), patient});
  ASSERT_TRUE(g.ok()) << g.status();
  auto stub = tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(g->grpc_address, grpc::InsecureChannelCredentials()));
  const tandem::v1::GenerateRequest req = Prompt("hey, what's up?", 4);
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(60));
  tandem::v1::GenerateResponse resp;
  const grpc::Status s = stub->Generate(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(resp.usage().completion_tokens(), 0);
  EXPECT_EQ(SecondOpinions(g->metrics_address, {"answered", "no_answer"}), 1);
  EXPECT_EQ(
      ScrapeMetric(g->metrics_address, "tandem_gateway_second_opinion_duration_seconds_count"), 1);
  // Admitted twice (before and after the question), decided once.
  EXPECT_EQ(
      ScrapeMetric(g->metrics_address, "tandem_gateway_route_decision_duration_seconds_count"), 1);

  // Nemotron stopped: the question times out, the default class stands and qwen answers.
  auto fallback =
      StartServingGateway(entries_, {"--policy=" + SecondOpinionPolicy("300ms"), patient});
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  workers_[1].process->Signal(SIGSTOP);
  auto stub2 = tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(fallback->grpc_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx2;
  Deadline(&ctx2, std::chrono::seconds(60));
  tandem::v1::GenerateResponse resp2;
  const grpc::Status s2 = stub2->Generate(&ctx2, req, &resp2);
  ASSERT_TRUE(s2.ok()) << s2.error_message();
  EXPECT_EQ(resp2.route().model(), "qwen");
  EXPECT_EQ(resp2.route().request_class(), "accuracy_critical");
  EXPECT_EQ(SecondOpinions(fallback->metrics_address, {"timeout"}), 1);

  // The caller gives up while the question is out (its deadline before the policy's timeout):
  // the question is cancelled with it, and nothing is dispatched.
  grpc::ClientContext ctx3;
  Deadline(&ctx3, std::chrono::milliseconds(200));
  tandem::v1::GenerateResponse resp3;
  const grpc::Status s3 = stub->Generate(&ctx3, req, &resp3);
  EXPECT_EQ(s3.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s3.error_message();
  auto cancelled = WaitForMetric(g->metrics_address, "tandem_gateway_second_opinions_total",
                                 {{"model_name", "nemotron"}, {"result", "cancelled"}}, 1);
  workers_[1].process->Signal(SIGCONT);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(*cancelled, 1);
}

// --random_weights: the worker builds the model from config.json alone, with the weights
// tandem-make-checkpoint writes for the same seed, so both answer alike; and says so everywhere.
std::string GreedyText(const std::string& address) {
  auto stub =
      tandem::v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  tandem::v1::WorkerGenerateRequest req;
  req.set_request_id("r");
  auto* m = req.add_messages();
  m->set_role("user");
  m->add_content()->set_text("Write a haiku about queues.");
  req.mutable_sampling()->set_max_tokens(12);
  req.mutable_sampling()->set_temperature(0);
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, req);
  tandem::v1::WorkerGenerateChunk chunk;
  std::string text;
  int32_t tokens = 0;
  while (reader->Read(&chunk)) {
    text += chunk.text();
    tokens += chunk.tokens();
  }
  const grpc::Status s = reader->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(tokens, 0);
  return text;
}

TEST(RandomWeightsServingTest, GeneratedWeightsAnswerAsTheWrittenCheckpointAndSaySo) {
  const std::string dir = NativeCheckpoint("qwen3_5_moe");  // seed 7
  auto written = StartWorker("qwen", {"--engine=native", "--checkpoint=" + dir,
                                      "--memory_budget=268435456", "--native_threads=1"});
  ASSERT_TRUE(written.ok()) << written.status();
  auto generated = StartWorker(
      "qwen", {"--engine=native", "--random_weights", "--model_config=" + dir + "/config.json",
               "--random_weights_seed=7", "--model_id=Qwen/Qwen3.5-35B-A3B",
               "--memory_budget=268435456", "--native_threads=1"});
  ASSERT_TRUE(generated.ok()) << generated.status();
  ASSERT_TRUE(WaitForHealth(written->grpc_address, "", true).ok());
  ASSERT_TRUE(WaitForHealth(generated->grpc_address, "", true).ok());
  EXPECT_EQ(GreedyText(generated->grpc_address), GreedyText(written->grpc_address));

  tandem::v1::WorkerInfo info;
  ASSERT_TRUE(GetWorkerInfo(generated->grpc_address, &info).ok());
  // A given id still says the weights are random.
  EXPECT_EQ(info.model_id(), "random-weights/Qwen/Qwen3.5-35B-A3B");
  EXPECT_EQ(info.engine(), "native");
  for (const Server* w : {&*written, &*generated}) {
    auto metrics = HttpGet(w->metrics_address, "/metrics");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_EQ(MetricValue(*metrics, "tandem_worker_info", {{"weights", "random"}}).value_or(0), 1);
  }
}

// Checkpoints in the layouts of the FP8 releases (tandem-make-checkpoint --quant: Qwen's block
// FP8, NVIDIA's ModelOpt FP8 of Nemotron) are served by the native CPU engine behind a gateway,
// and each worker says its weights' format.
TEST(QuantizedServingTest, BothFp8ReleaseLayoutsAreServedThroughTheGatewayAndSaySo) {
  const std::vector<std::pair<std::string, std::string>> models = {
      {"qwen", "qwen3_5_moe_fp8"}, {"nemotron", "nemotron_h_modelopt_fp8"}};
  std::vector<Server> workers;
  std::vector<std::string> entries;
  for (const auto& [model, dir] : models) {
    auto w = StartWorker(model, {"--engine=native", "--checkpoint=" + NativeCheckpoint(dir),
                                 "--memory_budget=268435456", "--native_threads=1"});
    ASSERT_TRUE(w.ok()) << w.status();
    entries.push_back(model + "=" + w->grpc_address);
    workers.push_back(std::move(*w));
  }
  auto gateway = StartGateway(entries);
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  auto stub = tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(gateway->grpc_address, grpc::InsecureChannelCredentials()));
  for (size_t i = 0; i < models.size(); ++i) {
    const std::string& model = models[i].first;
    ASSERT_TRUE(WaitForHealth(gateway->grpc_address, "model/" + model, true).ok());
    tandem::v1::GenerateRequest req = Prompt("Write a haiku about queues.", 12);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_hints()->set_model(model);
    const Streamed s = StreamWith(stub.get(), req);
    ASSERT_TRUE(s.status.ok()) << model << ": " << s.status.error_message();
    EXPECT_GT(s.last.usage().completion_tokens(), 0) << model;
    EXPECT_EQ(s.first.route().model(), model);

    const std::string format = i == 0 ? "fp8-block" : "modelopt-fp8";
    tandem::v1::WorkerInfo info;
    ASSERT_TRUE(GetWorkerInfo(workers[i].grpc_address, &info).ok());
    EXPECT_EQ(info.quantization(), format);
    auto metrics = HttpGet(workers[i].metrics_address, "/metrics");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_EQ(MetricValue(*metrics, "tandem_worker_info", {{"quantization", format}}).value_or(0),
              1);
  }
}

// The int4 layouts, each served by its own worker behind a gateway (a synthetic nemotron beside it
// for the default policy).
TEST(QuantizedServingTest, EachInt4LayoutIsServedThroughTheGatewayAndSaysSo) {
  auto nemotron = StartWorker("nemotron", {"--synthetic_time_scale=0"});
  ASSERT_TRUE(nemotron.ok()) << nemotron.status();
  for (const auto& [dir, format] :
       std::vector<std::pair<std::string, std::string>>{{"qwen3_5_moe_gptq", "gptq-int4"},
                                                        {"qwen3_5_moe_awq", "awq-int4"},
                                                        {"qwen3_5_moe_ct-int4", "ct-int4"}}) {
    auto qwen = StartWorker("qwen", {"--engine=native", "--checkpoint=" + NativeCheckpoint(dir),
                                     "--memory_budget=268435456", "--native_threads=1"});
    ASSERT_TRUE(qwen.ok()) << dir << ": " << qwen.status();
    auto gateway =
        StartServingGateway({"qwen=" + qwen->grpc_address, "nemotron=" + nemotron->grpc_address});
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    auto stub = tandem::v1::Gateway::NewStub(
        grpc::CreateChannel(gateway->grpc_address, grpc::InsecureChannelCredentials()));
    tandem::v1::GenerateRequest req = Prompt("Write a haiku about queues.", 12);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_hints()->set_model("qwen");
    const Streamed s = StreamWith(stub.get(), req);
    ASSERT_TRUE(s.status.ok()) << dir << ": " << s.status.error_message();
    EXPECT_GT(s.last.usage().completion_tokens(), 0) << dir;
    tandem::v1::WorkerInfo info;
    ASSERT_TRUE(GetWorkerInfo(qwen->grpc_address, &info).ok());
    EXPECT_EQ(info.quantization(), format);
  }
}

TEST(RandomWeightsServingTest, FlagsAreCheckedBeforeLoading) {
  const std::string config =
      tandem::testing::SourcePath("/workers/model/configs/qwen3_5_moe/config.json");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--engine=native", "--random_weights"}, "--random_weights needs --model_config=PATH"},
      {{"--engine=synthetic", "--random_weights", "--model_config=" + config},
       "--random_weights needs --engine=native"},
      {{"--engine=native", "--model_config=" + config}, "--model_config is for --random_weights"},
      {{"--engine=native", "--random_weights", "--model_config=" + config, "--checkpoint=/tmp"},
       "drop --checkpoint"},
      // The released config has no tokenizer beside it; refused before any weight is built.
      {{"--engine=native", "--random_weights", "--model_config=" + config}, "--tokenizer=PATH"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"--model=qwen", "--device=cpu", "--plaintext"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto [code, log] = RunToExit(tandem::testing::WorkerBin(), args);
    EXPECT_EQ(code, 2) << log;
    EXPECT_THAT(log, HasSubstr(message));
  }
  // Generated weights are BF16: a quantized config would claim a format they do not have.
  const std::string fp8 = NativeCheckpoint("qwen3_5_moe_fp8");
  auto [code, log] = RunToExit(tandem::testing::WorkerBin(),
                               {"--model=qwen", "--device=cpu", "--plaintext", "--engine=native",
                                "--random_weights", "--model_config=" + fp8 + "/config.json",
                                "--tokenizer=" + fp8 + "/tokenizer.json", "--listen=127.0.0.1:0"});
  EXPECT_NE(code, 0) << log;
  EXPECT_THAT(log, HasSubstr("--random_weights generates BF16 weights"));
}

}  // namespace
}  // namespace tandem::testing
