// tandem-worker --engine=upstream against a scripted engine (tests/support/fake_engine.h) that
// shows the faults real engines show by accident: loading, errors, garbage, a stream cut short,
// a hang, a missing usage, another model, stale metrics. The worker is a real process; the
// callers get the right status, and the gateway fails over.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/admin.grpc.pb.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/support/fake_engine.h"
#include "tests/support/policies.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/streams.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

using Call = WorkerCall;

class UpstreamFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = FakeEngine::Start();
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
  }
  void StartWorkerFor(const std::string& profile, std::vector<std::string> extra = {}) {
    std::vector<std::string> flags = {"--engine=upstream", "--upstream_profile=" + profile,
                                      "--upstream_url=http://" + engine_->address(),
                                      "--upstream_health_interval=50ms",
                                      "--upstream_metrics_interval=50ms"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto w = StartWorker("qwen", flags);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    stub_ = tandem::v1::Worker::NewStub(
        grpc::CreateChannel(worker_.grpc_address, grpc::InsecureChannelCredentials()));
  }
  Call Generate(std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
    tandem::v1::WorkerGenerateRequest req = WorkerPrompt("hello");
    req.mutable_reasoning()->set_mode(tandem::v1::REASONING_MODE_OFF);
    return WorkerGenerate(stub_.get(), req, deadline);
  }
  double WorkerMetric(const std::string& name, const std::map<std::string, std::string>& labels) {
    return ScrapeMetric(worker_.metrics_address, name, labels);
  }

  std::unique_ptr<FakeEngine> engine_;
  Server worker_;
  std::unique_ptr<tandem::v1::Worker::Stub> stub_;
};

TEST_F(UpstreamFaultsTest, ALoadingEngineKeepsTheWorkerStartingUntilItIsReady) {
  engine_->SetHealth(503);
  ASSERT_NO_FATAL_FAILURE(StartWorkerFor("vllm"));
  Call c = Generate();
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(c.status.error_message(), HasSubstr("starting"));
  EXPECT_EQ(WorkerMetric("tandem_worker_ready", {}), 0);
  engine_->SetHealth(200);
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", /*serving=*/true).ok());
  Call ok = Generate();
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.text, "Hello world");
  EXPECT_EQ(ok.prompt_tokens, 5);
  EXPECT_EQ(ok.last.completion_tokens(), 2);
  EXPECT_EQ(ok.last.finish_reason(), tandem::v1::FINISH_REASON_STOP);
  // What the worker sent: the profile's request, thinking off by the profile's switch.
  auto body = nlohmann::json::parse(engine_->last_chat_body());
  EXPECT_EQ(body["model"], "fake/model");
  EXPECT_EQ(body["chat_template_kwargs"]["enable_thinking"], false);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
}

TEST_F(UpstreamFaultsTest, TheOneTokenProbeKeepsAnEngineThatCannotGenerateOutOfService) {
  engine_->SetChat(FakeEngine::Chat::kStatus, 500);  // its health answers; generating fails
  ASSERT_NO_FATAL_FAILURE(StartWorkerFor("vllm", {"--upstream_probe_interval=50ms"}));
  ASSERT_TRUE(WaitUntil([&] { return engine_->chat_requests() >= 2; }));
  EXPECT_EQ(WorkerMetric("tandem_worker_ready", {}), 0) << "the first ready needs a good probe";
  engine_->SetChat(FakeEngine::Chat::kReplay);
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", /*serving=*/true).ok());
  EXPECT_THAT(engine_->last_chat_body(), HasSubstr("\"max_tokens\":1"));
  // Ready, then generating breaks: the probe, repeated at every check once it failed, makes the
  // engine dead after --upstream_health_failures checks in a row.
  engine_->SetChat(FakeEngine::Chat::kStatus, 500);
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", /*serving=*/false).ok());
  engine_->SetChat(FakeEngine::Chat::kReplay);
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", /*serving=*/true).ok());
  EXPECT_TRUE(Generate().status.ok()) << "ready again";
}

TEST_F(UpstreamFaultsTest, TheWorkerNamesTheEnginesGpuWithoutOpeningIt) {
  // This machine may have no GPU at all: a worker that opened device 0 would not start.
  ASSERT_NO_FATAL_FAILURE(StartWorkerFor("vllm", {"--device=0"}));
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", /*serving=*/true).ok());
  EXPECT_EQ(WorkerMetric("tandem_worker_info", {{"device", "cuda:0"}}), 1);
  EXPECT_EQ(WorkerMetric("tandem_worker_device_memory_total_bytes", {}), 0);
  EXPECT_TRUE(Generate().status.ok());
}

TEST_F(UpstreamFaultsTest, EngineErrorsKeepTheirMeaningForTheCaller) {
  ASSERT_NO_FATAL_FAILURE(StartWorkerFor("vllm"));
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", true).ok());
  const std::pair<int, grpc::StatusCode> cases[] = {
      {500, grpc::StatusCode::UNAVAILABLE},
      {503, grpc::StatusCode::UNAVAILABLE},
      {400, grpc::StatusCode::INVALID_ARGUMENT},
      {429, grpc::StatusCode::RESOURCE_EXHAUSTED},
  };
  for (auto [http, want] : cases) {
    engine_->SetChat(FakeEngine::Chat::kStatus, http);
    Call c = Generate();
    EXPECT_EQ(c.status.error_code(), want) << http;
    EXPECT_THAT(c.status.error_message(), HasSubstr(absl::StrCat("HTTP ", http)));
    EXPECT_THAT(c.status.error_message(), HasSubstr("scripted failure"));
  }
}

TEST_F(UpstreamFaultsTest, GarbageAndCutStreamsAreDataLossAndAMissingUsageIsCounted) {
  ASSERT_NO_FATAL_FAILURE(StartWorkerFor("vllm"));
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", true).ok());
  engine_->SetChat(FakeEngine::Chat::kGarbage);
  EXPECT_EQ(Generate().status.error_code(), grpc::StatusCode::DATA_LOSS);
  engine_->SetChat(FakeEngine::Chat::kTruncate);
  Call cut = Generate();
  EXPECT_EQ(cut.status.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(cut.status.error_message(), HasSubstr("cut short"));
  // An engine that sends no usage: the worker counts the chunks it relayed.
  engine_->SetChat(FakeEngine::Chat::kReplay);
  engine_->SetStream(
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n"
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"},\"finish_reason\":\"length\"}]}"
      "\n\ndata: [DONE]\n\n");
  Call counted = Generate();
  ASSERT_TRUE(counted.status.ok()) << counted.status.error_message();
  EXPECT_EQ(counted.text, "abc");
  EXPECT_EQ(counted.last.completion_tokens(), 3);
  EXPECT_EQ(counted.last.finish_reason(), tandem::v1::FINISH_REASON_LENGTH);
}

TEST_F(UpstreamFaultsTest, AHungEngineEndsAtTheDeadlineOrTheIdleTimeout) {
  ASSERT_NO_FATAL_FAILURE(StartWorkerFor("vllm", {"--upstream_idle_timeout=1s"}));
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", true).ok());
  engine_->SetChat(FakeEngine::Chat::kHang);
  Call late = Generate(std::chrono::milliseconds(400));
  EXPECT_EQ(late.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  Call idle = Generate(std::chrono::seconds(20));
  EXPECT_EQ(idle.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(idle.status.error_message(), HasSubstr("engine at"));
  EXPECT_TRUE(
      WaitUntil([&] { return WorkerMetric("tandem_worker_num_requests_running", {}) == 0; }));
}

TEST_F(UpstreamFaultsTest, EngineMetricsBecomeTheWorkersAndGoStale) {
  engine_->SetMetrics(
      "vllm:num_requests_waiting{model_name=\"m\"} 7\n"
      "vllm:num_requests_running{model_name=\"m\"} 3\n"
      "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.75\n");
  ASSERT_NO_FATAL_FAILURE(StartWorkerFor("vllm", {"--upstream_metrics_stale=300ms"}));
  ASSERT_EQ(
      WaitForMetric(worker_.metrics_address, "tandem_worker_num_requests_waiting", {}, 7).status(),
      absl::OkStatus());
  EXPECT_EQ(WorkerMetric("tandem_worker_num_requests_running", {}), 3);
  EXPECT_EQ(WorkerMetric("tandem_worker_kv_cache_usage_perc", {}), 0.75);
  EXPECT_EQ(WorkerMetric("tandem_worker_engine_metrics_stale", {}), 0);
  // The engine's own series, served again with the engine's label.
  EXPECT_EQ(
      WorkerMetric("vllm:num_requests_waiting", {{"model_name", "m"}, {"tandem_engine", "vllm"}}),
      7);
  engine_->SetMetrics("");  // the engine's /metrics fails from now on
  ASSERT_EQ(
      WaitForMetric(worker_.metrics_address, "tandem_worker_engine_metrics_stale", {}, 1).status(),
      absl::OkStatus());
  // Stale engine gauges are not used: the worker's own counts stand alone, and the engine's
  // series are no longer served.
  EXPECT_EQ(WorkerMetric("tandem_worker_num_requests_waiting", {}), 0);
  EXPECT_GE(WorkerMetric("tandem_worker_engine_metrics_age_seconds", {}), 0.3);
  EXPECT_EQ(WorkerMetric("vllm:num_requests_waiting", {}), -1);
}

TEST_F(UpstreamFaultsTest, AKeyedEngineIsCalledWithItsKeyAndTheModelNamed) {
  engine_->RequireKey("s3cret");
  engine_->SetModel("served/id");
  ASSERT_NO_FATAL_FAILURE(
      StartWorkerFor("openai", {"--upstream_api_key_file=" + WriteTempFile("key", "s3cret\n"),
                                "--upstream_model=served/id"}));
  // Health (here the models list) and the calls all carry the key.
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", true).ok());
  ASSERT_TRUE(WorkerGenerate(stub_.get(), WorkerPrompt("hello")).status.ok());
  EXPECT_EQ(nlohmann::json::parse(engine_->last_chat_body())["model"], "served/id");
}

TEST_F(UpstreamFaultsTest, AnAnswerTheEngineAbortedIsNotWhole) {
  ASSERT_NO_FATAL_FAILURE(StartWorkerFor("vllm"));
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", true).ok());
  engine_->SetStream(
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"abort\"}]}\n\n"
      "data: [DONE]\n\n");
  Call c = Generate();
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(c.status.error_message(), HasSubstr("abort"));
}

TEST_F(UpstreamFaultsTest, AWrongServedModelStopsTheWorkerNamingBoth) {
  engine_->SetModel("someone/else");
  auto [code, output] =
      RunToExit(tandem::testing::WorkerBin(),
                {"--model=qwen", "--device=cpu", "--plaintext", "--listen=127.0.0.1:0",
                 "--metrics_listen=127.0.0.1:0", "--engine=upstream", "--upstream_profile=vllm",
                 "--upstream_url=http://" + engine_->address(), "--upstream_health_interval=50ms",
                 "--upstream_model=Qwen/Qwen3.5-35B-A3B"});
  EXPECT_NE(code, 0);
  EXPECT_THAT(output, HasSubstr("Qwen/Qwen3.5-35B-A3B"));
  EXPECT_THAT(output, HasSubstr("someone/else"));
}

// A failing engine behind one replica: the gateway retries on the other and, after a few, ejects
// the failing one (its breaker), so every answer comes back whole.
TEST_F(UpstreamFaultsTest, TheGatewayFailsOverFromAFailingEngine) {
  ASSERT_NO_FATAL_FAILURE(StartWorkerFor("vllm"));
  auto sim = StartWorker("qwen", {"--synthetic_time_scale=0"});
  ASSERT_TRUE(sim.ok()) << sim.status();
  auto gateway = StartGateway({"qwen=" + worker_.grpc_address, "qwen=" + sim->grpc_address},
                              {"--policy=" + WriteTempFile("q.yaml", kQwenOnlyPolicy),
                               // Every call may need its retry: on a slow machine the breaker's
                               // ejection can end between two calls. The budget is not what
                               // this test is about.
                               "--retry_budget_min=100"});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  auto stub = tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(gateway->grpc_address, grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(WaitForHealth(worker_.grpc_address, "", true).ok());
  // Both replicas probed ready by the gateway before the engine starts failing.
  ASSERT_TRUE(WaitUntil([&] {
    auto m = HttpGet(gateway->metrics_address, "/metrics");
    return m.ok() &&
           MetricValue(*m, "tandem_gateway_ready_workers", {{"model_name", "qwen"}}).value_or(0) ==
               2;
  }));
  engine_->SetChat(FakeEngine::Chat::kStatus, 500);
  for (int i = 0; i < 12; ++i) {
    tandem::v1::GenerateResponse r;
    grpc::Status s = UnaryGenerate(stub.get(), Prompt("hi", 8), &r, std::chrono::seconds(20));
    ASSERT_TRUE(s.ok()) << i << ": " << s.error_message();
    // Retried before anything streamed: the answer says where it ended.
    EXPECT_EQ(
        r.recovery().final_worker().empty() ? r.route().worker() : r.recovery().final_worker(),
        sim->grpc_address);
    EXPECT_EQ(r.usage().completion_tokens(), 8);
  }
  EXPECT_GE(engine_->chat_requests(), 1);
}

}  // namespace
}  // namespace tandem::testing
