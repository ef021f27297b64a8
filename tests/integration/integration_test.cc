// End-to-end tests: real tandem-worker and tandem-gateway processes on loopback.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "proto/reflection_subset.grpc.pb.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/streams.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using tandem::v1::GenerateRequest;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<tandem::v1::Gateway::Stub> GatewayStub(const std::string& address) {
  return tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// `req` edited by `mutate`.
GenerateRequest Mutated(GenerateRequest req, const std::function<void(GenerateRequest*)>& mutate) {
  mutate(&req);
  return req;
}

// Reads a whole stream; returns its status.
grpc::Status ReadStream(tandem::v1::Gateway::Stub* stub, const GenerateRequest& req,
                        std::vector<tandem::v1::GenerateStreamChunk>* chunks) {
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(30));
  auto reader = stub->GenerateStream(&ctx, req);
  tandem::v1::GenerateStreamChunk c;
  while (reader->Read(&c)) chunks->push_back(c);
  return reader->Finish();
}

std::vector<std::string> ListServices(const std::string& address) {
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(10));
  auto stream = stub->ServerReflectionInfo(&ctx);
  grpc::reflection::v1alpha::ServerReflectionRequest req;
  req.set_list_services("");
  stream->Write(req);
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse resp;
  std::vector<std::string> names;
  while (stream->Read(&resp)) {
    for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  }
  stream->Finish();
  return names;
}

// Two fast workers (no simulated delay) behind one gateway.
class StackTest : public ::testing::Test {
 protected:
  // A worker busy with many streams may answer its health probes late (under TSan on a slow
  // 2-core VM, 128 streams made qwen miss three 1 s deadlines in a row, and two streams were
  // refused "no usable worker"); these cases are about what the gateway relays, so only a worker
  // that refuses connections, or misses 30 probes in a row, is taken out of service here.
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(
        StartTwoModelStack({"--max_request_bytes=1048576", "--worker_probe_timeouts=30"}, &qwen_,
                           &nemotron_, &gateway_));
    stub_ = GatewayStub(gateway_.grpc_address);
  }

  grpc::Status Generate(const GenerateRequest& req, tandem::v1::GenerateResponse* resp) {
    return UnaryGenerate(stub_.get(), req, resp, std::chrono::seconds(30));
  }

  std::string GatewayMetrics() {
    auto text = HttpGet(gateway_.metrics_address, "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    return text.value_or("");
  }

  Server qwen_;
  Server nemotron_;
  Server gateway_;
  std::unique_ptr<tandem::v1::Gateway::Stub> stub_;
};

TEST_F(StackTest, UnaryGenerationReturnsTextUsageRouteAndTimings) {
  GenerateRequest req = Prompt("Explain continuous batching.", 8);
  req.set_request_id("unary-1");
  tandem::v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(req, &resp).ok());
  EXPECT_EQ(resp.request_id(), "unary-1");
  EXPECT_FALSE(resp.text().empty());
  EXPECT_EQ(resp.finish_reason(), tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(resp.usage().completion_tokens(), 8);
  EXPECT_GT(resp.usage().prompt_tokens(), 0);
  EXPECT_EQ(resp.usage().total_tokens(),
            resp.usage().prompt_tokens() + resp.usage().completion_tokens());
  EXPECT_EQ(resp.route().model(), "qwen");
  EXPECT_EQ(resp.route().rule(), "default");
  EXPECT_EQ(resp.route().worker(), qwen_.grpc_address);
  EXPECT_FALSE(resp.route().reason().empty());
  EXPECT_GT(resp.timings().time_to_first_token_seconds(), 0);
  EXPECT_LE(resp.timings().time_to_first_token_seconds(), resp.timings().total_seconds());
}

TEST_F(StackTest, StreamCarriesRouteFirstAndUsageLastAndMatchesUnaryText) {
  const GenerateRequest req = Prompt("Stream me a deterministic answer.", 40);
  tandem::v1::GenerateResponse unary;
  ASSERT_TRUE(Generate(req, &unary).ok());

  std::vector<tandem::v1::GenerateStreamChunk> chunks;
  ASSERT_TRUE(ReadStream(stub_.get(), req, &chunks).ok());
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_TRUE(chunks.front().has_route());
  EXPECT_EQ(chunks.front().route().model(), "qwen");
  std::string text;
  for (size_t i = 0; i < chunks.size(); ++i) {
    text += chunks[i].text();
    if (i > 0) {
      EXPECT_FALSE(chunks[i].has_route()) << i;
    }
    if (i + 1 < chunks.size()) {
      EXPECT_EQ(chunks[i].finish_reason(), tandem::v1::FINISH_REASON_UNSPECIFIED) << i;
    }
  }
  const auto& last = chunks.back();
  EXPECT_EQ(last.finish_reason(), tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().completion_tokens(), 40);
  EXPECT_GT(last.timings().total_seconds(), 0);
  // Temperature 0: the same prompt gives the same text whichever RPC carries it.
  EXPECT_EQ(text, unary.text());
}

TEST_F(StackTest, StopSequenceEndsGenerationAndIsNotReturned) {
  GenerateRequest probe = Prompt("stop sequence probe", 64);
  tandem::v1::GenerateResponse full;
  ASSERT_TRUE(Generate(probe, &full).ok());
  // Stop on the third word of the deterministic answer.
  std::vector<std::string> words = absl::StrSplit(full.text(), ' ');
  ASSERT_GT(words.size(), 4u);
  const std::string stop = " " + words[2];
  GenerateRequest req = probe;
  req.mutable_sampling()->add_stop(stop);
  tandem::v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(req, &resp).ok());
  EXPECT_EQ(resp.finish_reason(), tandem::v1::FINISH_REASON_STOP);
  EXPECT_EQ(resp.text(), full.text().substr(0, full.text().find(stop)));
}

TEST_F(StackTest, ManyConcurrentStreamsLoseNoChunk) {
  constexpr int kThreads = 16;
  constexpr int kStreamsPerThread = 8;
  constexpr int kTokens = 64;
  std::atomic<int> ok{0};
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kStreamsPerThread; ++i) {
        GenerateRequest req = Prompt(absl::StrCat("stream ", t, " ", i), kTokens);
        if (i % 2 == 1) req.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);
        std::vector<tandem::v1::GenerateStreamChunk> chunks;
        grpc::Status s = ReadStream(stub_.get(), req, &chunks);
        std::string text;
        for (const auto& c : chunks) text += c.text();
        // The simulator's tokens are single words joined by spaces, so the words relayed must
        // match the tokens the worker counted (answers may end before max_tokens).
        const size_t words = std::vector<std::string>(absl::StrSplit(text, ' ')).size();
        const int32_t tokens = chunks.empty() ? -1 : chunks.back().usage().completion_tokens();
        if (!s.ok() || tokens <= 0 || tokens > kTokens || words != static_cast<size_t>(tokens) ||
            chunks.back().finish_reason() == tandem::v1::FINISH_REASON_UNSPECIFIED) {
          failures[t] = absl::StrCat("status=", s.error_message(), " words=", words,
                                     " tokens=", tokens, " text=", text);
          continue;
        }
        ok.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), kThreads * kStreamsPerThread);
  for (const auto& f : failures) EXPECT_TRUE(f.empty()) << f;
  EXPECT_EQ(WaitForMetric(gateway_.metrics_address, "tandem_gateway_inflight_requests",
                          {{"model_name", "qwen"}}, 0)
                .value_or(-1),
            0);
}

struct RuleCase {
  std::string name;
  std::function<void(GenerateRequest*)> mutate;
  std::string model;
  std::string rule;
};

TEST_F(StackTest, BuiltinRulesRouteAndTheChosenModelServes) {
  const std::vector<RuleCase> cases = {
      {"default", [](GenerateRequest*) {}, "qwen", "default"},
      {"image",
       [](GenerateRequest* r) {
         auto* img = r->mutable_messages(0)->add_content()->mutable_image();
         img->set_data("\x89PNG fake bytes");
         img->set_mime_type("image/png");
       },
       "qwen", "vision"},
      {"long prompt",
       [](GenerateRequest* r) {
         std::string doc;
         for (int i = 0; i < 30000; ++i) doc += "lorem ";
         r->mutable_messages(0)->mutable_content(0)->set_text(doc);
       },
       "nemotron", "long_context"},
      {"latency",
       [](GenerateRequest* r) { r->mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY); },
       "nemotron", "objective_latency"},
      {"accuracy",
       [](GenerateRequest* r) {
         r->mutable_hints()->set_objective(tandem::v1::OBJECTIVE_ACCURACY);
       },
       "qwen", "objective_accuracy"},
      {"pin beats objective",
       [](GenerateRequest* r) {
         r->mutable_hints()->set_objective(tandem::v1::OBJECTIVE_ACCURACY);
         r->mutable_hints()->set_model("nemotron");
       },
       "nemotron", "pin"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    tandem::v1::GenerateResponse resp;
    grpc::Status s = Generate(Mutated(Prompt("Which model serves me?", 2), c.mutate), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.route().model(), c.model);
    EXPECT_EQ(resp.route().rule(), c.rule);
    EXPECT_EQ(resp.route().worker(),
              c.model == "qwen" ? qwen_.grpc_address : nemotron_.grpc_address);
  }
  const std::string metrics = GatewayMetrics();
  EXPECT_EQ(MetricValue(metrics, "tandem_gateway_route_decisions_total",
                        {{"model_name", "nemotron"}, {"rule", "long_context"}})
                .value_or(-1),
            1);
  EXPECT_EQ(MetricValue(metrics, "tandem_gateway_route_decisions_total",
                        {{"model_name", "qwen"}, {"rule", "vision"}})
                .value_or(-1),
            1);
}

TEST_F(StackTest, RouteIsADryRunThatExplainsEveryRule) {
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(10));
  tandem::v1::RouteResponse resp;
  ASSERT_TRUE(stub_->Route(&ctx, LatencyPrompt("What is the capital of France?"), &resp).ok());
  EXPECT_EQ(resp.route().model(), "nemotron");
  EXPECT_EQ(resp.route().rule(), "objective_latency");
  ASSERT_EQ(resp.rules_size(), 5);  // pin, vision, long_context, objective_accuracy, ..._latency
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(resp.rules(i).matched()) << resp.rules(i).rule();
  EXPECT_TRUE(resp.rules(4).matched());
  EXPECT_EQ(resp.features().at("objective"), "latency");
  EXPECT_THAT(resp.features().at("prompt_tokens"), HasSubstr("estimate"));
  // No generation happened.
  auto worker = HttpGet(nemotron_.metrics_address, "/metrics");
  ASSERT_TRUE(worker.ok());
  EXPECT_EQ(MetricValue(*worker, "tandem_worker_prompt_tokens_total").value_or(-1), 0);
}

TEST_F(StackTest, ListModelsReportsBothModelsAndCapabilities) {
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(10));
  tandem::v1::ListModelsResponse resp;
  ASSERT_TRUE(stub_->ListModels(&ctx, {}, &resp).ok());
  ASSERT_EQ(resp.models_size(), 2);
  std::map<std::string, tandem::v1::ModelStatus> by_name;
  for (const auto& m : resp.models()) by_name[m.name()] = m;
  EXPECT_EQ(by_name["qwen"].model_id(), "Qwen/Qwen3.5-35B-A3B");
  EXPECT_TRUE(by_name["qwen"].capabilities().vision());
  EXPECT_FALSE(by_name["nemotron"].capabilities().vision());
  EXPECT_EQ(by_name["nemotron"].ready_workers(), 1);
  EXPECT_EQ(by_name["nemotron"].engine(), "synthetic");
}

struct BadInput {
  std::string name;
  std::function<void(GenerateRequest*)> mutate;
  std::string message;
};

TEST_F(StackTest, EveryBadInputIsInvalidArgumentNamingTheField) {
  const std::vector<BadInput> cases = {
      {"no messages", [](GenerateRequest* r) { r->clear_messages(); }, "messages:"},
      {"empty text",
       [](GenerateRequest* r) { r->mutable_messages(0)->mutable_content(0)->set_text(""); },
       "messages[0].content[0].text: empty text"},
      {"no content", [](GenerateRequest* r) { r->mutable_messages(0)->clear_content(); },
       "messages[0].content: no content parts"},
      {"invalid utf8",
       [](GenerateRequest* r) {
         r->mutable_messages(0)->mutable_content(0)->set_text("bad \xC3\x28 byte");
       },
       "messages[0].content[0].text: not valid UTF-8"},
      {"unknown role", [](GenerateRequest* r) { r->mutable_messages(0)->set_role("robot"); },
       "messages[0].role: unknown role \"robot\""},
      {"max_tokens zero", [](GenerateRequest* r) { r->mutable_sampling()->set_max_tokens(0); },
       "sampling.max_tokens: 0; must be >= 1"},
      {"max_tokens negative", [](GenerateRequest* r) { r->mutable_sampling()->set_max_tokens(-5); },
       "sampling.max_tokens: -5"},
      {"max_tokens above model limit",
       [](GenerateRequest* r) { r->mutable_sampling()->set_max_tokens(40000); },
       "sampling.max_tokens: 40000 exceeds the limit of model 'qwen' (32768)"},
      {"temperature", [](GenerateRequest* r) { r->mutable_sampling()->set_temperature(2.5); },
       "sampling.temperature"},
      {"negative temperature",
       [](GenerateRequest* r) { r->mutable_sampling()->set_temperature(-0.1f); },
       "sampling.temperature"},
      {"top_p zero", [](GenerateRequest* r) { r->mutable_sampling()->set_top_p(0); },
       "sampling.top_p"},
      {"top_p above one", [](GenerateRequest* r) { r->mutable_sampling()->set_top_p(1.5); },
       "sampling.top_p"},
      {"unknown pinned model", [](GenerateRequest* r) { r->mutable_hints()->set_model("gpt-9"); },
       "hints.model: unknown model 'gpt-9'"},
      {"image for a model without vision",
       [](GenerateRequest* r) {
         r->mutable_hints()->set_model("nemotron");
         auto* img = r->mutable_messages(0)->add_content()->mutable_image();
         img->set_data("GIF89a");
         img->set_mime_type("image/gif");
       },
       "model 'nemotron' (rule 'pin') does not accept images"},
      {"image without mime type",
       [](GenerateRequest* r) {
         r->mutable_messages(0)->add_content()->mutable_image()->set_data("x");
       },
       "messages[0].content[1].image.mime_type"},
      {"request over the size limit",
       [](GenerateRequest* r) {
         r->mutable_messages(0)->mutable_content(0)->set_text(std::string(1536 * 1024, 'a'));
       },
       "exceeds the limit of 1048576 bytes (--max_request_bytes)"},
  };
  int refused = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const GenerateRequest req = Mutated(Prompt("valid prompt", 4), c.mutate);
    tandem::v1::GenerateResponse resp;
    grpc::Status s = Generate(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message));
    std::vector<tandem::v1::GenerateStreamChunk> chunks;
    grpc::Status ss = ReadStream(stub_.get(), req, &chunks);
    EXPECT_EQ(ss.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << ss.error_message();
    EXPECT_THAT(ss.error_message(), HasSubstr(c.message));
    EXPECT_TRUE(chunks.empty());
    refused += 2;
  }
  // Nothing else was disturbed: a valid request still works and no worker saw the bad ones.
  tandem::v1::GenerateResponse ok;
  ASSERT_TRUE(Generate(Prompt("still fine?", 3), &ok).ok());
  EXPECT_EQ(ok.usage().completion_tokens(), 3);
  const std::string metrics = GatewayMetrics();
  // Refused before routing under "none", after it (a model's own limits) under that model.
  double counted = 0;
  for (const char* model : {"none", "qwen", "nemotron"}) {
    counted += MetricValue(metrics, "tandem_gateway_requests_total",
                           {{"model_name", model}, {"code", "INVALID_ARGUMENT"}})
                   .value_or(0);
  }
  EXPECT_EQ(counted, refused);
  auto worker = HttpGet(qwen_.metrics_address, "/metrics");
  ASSERT_TRUE(worker.ok());
  EXPECT_EQ(MetricValue(*worker, "tandem_worker_requests_total", {{"finish_reason", "length"}})
                .value_or(-1),
            1);
}

TEST_F(StackTest, MetricsHaveTheExpectedSeriesAndPassPromtool) {
  tandem::v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(Prompt("count me", 5), &resp).ok());
  std::vector<tandem::v1::GenerateStreamChunk> chunks;
  GenerateRequest latency = Prompt("and me", 7);
  latency.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);
  ASSERT_TRUE(ReadStream(stub_.get(), latency, &chunks).ok());

  const std::string g = GatewayMetrics();
  EXPECT_EQ(MetricValue(g, "tandem_gateway_requests_total",
                        {{"model_name", "qwen"}, {"class", "accuracy_critical"}, {"code", "OK"}})
                .value_or(-1),
            1);
  EXPECT_EQ(MetricValue(g, "tandem_gateway_requests_total",
                        {{"model_name", "nemotron"}, {"class", "latency_critical"}, {"code", "OK"}})
                .value_or(-1),
            1);
  EXPECT_EQ(MetricValue(g, "tandem_gateway_completion_tokens_total", {{"model_name", "qwen"}})
                .value_or(-1),
            5);
  EXPECT_EQ(
      MetricValue(g, "tandem_gateway_request_duration_seconds_count", {{"model_name", "nemotron"}})
          .value_or(-1),
      1);
  EXPECT_EQ(
      MetricValue(g, "tandem_gateway_time_to_first_token_seconds_count", {{"model_name", "qwen"}})
          .value_or(-1),
      1);
  EXPECT_EQ(
      MetricValue(g, "tandem_gateway_inflight_requests", {{"model_name", "qwen"}}).value_or(-1), 0);
  EXPECT_EQ(
      MetricValue(g, "tandem_gateway_ready_workers", {{"model_name", "nemotron"}}).value_or(-1), 1);
  EXPECT_TRUE(PromtoolCheckMetrics(g).ok()) << PromtoolCheckMetrics(g);

  auto w = HttpGet(nemotron_.metrics_address, "/metrics");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(MetricValue(*w, "tandem_worker_generation_tokens_total", {{"model_name", "nemotron"}})
                .value_or(-1),
            7);
  EXPECT_GT(MetricValue(*w, "tandem_worker_prompt_tokens_total").value_or(-1), 0);
  EXPECT_EQ(MetricValue(*w, "tandem_worker_time_to_first_token_seconds_count").value_or(-1), 1);
  EXPECT_EQ(MetricValue(*w, "tandem_worker_request_queue_time_seconds_count").value_or(-1), 1);
  EXPECT_GE(MetricValue(*w, "tandem_worker_batch_size_count").value_or(-1), 7);
  EXPECT_GT(MetricValue(*w, "tandem_worker_device_memory_total_bytes").value_or(-1), 0);
  EXPECT_EQ(MetricValue(*w, "tandem_worker_info",
                        {{"engine", "synthetic"}, {"device", "cpu"}, {"model_name", "nemotron"}})
                .value_or(-1),
            1);
  EXPECT_EQ(MetricValue(*w, "tandem_worker_num_requests_running").value_or(-1), 0);
  EXPECT_TRUE(PromtoolCheckMetrics(*w).ok()) << PromtoolCheckMetrics(*w);
}

TEST_F(StackTest, HealthAndReflectionAreServedByBothProcesses) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(qwen_.grpc_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  EXPECT_THAT(ListServices(qwen_.grpc_address),
              ::testing::IsSupersetOf({"tandem.v1.Worker", "grpc.health.v1.Health"}));
  EXPECT_THAT(ListServices(gateway_.grpc_address),
              ::testing::IsSupersetOf({"tandem.v1.Gateway", "grpc.health.v1.Health"}));
}

TEST_F(StackTest, RequestIdReachesTheWorkerLogs) {
  GenerateRequest req = Prompt("trace me", 2);
  req.set_request_id("trace-4242");
  tandem::v1::GenerateResponse resp;
  ASSERT_TRUE(Generate(req, &resp).ok());
  // Metadata works too when the field is empty.
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-request-id", "meta-777");
  tandem::v1::GenerateResponse resp2;
  ASSERT_TRUE(stub_->Generate(&ctx, Prompt("trace me too", 2), &resp2).ok());
  EXPECT_EQ(resp2.request_id(), "meta-777");
  // Both processes log the end line before the response is sent.
  const std::string worker_log = qwen_.process->ReadLog();
  EXPECT_THAT(worker_log, HasSubstr("request_id=trace-4242 model=qwen start"));
  EXPECT_THAT(worker_log, HasSubstr("request_id=trace-4242 end status=OK"));
  EXPECT_THAT(worker_log, HasSubstr("request_id=meta-777 end status=OK"));
  const std::string gateway_log = gateway_.process->ReadLog();
  // One line per request, with where it went.
  EXPECT_THAT(gateway_log, HasSubstr("request_id=trace-4242 rpc=Generate end model=qwen "
                                     "class=accuracy_critical status=OK"));
  EXPECT_THAT(gateway_log, ContainsRegex("request_id=trace-4242 rpc=Generate end .* rule=[^ ]+ "
                                         "worker=127\\.0\\.0\\.1:[0-9]+ tenant=anonymous"));
  EXPECT_THAT(gateway_log, Not(HasSubstr("request_id=trace-4242 rpc=Generate start")));
}

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST_F(StackTest, TandemctlServesPeopleAndScripts) {
  const std::string ctl =
      absl::StrCat(tandem::testing::CtlBin(), " --plaintext --gateway=", gateway_.grpc_address);
  struct Case {
    std::string args;
    int exit_code;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"--max_tokens=4 --objective=latency generate hello there",
       0,
       {"model=nemotron class=latency_critical rule=objective_latency", "finish=length tokens="}},
      {"--max_tokens=6 --json stream hi",
       0,
       {"\"route\":{\"model\":\"qwen\"", "\"finish_reason\":\"FINISH_REASON_LENGTH\""}},
      {"--model=nemotron route summarise this",
       0,
       {"rule pin: MATCHED", "feature pinned_model=nemotron"}},
      {"models", 0, {"qwen\tQwen/Qwen3.5-35B-A3B\tengine=synthetic\tready=1/1"}},
      {"--temperature=9 generate hello", 1, {"INVALID_ARGUMENT: sampling.temperature"}},
      // No tenants file: everyone is 'anonymous', and there is nothing to reload.
      {"tenants show",
       0,
       {"path=(none) sha256= keyless=anonymous",
        "anonymous models=all priority=1 requests/s=unlimited"}},
      {"tenants reload", 1, {"FAILED_PRECONDITION: the gateway has no tenants file"}},
      {"frobnicate", 2, {"unknown subcommand 'frobnicate'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const CommandResult r = RunCommand(ctl + " " + c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.out;
    for (const std::string& want : c.says) EXPECT_THAT(r.out, HasSubstr(want));
  }
}

TEST_F(StackTest, WorkerInfoDescribesModelDeviceAndLoad) {
  tandem::v1::WorkerInfo info;
  ASSERT_TRUE(GetWorkerInfo(qwen_.grpc_address, &info).ok());
  EXPECT_EQ(info.model_name(), "qwen");
  EXPECT_EQ(info.engine(), "synthetic");
  EXPECT_EQ(info.device().id(), "cpu");
  EXPECT_FALSE(info.device().name().empty());
  EXPECT_GT(info.device().memory_total_bytes(), 0u);
  EXPECT_TRUE(info.vision());
  EXPECT_EQ(info.max_output_tokens(), 32768);
  EXPECT_EQ(info.load().max_batch_size(), 64);
  EXPECT_EQ(info.load().running(), 0);
  EXPECT_EQ(info.state(), tandem::v1::WorkerInfo::STATE_READY);
}

TEST(WorkerStartupTest, BadDeviceOrModelIsAClearStartupError) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--model=qwen", "--device=4096"}, "--device=4096: "},
      {{"--model=qwen", "--device=gpu"}, "expected 'cpu' or a CUDA device ordinal"},
      {{"--model=qwen"}, "--device is required"},
      {{"--device=cpu"}, "--model is required"},
      {{"--model=llama", "--device=cpu"}, "no synthetic profile for model 'llama'"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = c.args;
    args.push_back("--plaintext");
    args.push_back("--engine=synthetic");
    auto [code, log] = RunToExit(tandem::testing::WorkerBin(), args);
    EXPECT_EQ(code, 2) << log;
    EXPECT_THAT(log, HasSubstr(c.message));
  }
  // No engine by default: a unit file that forgets it must not serve the simulator's filler.
  auto [code, log] =
      RunToExit(tandem::testing::WorkerBin(), {"--model=qwen", "--device=cpu", "--plaintext"});
  EXPECT_EQ(code, 2) << log;
  EXPECT_THAT(log, HasSubstr("--engine is required: native"));
}

TEST(GatewayStartupTest, OutOfRangeLimitsAreClearStartupErrors) {
  const std::vector<std::string> base = {"--workers=qwen=127.0.0.1:1,nemotron=127.0.0.1:2",
                                         "--plaintext",
                                         "--worker_plaintext",
                                         "--allow_unauthenticated",
                                         "--listen=127.0.0.1:0",
                                         "--metrics_listen=127.0.0.1:0"};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--policy_watch_interval=0s", "--policy_watch_interval must be between 10ms and 24h"},
      {"--policy_watch_interval=inf", "--policy_watch_interval must be between 10ms and 24h"},
      {"--max_tenant_labels=0", "--max_tenant_labels must be >= 1"},
      {"--max_inflight=-1", "--max_inflight and --max_queued must be >= 0"},
      {"--max_request_bytes=10", "--max_request_bytes must be >= 1024"},
      {"--max_attempts=0", "--max_attempts must be >= 1"},
  };
  for (const auto& [flag, message] : cases) {
    std::vector<std::string> args = base;
    args.push_back(flag);
    auto [code, log] = RunToExit(tandem::testing::GatewayBin(), args);
    EXPECT_EQ(code, 2) << flag << "\n" << log;
    EXPECT_THAT(log, HasSubstr(message)) << flag;
  }
}

TEST(WorkerStartupTest, NotServingUntilTheModelIsLoaded) {
  auto worker = StartWorker("nemotron", {"--synthetic_load_time=3s"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto stub = tandem::v1::Worker::NewStub(
      grpc::CreateChannel(worker->grpc_address, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    tandem::v1::WorkerInfo info;
    ASSERT_TRUE(stub->GetInfo(&ctx, {}, &info).ok());
    EXPECT_EQ(info.state(), tandem::v1::WorkerInfo::STATE_LOADING);
    auto health = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(worker->grpc_address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext hctx;
    grpc::health::v1::HealthCheckResponse h;
    ASSERT_TRUE(health->Check(&hctx, {}, &h).ok());
    EXPECT_EQ(h.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    const WorkerCall early = WorkerGenerate(stub.get(), WorkerPrompt("too early"));
    EXPECT_EQ(early.chunks, 0);
    EXPECT_EQ(early.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(early.status.error_message(), HasSubstr("loading its model"));
  }
  ASSERT_TRUE(WaitForHealth(worker->grpc_address, "", true).ok());
  grpc::ClientContext ctx;
  tandem::v1::WorkerInfo info;
  ASSERT_TRUE(stub->GetInfo(&ctx, {}, &info).ok());
  EXPECT_EQ(info.state(), tandem::v1::WorkerInfo::STATE_READY);
}

// A fast qwen worker behind a gateway (with `gateway_args`) whose nemotron worker is port 1 on
// loopback, which refuses connections; started once qwen is served.
struct NemotronDown {
  Server qwen;
  Server gateway;
  std::unique_ptr<tandem::v1::Gateway::Stub> stub;

  void Start(const std::vector<std::string>& gateway_args = {}) {
    auto w = StartWorker("qwen", {"--synthetic_time_scale=0"});
    ASSERT_TRUE(w.ok()) << w.status();
    qwen = std::move(*w);
    auto g = StartGateway({"qwen=" + qwen.grpc_address, "nemotron=127.0.0.1:1"}, gateway_args);
    ASSERT_TRUE(g.ok()) << g.status();
    gateway = std::move(*g);
    ASSERT_TRUE(WaitForHealth(gateway.grpc_address, "model/qwen", true).ok());
    stub = GatewayStub(gateway.grpc_address);
  }
};

TEST(GatewayAvailabilityTest, ModelWithoutReadyWorkerIsUnavailableWithTheReason) {
  NemotronDown stack;
  ASSERT_NO_FATAL_FAILURE(stack.Start());
  const Server* gateway = &stack.gateway;
  auto* stub = stack.stub.get();
  tandem::v1::GenerateResponse resp;
  grpc::Status s = UnaryGenerate(stub, LatencyPrompt("hello", 2), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("model 'nemotron' has no usable worker (127.0.0.1:1:"));
  // Per-model health tells load balancers and operators the same.
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(gateway->grpc_address, grpc::InsecureChannelCredentials()));
  for (const auto& [service, want] :
       std::vector<std::pair<std::string, grpc::health::v1::HealthCheckResponse::ServingStatus>>{
           {"", grpc::health::v1::HealthCheckResponse::SERVING},
           {"model/qwen", grpc::health::v1::HealthCheckResponse::SERVING},
           {"model/nemotron", grpc::health::v1::HealthCheckResponse::NOT_SERVING}}) {
    grpc::ClientContext hctx;
    grpc::health::v1::HealthCheckRequest hreq;
    hreq.set_service(service);
    grpc::health::v1::HealthCheckResponse hresp;
    ASSERT_TRUE(health->Check(&hctx, hreq, &hresp).ok()) << service;
    EXPECT_EQ(hresp.status(), want) << service;
  }
  grpc::ClientContext unknown_ctx;
  grpc::health::v1::HealthCheckRequest unknown;
  unknown.set_service("model/llama");
  grpc::health::v1::HealthCheckResponse unknown_resp;
  EXPECT_EQ(health->Check(&unknown_ctx, unknown, &unknown_resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // The other model is unaffected.
  EXPECT_TRUE(UnaryGenerate(stub, Prompt("hello", 2), &resp).ok());
}

// A policy that sends everything to one model, versioned so decisions are attributable.
std::string OneModelPolicy(const std::string& version, const std::string& model) {
  return absl::StrCat("schema: 1\nversion: ", version,
                      "\nmodels: {qwen: {vision: true}, nemotron: {}}\n"
                      "classes: [accuracy_critical]\ndefault_class: accuracy_critical\n"
                      "rules:\n  - {name: all, action: {route: ",
                      model, "}}\n");
}

void WriteFile(const std::string& path, const std::string& text) {
  // Write then rename, so the watcher never reads half a file.
  std::ofstream(path + ".tmp") << text;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// Two fast workers behind a gateway that reads its policy from a file the test rewrites.
class PolicyReloadTest : public ::testing::Test {
 protected:
  // The workers and a gateway with `gateway_args` and `policy` in `policy_`.
  void StartStack(const std::string& watch_interval,
                  const std::string& policy = OneModelPolicy("v0", "qwen"),
                  const std::vector<std::string>& gateway_args = {}) {
    WriteFile(policy_, policy);
    std::vector<std::string> args = {"--policy=" + policy_,
                                     "--policy_watch_interval=" + watch_interval};
    args.insert(args.end(), gateway_args.begin(), gateway_args.end());
    ASSERT_NO_FATAL_FAILURE(StartTwoModelStack(args, &qwen_, &nemotron_, &gateway_));
  }

  const std::string policy_ = TempPath("policy.yaml");
  Server qwen_;
  Server nemotron_;
  Server gateway_;
};

TEST_F(PolicyReloadTest, ReloadsAtomicallyUnderLoadAndKeepsTheOldPolicyOnErrors) {
  // The file watcher is slowed right down: reloads here come from SIGHUP.
  ASSERT_NO_FATAL_FAILURE(StartStack("1h"));
  Server* gateway = &gateway_;
  const std::string& policy = policy_;
  auto stub = GatewayStub(gateway->grpc_address);

  // Continuous load while the policy flips between versions.
  std::atomic<bool> stop{false};
  std::atomic<int> served{0};
  std::atomic<int> failed{0};
  std::atomic<int> misattributed{0};
  std::thread load([&] {
    while (!stop.load()) {
      tandem::v1::GenerateResponse resp;
      grpc::Status s = UnaryGenerate(stub.get(), Prompt("under reload", 2), &resp);
      if (!s.ok()) {
        failed.fetch_add(1);
        continue;
      }
      served.fetch_add(1);
      // Version vN routes to qwen for even N and nemotron for odd N: the model must agree with
      // the version the response names, or the request was decided by two policies.
      const std::string& v = resp.route().policy_version();
      const int n = v.size() > 1 ? std::stoi(v.substr(1)) : -1;
      const std::string want = n % 2 == 0 ? "qwen" : "nemotron";
      if (n < 0 || resp.route().model() != want) misattributed.fetch_add(1);
    }
  });
  constexpr int kReloads = 100;
  // Requests must be answered while the reloads run (how many depends on the machine: under
  // TSan a reload can take as long as several requests).
  ASSERT_TRUE(WaitUntil([&] { return served.load() > 0 || failed.load() > 0; }));
  const int served_before = served.load();
  for (int i = 1; i <= kReloads; ++i) {
    WriteFile(policy, OneModelPolicy(absl::StrCat("v", i), i % 2 == 0 ? "qwen" : "nemotron"));
    gateway->process->Signal(SIGHUP);
    ASSERT_EQ(WaitForMetric(gateway->metrics_address, "tandem_policy_reloads_total",
                            {{"result", "ok"}}, i + 1)
                  .value_or(-1),
              i + 1);
  }
  // An invalid file is refused; the live policy keeps serving.
  WriteFile(policy, "schema: 1\nversion: broken\nrules: [}\n");
  gateway->process->Signal(SIGHUP);
  EXPECT_EQ(WaitForMetric(gateway->metrics_address, "tandem_policy_reloads_total",
                          {{"result", "error"}}, 1)
                .value_or(-1),
            1);
  const int served_during = served.load() - served_before;
  stop.store(true);
  load.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(misattributed.load(), 0);
  EXPECT_GT(served_during, 0);

  grpc::ClientContext ctx;
  tandem::v1::RouteResponse route;
  ASSERT_TRUE(stub->Route(&ctx, Prompt("which policy?"), &route).ok());
  EXPECT_EQ(route.route().policy_version(), absl::StrCat("v", kReloads));
  auto metrics = HttpGet(gateway->metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(MetricValue(*metrics, "tandem_policy_info", {{"version", absl::StrCat("v", kReloads)}})
                .value_or(-1),
            1);
  EXPECT_THAT(gateway->process->ReadLog(), HasSubstr("the live policy stays"));
  EXPECT_TRUE(PromtoolCheckMetrics(*metrics).ok());
}

TEST(PolicyFallbackTest, EndpointsCanComeFromThePolicyAlone) {
  auto qwen = StartWorker("qwen", {"--synthetic_time_scale=0"});
  ASSERT_TRUE(qwen.ok());
  const std::string policy = TempPath("endpoints.yaml");
  WriteFile(policy, absl::StrCat("schema: 1\nversion: e1\nmodels:\n  qwen: {vision: true, "
                                 "endpoints: [\"",
                                 qwen->grpc_address,
                                 "\"]}\nclasses: [accuracy_critical]\n"
                                 "default_class: accuracy_critical\n"
                                 "rules:\n  - {name: all, action: {route: qwen}}\n"));
  auto gateway = StartGateway({}, {"--policy=" + policy});  // no --workers at all
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  ASSERT_TRUE(WaitForHealth(gateway->grpc_address, "model/qwen", true).ok());
  auto stub = GatewayStub(gateway->grpc_address);
  tandem::v1::GenerateResponse resp;
  ASSERT_TRUE(UnaryGenerate(stub.get(), Prompt("hi", 2), &resp).ok());
  EXPECT_EQ(resp.route().worker(), qwen->grpc_address);
}

TEST(PolicyFallbackTest, ShippedDefaultPolicyFallsBackWhenAModelIsDown) {
  NemotronDown stack;
  ASSERT_NO_FATAL_FAILURE(
      stack.Start({"--policy=" + tandem::testing::SourcePath("/policies/default.yaml")}));
  tandem::v1::GenerateResponse resp;
  ASSERT_TRUE(UnaryGenerate(stack.stub.get(), LatencyPrompt("quick chat turn", 2), &resp).ok());
  EXPECT_EQ(resp.route().model(), "qwen");
  EXPECT_EQ(resp.route().rule(), "latency");
  EXPECT_EQ(resp.route().request_class(), "latency_critical");
  EXPECT_EQ(resp.route().policy_version(), "default-6");
  EXPECT_THAT(resp.route().reason(), HasSubstr("fell back from 'nemotron'"));
  // The rule's reasoning holds on the fallback model too, and says who decided it.
  EXPECT_EQ(resp.route().reasoning(), "off");
  EXPECT_EQ(resp.route().reasoning_source(), "rule 'latency'");
  EXPECT_EQ(resp.route().prompt_tokens_source(), "estimate");
  EXPECT_GT(resp.route().prompt_tokens(), 0);
  EXPECT_EQ(ScrapeMetric(stack.gateway.metrics_address, "tandem_gateway_route_decisions_total",
                         {{"rule", "latency"}, {"reasoning", "off"}}),
            1);
}

TEST_F(PolicyReloadTest, DecisionLogReplaysAgainstACandidatePolicyAndAdminRpcReloads) {
  const std::string log = TempPath("decisions.jsonl");
  std::ifstream src(tandem::testing::SourcePath("/policies/default.yaml"));
  std::stringstream text;
  text << src.rdbuf();
  // The copy lives elsewhere, so its classifier path must be absolute.
  std::string copy = text.str();
  const std::string rel = "../router/classifier/model.tcls";
  copy.replace(copy.find(rel), rel.size(),
               tandem::testing::SourcePath("/router/classifier/model.tcls"));
  ASSERT_NO_FATAL_FAILURE(StartStack("1h", copy, {"--decision_log=" + log}));
  Server* gateway = &gateway_;
  auto stub = GatewayStub(gateway->grpc_address);
  // Two accuracy requests, a chat greeting from an anonymous caller that labels itself a premium
  // tenant, and a latency-hinted turn.
  std::vector<GenerateRequest> requests = {Prompt("Write a JSON parser in Rust", 2),
                                           Prompt("Implement a thread-safe LRU cache in C++", 2),
                                           Prompt("hello", 2), Prompt("hi", 2)};
  (*requests[2].mutable_labels())["tenant"] = "enterprise";
  requests[3].mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);
  for (const auto& r : requests) {
    tandem::v1::GenerateResponse resp;
    ASSERT_TRUE(UnaryGenerate(stub.get(), r, &resp).ok());
  }
  ASSERT_EQ(WaitForMetric(gateway->metrics_address, "tandem_gateway_decision_log_records_total",
                          {{"outcome", "written"}}, 4)
                .value_or(-1),
            4);
  std::ifstream logged(log);
  std::string first;
  std::getline(logged, first);
  EXPECT_THAT(first, HasSubstr("\"policy_version\":\"default-6\""));
  EXPECT_THAT(first, ::testing::Not(HasSubstr("JSON parser")));  // no prompt text by default

  // cost-saver sends the two accuracy requests to nemotron; the "hello" stays on nemotron: its
  // `tenant` label buys nothing (cost-saver's premium rule reads the authenticated tenant).
  const std::string ctl = tandem::testing::CtlBin();
  CommandResult replay = RunCommand(
      absl::StrCat(ctl, " policy replay --log=", log, " --old=", policy_,
                   " --new=" + tandem::testing::SourcePath("/policies/cost-saver.yaml")));
  EXPECT_EQ(replay.exit_code, 0) << replay.out;
  EXPECT_THAT(replay.out, HasSubstr("4 recorded decisions replayed: 2 change (50.0%) from "
                                    "default-6 to cost-saver-1"));
  EXPECT_THAT(replay.out, HasSubstr("qwen -> nemotron: 2"));
  EXPECT_THAT(replay.out, Not(HasSubstr("nemotron -> qwen")));
  EXPECT_THAT(replay.out, HasSubstr("accuracy_critical -> latency_critical: 2"));

  // The admin RPC reloads; an invalid file is refused with every error and the old one stays.
  const std::string admin = absl::StrCat(ctl, " --plaintext --gateway=", gateway->grpc_address);
  WriteFile(policy_, OneModelPolicy("v7", "nemotron"));
  CommandResult reload = RunCommand(admin + " policy reload");
  EXPECT_EQ(reload.exit_code, 0) << reload.out;
  EXPECT_THAT(reload.out, HasSubstr("version=v7"));
  WriteFile(policy_, "schema: 1\nversion: broken\nmodels: {}\n");
  CommandResult bad = RunCommand(admin + " policy reload");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.out, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(bad.out, HasSubstr("classes: required key is missing"));
  EXPECT_THAT(RunCommand(admin + " policy show").out, HasSubstr("version=v7"));
}

TEST_F(PolicyReloadTest, ShadowCopiesAreSentMeasuredAndDiscarded) {
  ASSERT_NO_FATAL_FAILURE(StartStack("1h"));
  WriteFile(policy_,
            "schema: 1\nversion: shadowing\nmodels: {qwen: {vision: true}, nemotron: {}}\n"
            "classes: [accuracy_critical]\ndefault_class: accuracy_critical\n"
            "rules:\n  - {name: all, action: {route: qwen, shadow: nemotron}}\n");
  gateway_.process->Signal(SIGHUP);
  ASSERT_EQ(
      WaitForMetric(gateway_.metrics_address, "tandem_policy_info", {{"version", "shadowing"}}, 1)
          .value_or(-1),
      1);
  auto stub = GatewayStub(gateway_.grpc_address);
  tandem::v1::GenerateResponse resp;
  ASSERT_TRUE(UnaryGenerate(stub.get(), Prompt("measure nemotron on this", 6), &resp).ok());
  EXPECT_EQ(resp.route().model(), "qwen");  // the caller gets the primary's answer only
  EXPECT_EQ(WaitForMetric(gateway_.metrics_address, "tandem_gateway_shadow_requests_total",
                          {{"model_name", "nemotron"}, {"code", "OK"}}, 1)
                .value_or(-1),
            1);
  auto metrics = HttpGet(gateway_.metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(MetricValue(*metrics, "tandem_gateway_shadow_completion_tokens_total",
                        {{"model_name", "nemotron"}})
                .value_or(-1),
            6);
  EXPECT_EQ(MetricValue(*metrics, "tandem_gateway_shadow_duration_seconds_count",
                        {{"model_name", "nemotron"}})
                .value_or(-1),
            1);
  // The shadow really ran on the other worker, under its own request id.
  auto worker = HttpGet(nemotron_.metrics_address, "/metrics");
  ASSERT_TRUE(worker.ok());
  EXPECT_EQ(MetricValue(*worker, "tandem_worker_generation_tokens_total").value_or(-1), 6);
  EXPECT_THAT(nemotron_.process->ReadLog(), HasSubstr(resp.request_id() + "-shadow"));
}

TEST_F(PolicyReloadTest, FileChangesAreNoticedWithoutASignal) {
  ASSERT_NO_FATAL_FAILURE(StartStack("50ms"));
  Server* gateway = &gateway_;
  const std::string& policy = policy_;
  WriteFile(policy, OneModelPolicy("v1", "nemotron"));
  EXPECT_EQ(WaitForMetric(gateway->metrics_address, "tandem_policy_info", {{"version", "v1"}}, 1)
                .value_or(-1),
            1);
}

// Workers with the real-time simulator and answers far longer than any test waits for.
class SlowStackTest : public ::testing::Test {
 protected:
  // A gateway with one model: every rule routes to qwen.
  void StartStack(const std::vector<std::string>& worker_args = {},
                  const std::vector<std::string>& gateway_args = {}) {
    std::vector<std::string> args = {"--synthetic_time_scale=1",
                                     "--synthetic_output_tokens=1000000"};
    args.insert(args.end(), worker_args.begin(), worker_args.end());
    auto worker = StartWorker("qwen", args);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
    std::vector<std::string> gw_args = {"--latency_model=qwen", "--long_context_model=qwen"};
    gw_args.insert(gw_args.end(), gateway_args.begin(), gateway_args.end());
    auto gateway = StartGateway({"qwen=" + worker_.grpc_address}, gw_args);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = std::move(*gateway);
    ASSERT_TRUE(WaitForHealth(gateway_.grpc_address, "model/qwen", true).ok());
    stub_ = GatewayStub(gateway_.grpc_address);
  }

  // Fills a worker of one batch slot and one queue slot with two endless streams (the first
  // running, the second waiting in its admission queue), then expects a third request, sent with
  // `deadline`, to be refused RESOURCE_EXHAUSTED with `message` and the worker to have refused
  // `queue_full` requests itself. The two streams' statuses once cancelled: `occupants`.
  void ExpectAThirdRefused(const std::vector<std::string>& gateway_args,
                           std::chrono::milliseconds deadline, const std::string& message,
                           double queue_full,
                           std::pair<grpc::Status, grpc::Status>* occupants = nullptr) {
    ASSERT_NO_FATAL_FAILURE(StartStack({"--max_batch_size=1", "--max_queue=1"}, gateway_args));
    grpc::ClientContext running_ctx, waiting_ctx;
    auto running = stub_->GenerateStream(&running_ctx, Prompt("first", 30000));
    tandem::v1::GenerateStreamChunk chunk;
    ASSERT_TRUE(running->Read(&chunk));  // in the batch
    auto waiting = stub_->GenerateStream(&waiting_ctx, Prompt("second", 30000));
    ASSERT_EQ(WaitForMetric(worker_.metrics_address, "tandem_worker_num_requests_waiting", {}, 1)
                  .value_or(-1),
              1);
    tandem::v1::GenerateResponse resp;
    grpc::Status s = UnaryGenerate(stub_.get(), Prompt("third", 10), &resp, deadline);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(), HasSubstr(message));
    EXPECT_EQ(ScrapeMetric(worker_.metrics_address, "tandem_worker_rejected_requests_total",
                           {{"reason", "queue_full"}}),
              queue_full);
    running_ctx.TryCancel();
    waiting_ctx.TryCancel();
    while (running->Read(&chunk)) {
    }
    while (waiting->Read(&chunk)) {
    }
    grpc::Status first = running->Finish();
    grpc::Status second = waiting->Finish();
    if (occupants != nullptr) *occupants = {first, second};
  }

  // Sends SIGTERM to `server` once `stream` (started by the caller) gave its first chunk, and
  // waits until `server`'s health says NOT_SERVING.
  void TermWhileStreaming(Server* server,
                          grpc::ClientReader<tandem::v1::GenerateStreamChunk>* stream) {
    tandem::v1::GenerateStreamChunk chunk;
    ASSERT_TRUE(stream->Read(&chunk));
    server->process->Signal(SIGTERM);
    ASSERT_TRUE(WaitForHealth(server->grpc_address, "", false).ok());
  }

  // Expects `server`'s process to exit 0 within 20 s.
  static void ExpectCleanExit(Server* server) {
    const int status = server->process->Wait(absl::Seconds(20));
    ASSERT_NE(status, -1);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }

  Server worker_;
  Server gateway_;
  std::unique_ptr<tandem::v1::Gateway::Stub> stub_;
};

TEST_F(SlowStackTest, SixtyFourConcurrentStreamsShareTheBatchAndLoseNoChunk) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  constexpr int kStreams = 64;
  constexpr int kTokens = 48;
  std::vector<std::string> failures(kStreams);
  std::vector<size_t> chunk_counts(kStreams);
  std::vector<std::thread> threads;
  for (int t = 0; t < kStreams; ++t) {
    threads.emplace_back([&, t] {
      std::vector<tandem::v1::GenerateStreamChunk> chunks;
      grpc::Status s =
          ReadStream(stub_.get(), Prompt(absl::StrCat("stream ", t), kTokens), &chunks);
      std::string text;
      for (const auto& c : chunks) text += c.text();
      const size_t words = std::vector<std::string>(absl::StrSplit(text, ' ')).size();
      chunk_counts[t] = chunks.size();
      if (!s.ok() || chunks.back().usage().completion_tokens() != kTokens || words != kTokens ||
          chunks.back().finish_reason() != tandem::v1::FINISH_REASON_LENGTH) {
        failures[t] = absl::StrCat("status=", s.error_message(), " words=", words);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kStreams; ++t) {
    EXPECT_TRUE(failures[t].empty()) << t << ": " << failures[t];
    EXPECT_GT(chunk_counts[t], 2u) << t;  // relayed as it was generated, not in one piece
  }
  // Continuous batching: the streams ran together, not one after another.
  auto metrics = HttpGet(worker_.metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok());
  const double steps = MetricValue(*metrics, "tandem_worker_batch_size_count").value_or(0);
  const double sequences = MetricValue(*metrics, "tandem_worker_batch_size_sum").value_or(0);
  ASSERT_GT(steps, 0);
  EXPECT_GT(sequences / steps, 8.0) << "mean batch size";
}

TEST_F(SlowStackTest, ClientCancellationReachesTheWorker) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  grpc::ClientContext ctx;
  auto reader = stub_->GenerateStream(&ctx, Prompt("a long answer please", 30000));
  tandem::v1::GenerateStreamChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));
  ASSERT_TRUE(reader->Read(&chunk));  // generation is under way
  ctx.TryCancel();
  while (reader->Read(&chunk)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(WaitForMetric(worker_.metrics_address, "tandem_worker_requests_total",
                          {{"finish_reason", "cancelled"}}, 1)
                .value_or(-1),
            1);
  EXPECT_EQ(WaitForMetric(worker_.metrics_address, "tandem_worker_num_requests_running", {}, 0)
                .value_or(-1),
            0);
  EXPECT_EQ(WaitForMetric(gateway_.metrics_address, "tandem_gateway_requests_total",
                          {{"model_name", "qwen"}, {"code", "CANCELLED"}}, 1)
                .value_or(-1),
            1);
}

TEST_F(SlowStackTest, DeadlineIsPropagatedAndEnforced) {
  // The worker is told to stop 1 s before the caller's deadline: ample for the transit times of
  // a sanitizer build on a busy machine, so the worker's stop comes first and is what the caller
  // sees (without the offset the caller's own deadline and the cancel it sends race the worker's).
  ASSERT_NO_FATAL_FAILURE(
      StartStack({}, {"--worker_deadline_offset=1s", "--eject_after_failures=1"}));
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(3));  // far shorter than the answer (minutes)
  tandem::v1::GenerateResponse resp;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status s = stub_->Generate(&ctx, Prompt("a long answer please", 30000), &resp);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The worker's status, relayed: not the client library's own "Deadline Exceeded".
  EXPECT_THAT(s.error_message(), HasSubstr("deadline passed"));
  EXPECT_GE(elapsed, std::chrono::milliseconds(1900));  // the worker had deadline - offset
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  // The worker stopped the work itself, because the deadline travelled with the request.
  EXPECT_EQ(WaitForMetric(worker_.metrics_address, "tandem_worker_requests_total",
                          {{"finish_reason", "deadline_exceeded"}}, 1)
                .value_or(-1),
            1)
      << "worker log:\n"
      << worker_.process->ReadLog();
  EXPECT_EQ(WaitForMetric(worker_.metrics_address, "tandem_worker_num_requests_running", {}, 0)
                .value_or(-1),
            0);
  // Not held against the worker (one fault would eject it here): the request's own deadline.
  auto metrics = HttpGet(gateway_.metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(MetricValue(*metrics, "tandem_gateway_endpoint_ejections_total").value_or(-1), 0);
}

TEST_F(SlowStackTest, WorkerTimeoutHeaderBoundsTheWorkAndBadValuesAreIgnored) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  auto worker_stub = tandem::v1::Worker::NewStub(
      grpc::CreateChannel(worker_.grpc_address, grpc::InsecureChannelCredentials()));
  const tandem::v1::WorkerGenerateRequest wreq = WorkerPrompt("a long answer please", 30000);
  auto run = [&](const std::string& header) {
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(30));
    ctx.AddMetadata("tandem-worker-timeout-ms", header);
    auto stream = worker_stub->Generate(&ctx, wreq);
    tandem::v1::WorkerGenerateChunk chunk;
    int chunks = 0;
    // A bad header leaves the 30 s deadline: stop reading after a few chunks and cancel.
    while (stream->Read(&chunk)) {
      if (++chunks == 5 && header != "300") ctx.TryCancel();
    }
    return stream->Finish();
  };
  grpc::Status bounded = run("300");
  EXPECT_EQ(bounded.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << bounded.error_message();
  for (const std::string bad : {"soon", "-5", "99999999999999999999"}) {
    EXPECT_EQ(run(bad).error_code(), grpc::StatusCode::CANCELLED) << bad;
  }
  EXPECT_EQ(WaitForMetric(worker_.metrics_address, "tandem_worker_requests_total",
                          {{"finish_reason", "deadline_exceeded"}}, 1)
                .value_or(-1),
            1);
  EXPECT_EQ(WaitForMetric(worker_.metrics_address, "tandem_worker_requests_total",
                          {{"finish_reason", "cancelled"}}, 3)
                .value_or(-1),
            3);
}

TEST_F(SlowStackTest, FullAdmissionQueueIsResourceExhaustedAtOnce) {
  // Without the gateway's dispatch queue (--max_inflight=0) every request reaches the worker.
  std::pair<grpc::Status, grpc::Status> occupants;
  ASSERT_NO_FATAL_FAILURE(ExpectAThirdRefused({"--max_inflight=0"}, std::chrono::seconds(5),
                                              "admission queue is full", 1, &occupants));
  EXPECT_EQ(occupants.first.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(occupants.second.error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(SlowStackTest, TheGatewayNeverOverrunsAWorkersAdmissionQueue) {
  // The worker takes two (batch 1 + queue 1): a third waits in the gateway's fair queue, where
  // tenants take turns, and is refused from there when its wait runs out.
  ExpectAThirdRefused({"--max_queue_wait=300ms"}, std::chrono::seconds(10), "dispatch slot", 0);
}

TEST_F(SlowStackTest, WorkerDrainsOnSigterm) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  auto worker_stub = tandem::v1::Worker::NewStub(
      grpc::CreateChannel(worker_.grpc_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext stream_ctx;
  auto stream = stub_->GenerateStream(&stream_ctx, Prompt("keep going", 30000));
  ASSERT_NO_FATAL_FAILURE(TermWhileStreaming(&worker_, stream.get()));
  // New work is refused while the admitted request still streams.
  const WorkerCall late =
      WorkerGenerate(worker_stub.get(), WorkerPrompt("late"), std::chrono::seconds(3));
  EXPECT_EQ(late.chunks, 0);
  EXPECT_EQ(late.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(late.status.error_message(), HasSubstr("draining"));
  tandem::v1::GenerateStreamChunk chunk;
  EXPECT_TRUE(stream->Read(&chunk));

  // When the last request ends the worker exits cleanly.
  stream_ctx.TryCancel();
  while (stream->Read(&chunk)) {
  }
  stream->Finish();
  ExpectCleanExit(&worker_);
}

TEST_F(SlowStackTest, GatewayDrainsOnSigtermWithoutLosingTheStream) {
  ASSERT_NO_FATAL_FAILURE(StartStack());
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(30));
  // ~60 decode steps of 6.9 ms: the stream is still running when the signal arrives.
  auto stream = stub_->GenerateStream(&ctx, Prompt("finish me", 60));
  ASSERT_NO_FATAL_FAILURE(TermWhileStreaming(&gateway_, stream.get()));
  // New work is refused with a retryable status while the admitted stream finishes.
  {
    grpc::ClientContext late_ctx;
    Deadline(&late_ctx, std::chrono::seconds(5));
    tandem::v1::GenerateResponse late;
    GenerateRequest too_late = Prompt("too late", 2);
    too_late.set_request_id("refused-while-draining-1");
    grpc::Status s = stub_->Generate(&late_ctx, too_late, &late);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(s.error_message(), HasSubstr("draining"));
  }
  // Callers keep arriving through the end of the drain and stop 100 ms after it, as clients do
  // once refused (they retry elsewhere). Each is refused UNAVAILABLE, which clients retry; none
  // is cut off CANCELLED by a server that stops while it arrives (--drain_quiet_period).
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::map<grpc::StatusCode, int> late_codes;
  std::vector<std::thread> late_callers;
  for (int t = 0; t < 2; ++t) {
    late_callers.emplace_back([&] {
      while (!stop.load()) {
        grpc::ClientContext c;
        Deadline(&c, std::chrono::seconds(5));
        tandem::v1::GenerateResponse r;
        const grpc::StatusCode code = stub_->Generate(&c, Prompt("too late", 2), &r).error_code();
        absl::MutexLock l(&mu);
        ++late_codes[code];
      }
    });
  }
  int32_t completion_tokens = 0;
  tandem::v1::GenerateStreamChunk chunk;
  while (stream->Read(&chunk)) completion_tokens = chunk.usage().completion_tokens();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(completion_tokens, 60);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // how long they keep coming
  stop = true;
  for (auto& t : late_callers) t.join();
  EXPECT_EQ(late_codes.count(grpc::StatusCode::CANCELLED), 0u);
  for (const auto& [code, n] : late_codes) {
    EXPECT_EQ(code, grpc::StatusCode::UNAVAILABLE) << n << " calls";
  }
  ASSERT_NO_FATAL_FAILURE(ExpectCleanExit(&gateway_));
  // The refusal is logged under the caller's request id, like every other end line.
  EXPECT_THAT(gateway_.process->ReadLog(),
              HasSubstr("request_id=refused-while-draining-1 rpc=Generate end"));
}

}  // namespace
}  // namespace tandem::testing
