// tandem-worker --engine=upstream in front of a real llama-server (llama.cpp v0.4.0, built by
// scripts/build_llama_server.sh, serving a tiny random-weight model written at test time), with a
// real gateway in front: answers whole and streamed, thinking on and off through the OpenAI
// front, tool calls, cancellation reaching the engine, health through an engine restart, mid-stream
// failover both ways between the upstream worker and another worker (the simulator, and the
// native CPU engine), and a wrong served model refused at start-up.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/admin.grpc.pb.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/support/llama_server.h"
#include "tests/support/policies.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/streams.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using tandem::v1::GenerateRequest;
using ::testing::HasSubstr;

GenerateRequest NoThinking(const std::string& text, int32_t max_tokens) {
  GenerateRequest r = Prompt(text, max_tokens);
  r.mutable_hints()->mutable_reasoning()->set_mode(tandem::v1::REASONING_MODE_OFF);
  return r;
}

class UpstreamEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = LlamaServerDir();
    ASSERT_TRUE(dir.ok()) << dir.status();
  }
  Server Must(absl::StatusOr<Server> s) {
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : Server{};
  }
  void EndALongAnswerEarly(bool by_deadline);
  void ExpectContinuedWhenFrozen(Server* llama, const Server& upstream, const Server& sim,
                                 const std::function<void()>& then);
  void StartGatewayFor(const std::vector<std::string>& workers,
                       std::vector<std::string> extra = {}) {
    extra.push_back("--policy=" + WriteTempFile("qwen_only.yaml", kQwenOnlyPolicy));
    std::vector<std::string> entries;
    for (const std::string& w : workers) entries.push_back("qwen=" + w);
    gateway_ = Must(StartGateway(entries, extra));
    auto channel = grpc::CreateChannel(gateway_.grpc_address, grpc::InsecureChannelCredentials());
    stub_ = tandem::v1::Gateway::NewStub(channel);
    admin_ = tandem::v1::Admin::NewStub(channel);
  }
  bool Usable(const std::string& address) {
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(5));
    tandem::v1::ListEndpointsResponse r;
    if (!admin_->ListEndpoints(&ctx, {}, &r).ok()) return false;
    for (const auto& e : r.endpoints()) {
      if (e.address() == address) return e.usable();
    }
    return false;
  }
  double EngineMetric(const Server& llama, const std::string& name) {
    return ScrapeMetric(llama.http_address, name);
  }

  Server gateway_;
  std::unique_ptr<tandem::v1::Gateway::Stub> stub_;
  std::unique_ptr<tandem::v1::Admin::Stub> admin_;
};

TEST_F(UpstreamEngineTest, AnswersWholeAndStreamedThroughTheGateway) {
  Server llama = Must(StartLlamaServer("qwen"));
  std::vector<std::string> flags = UpstreamWorkerFlags(llama);
  flags.push_back("--upstream_probe_interval=200ms");  // ready only once it generated a token
  Server worker = Must(StartWorker("qwen", flags));
  ASSERT_TRUE(WaitForHealth(worker.grpc_address, "", /*serving=*/true).ok());
  StartGatewayFor({worker.grpc_address});
  ASSERT_TRUE(WaitUntil([&] { return Usable(worker.grpc_address); }));

  tandem::v1::GenerateResponse whole;
  grpc::Status s =
      UnaryGenerate(stub_.get(), NoThinking("Say something.", 8), &whole, std::chrono::seconds(30));
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(whole.finish_reason(), tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(whole.usage().completion_tokens(), 8);
  EXPECT_GT(whole.usage().prompt_tokens(), 0);
  EXPECT_EQ(whole.route().worker(), worker.grpc_address);

  const Streamed streamed =
      StreamWith(stub_.get(), NoThinking("Say something.", 8), nullptr, std::chrono::seconds(30));
  ASSERT_TRUE(streamed.status.ok());
  EXPECT_EQ(streamed.text, whole.text()) << "greedy: the same answer whole and streamed";
  EXPECT_GT(streamed.chunks, 1);
  EXPECT_EQ(streamed.last.usage().completion_tokens(), 8);

  // The worker says what it fronts, and exports the engine's load as its own families.
  auto info = HttpGet(worker.metrics_address, "/metrics");
  ASSERT_TRUE(info.ok());
  EXPECT_THAT(*info, HasSubstr("engine=\"upstream:llamacpp\""));
  EXPECT_EQ(MetricValue(*info, "tandem_worker_requests_total", {{"finish_reason", "length"}})
                .value_or(-1),
            2);
  EXPECT_EQ(MetricValue(*info, "tandem_worker_engine_metrics_stale", {}).value_or(-1), 0);
  // ... and llama-server's own series, labelled with the engine (16 tokens generated above).
  EXPECT_TRUE(WaitUntil([&] {
    return ScrapeMetric(worker.metrics_address, "llamacpp:tokens_predicted_total",
                        {{"tandem_engine", "llamacpp"}}) >= 16;
  }));
}

TEST_F(UpstreamEngineTest, ThinkingOnAndOffReachTheEngineAndComeBackAsReasoning) {
  Server llama = Must(StartLlamaServer("qwen"));
  Server worker = Must(StartWorker("qwen", UpstreamWorkerFlags(llama)));
  StartGatewayFor({worker.grpc_address}, {"--http_listen=127.0.0.1:0"});
  ASSERT_TRUE(WaitUntil([&] { return Usable(worker.grpc_address); }));
  // Sampled (the tiny model's greedy answer is one letter repeated): some tokens are bytes of a
  // character still incomplete, chunks without text that the usage must still count.
  auto ask = [&](const char* effort) {
    nlohmann::json body = {{"model", "qwen"},
                           {"max_tokens", 24},
                           {"temperature", 1},
                           {"seed", 7},
                           {"messages", {{{"role", "user"}, {"content", "Think about it."}}}}};
    if (effort != nullptr) body["reasoning_effort"] = effort;
    auto a = HttpPost(gateway_.http_address, "/v1/chat/completions", body.dump());
    EXPECT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a.ok() ? a->status : 0, 200) << (a.ok() ? a->body : "");
    return a.ok() ? nlohmann::json::parse(a->body, nullptr, false) : nlohmann::json();
  };
  // The tiny model never closes its think block: with thinking on, all it says is reasoning.
  nlohmann::json on = ask("high");
  ASSERT_TRUE(on.is_object());
  EXPECT_EQ(on["usage"]["completion_tokens"], 24) << "tokens without text counted too";
  const auto& m_on = on["choices"][0]["message"];
  EXPECT_FALSE(m_on.value("reasoning_content", "").empty()) << on.dump();
  // With thinking off the engine's template closes it in the prompt: all of it is content.
  nlohmann::json off = ask("none");
  ASSERT_TRUE(off.is_object());
  const auto& m_off = off["choices"][0]["message"];
  EXPECT_TRUE(m_off.value("reasoning_content", "").empty()) << off.dump();
  EXPECT_FALSE(m_off.value("content", "").empty()) << off.dump();
}

// Tool calls written by llama-server's own tool-call grammar and parser (its tiny "qwen-tools"
// model always starts a call) come back as Tandem's structured calls: whole, streamed, through
// the OpenAI front, and the next turn with the call's result is accepted by the engine.
TEST_F(UpstreamEngineTest, ToolCallsFromTheEngineComeBackStructured) {
  Server llama = Must(StartLlamaServer("qwen-tools"));
  Server worker = Must(StartWorker("qwen", UpstreamWorkerFlags(llama)));
  StartGatewayFor({worker.grpc_address}, {"--http_listen=127.0.0.1:0"});
  ASSERT_TRUE(WaitUntil([&] { return Usable(worker.grpc_address); }));
  const std::string params =
      R"({"type":"object","properties":{"on":{"type":"boolean"}},"required":["on"]})";
  GenerateRequest ask = NoThinking("Lights on, please.", 200);
  tandem::v1::Tool* tool = ask.add_tools();
  tool->set_name("set_lights");
  tool->set_description("Switch the lights on or off.");
  tool->set_parameters_json(params);
  auto expect_call = [](const tandem::v1::ToolCall& call) {
    EXPECT_EQ(call.name(), "set_lights");
    EXPECT_FALSE(call.id().empty());
    const nlohmann::json args = nlohmann::json::parse(call.arguments_json(), nullptr, false);
    EXPECT_TRUE(args.is_object() && args.contains("on") && args["on"].is_boolean())
        << call.arguments_json() << ": typed by the tool's schema";
  };

  tandem::v1::GenerateResponse whole;
  grpc::Status s = UnaryGenerate(stub_.get(), ask, &whole, std::chrono::seconds(30));
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(whole.finish_reason(), tandem::v1::FINISH_REASON_TOOL_CALLS) << whole.text();
  ASSERT_EQ(whole.tool_calls_size(), 1) << whole.text();
  expect_call(whole.tool_calls(0));

  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(30));
  std::vector<tandem::v1::ToolCall> streamed_calls;
  const Streamed streamed = ReadToEnd<tandem::v1::GenerateStreamChunk>(
      stub_->GenerateStream(&ctx, ask).get(), [&](const tandem::v1::GenerateStreamChunk& c) {
        streamed_calls.insert(streamed_calls.end(), c.tool_calls().begin(), c.tool_calls().end());
      });
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  EXPECT_EQ(streamed.last.finish_reason(), tandem::v1::FINISH_REASON_TOOL_CALLS);
  ASSERT_EQ(streamed_calls.size(), 1u);
  expect_call(streamed_calls[0]);
  EXPECT_EQ(streamed_calls[0].arguments_json(), whole.tool_calls(0).arguments_json()) << "greedy";

  // The next turn: the assistant's call and its result, rendered by the engine's template.
  GenerateRequest next = ask;
  tandem::v1::ChatMessage* call = next.add_messages();
  call->set_role("assistant");
  *call->add_tool_calls() = whole.tool_calls(0);
  tandem::v1::ChatMessage* result = next.add_messages();
  result->set_role("tool");
  result->set_tool_call_id(whole.tool_calls(0).id());
  result->add_content()->set_text(R"({"lights":"on"})");
  tandem::v1::GenerateResponse after;
  s = UnaryGenerate(stub_.get(), next, &after, std::chrono::seconds(30));
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(after.usage().prompt_tokens(), whole.usage().prompt_tokens());

  nlohmann::json body = {
      {"model", "qwen"},
      {"max_tokens", 200},
      {"reasoning_effort", "none"},
      {"messages", {{{"role", "user"}, {"content", "Lights off, please."}}}},
      {"tools",
       {{{"type", "function"},
         {"function", {{"name", "set_lights"}, {"parameters", nlohmann::json::parse(params)}}}}}}};
  auto a = HttpPost(gateway_.http_address, "/v1/chat/completions", body.dump());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->status, 200) << a->body;
  const nlohmann::json j = nlohmann::json::parse(a->body, nullptr, false);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << a->body;
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "set_lights")
      << a->body;
}

// A long answer through the gateway ends early, cancelled by the caller or past its deadline:
// the caller gets the matching status, the worker closes its engine stream (llama-server stops
// generating) and counts the request under that finish reason.
void UpstreamEngineTest::EndALongAnswerEarly(bool by_deadline) {
  Server llama = Must(StartLlamaServer("qwen"));
  Server worker = Must(StartWorker("qwen", UpstreamWorkerFlags(llama)));
  StartGatewayFor({worker.grpc_address});
  ASSERT_TRUE(WaitUntil([&] { return Usable(worker.grpc_address); }));

  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(by_deadline ? 3 : 60));
  auto reader = stub_->GenerateStream(&ctx, NoThinking("Go on and on.", 3500));
  tandem::v1::GenerateStreamChunk c;
  ASSERT_TRUE(reader->Read(&c));
  EXPECT_TRUE(WaitUntil([&] { return EngineMetric(llama, "llamacpp:requests_processing") == 1; }));
  if (by_deadline) {
    // Frozen, so the answer cannot end before the deadline however fast the engine runs.
    llama.process->Signal(SIGSTOP);
  } else {
    ctx.TryCancel();
  }
  while (reader->Read(&c)) {
  }
  EXPECT_EQ(reader->Finish().error_code(),
            by_deadline ? grpc::StatusCode::DEADLINE_EXCEEDED : grpc::StatusCode::CANCELLED);
  if (by_deadline) llama.process->Signal(SIGCONT);
  EXPECT_TRUE(WaitUntil([&] { return EngineMetric(llama, "llamacpp:requests_processing") == 0; },
                        absl::Seconds(10)));
  EXPECT_EQ(WaitForMetric(worker.metrics_address, "tandem_worker_requests_total",
                          {{"finish_reason", by_deadline ? "deadline_exceeded" : "cancelled"}}, 1)
                .status(),
            absl::OkStatus());
}

TEST_F(UpstreamEngineTest, ACancelledCallClosesTheEngineStream) {
  ASSERT_NO_FATAL_FAILURE(EndALongAnswerEarly(/*by_deadline=*/false));
}

TEST_F(UpstreamEngineTest, ACallPastItsDeadlineEndsThereAndTheEngineStops) {
  ASSERT_NO_FATAL_FAILURE(EndALongAnswerEarly(/*by_deadline=*/true));
}

TEST_F(UpstreamEngineTest, HealthFollowsTheEngineThroughARestart) {
  Server llama = Must(StartLlamaServer("qwen"));
  Server worker =
      Must(StartWorker("qwen", UpstreamWorkerFlags(llama, {"--upstream_health_failures=2",
                                                           "--upstream_health_successes=2"})));
  ASSERT_TRUE(WaitForHealth(worker.grpc_address, "", /*serving=*/true).ok());
  const std::string port = llama.http_address.substr(llama.http_address.rfind(':') + 1);
  llama.process->Signal(SIGKILL);
  llama.process->Wait(absl::Seconds(10));
  // Dead after two failed checks: NOT_SERVING, and calls refused with UNAVAILABLE.
  ASSERT_TRUE(WaitForHealth(worker.grpc_address, "", /*serving=*/false).ok());
  auto stub = tandem::v1::Worker::NewStub(
      grpc::CreateChannel(worker.grpc_address, grpc::InsecureChannelCredentials()));
  {
    const grpc::Status s =
        WorkerGenerate(stub.get(), WorkerPrompt("hello"), std::chrono::seconds(10)).status;
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(s.error_message(), HasSubstr("health"));
  }
  // The engine comes back on its port: ready again.
  Server again = Must(StartLlamaServer("qwen", std::stoi(port)));
  EXPECT_TRUE(WaitForHealth(worker.grpc_address, "", /*serving=*/true).ok());
}

// `s` ended well, continued once on `worker`, with all `tokens` of its answer.
void ExpectWholeAfterOneFailover(const Streamed& s, const std::string& worker, int32_t tokens) {
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_EQ(s.last.recovery().failovers(), 1);
  EXPECT_EQ(s.last.recovery().final_worker(), worker);
  EXPECT_EQ(s.last.usage().completion_tokens(), tokens) << "the answer is whole";
}

// A long answer starts on `upstream`, the only usable replica (the gateway is started); at its
// first chunk its engine `llama` is frozen (SIGSTOP: then the answer cannot end first however
// fast the engine runs), and once `sim` is usable `then` runs. The answer must end well,
// continued once on `sim`, whole.
void UpstreamEngineTest::ExpectContinuedWhenFrozen(Server* llama, const Server& upstream,
                                                   const Server& sim,
                                                   const std::function<void()>& then) {
  ASSERT_TRUE(WaitUntil([&] { return Usable(upstream.grpc_address); }));
  ASSERT_FALSE(Usable(sim.grpc_address));
  const Streamed s = StreamWith(stub_.get(), NoThinking("Tell a long story.", 3000), [&](auto& c) {
    EXPECT_EQ(c.route().worker(), upstream.grpc_address);
    llama->process->Signal(SIGSTOP);
    EXPECT_TRUE(WaitUntil([&] { return Usable(sim.grpc_address); }));
    then();
  });
  ASSERT_NO_FATAL_FAILURE(ExpectWholeAfterOneFailover(s, sim.grpc_address, 3000));
  EXPECT_EQ(s.last.finish_reason(), tandem::v1::FINISH_REASON_LENGTH);
}

// The engine dies mid-answer: the gateway continues it on the other replica (the simulator,
// which turns ready only after the answer started, so the first attempt is the upstream one).
TEST_F(UpstreamEngineTest, AKilledEngineMidStreamIsContinuedOnAnotherWorker) {
  Server llama = Must(StartLlamaServer("qwen"));
  Server upstream = Must(StartWorker("qwen", UpstreamWorkerFlags(llama)));
  Server sim = Must(StartWorker("qwen", {"--synthetic_load_time=2s", "--synthetic_time_scale=0",
                                         "--synthetic_output_tokens=5000"}));
  StartGatewayFor({upstream.grpc_address, sim.grpc_address});
  ExpectContinuedWhenFrozen(&llama, upstream, sim, [&] { llama.process->Signal(SIGKILL); });
}

// The engine hangs mid-answer (stopped, never killed): the gateway's stall detection continues
// the answer on the other replica.
TEST_F(UpstreamEngineTest, AHungEngineMidStreamIsContinuedOnAnotherWorker) {
  Server llama = Must(StartLlamaServer("qwen"));
  Server upstream = Must(StartWorker("qwen", UpstreamWorkerFlags(llama)));
  ASSERT_TRUE(WaitForHealth(upstream.grpc_address, "", /*serving=*/true).ok());
  // Started once the engine is ready, and ready itself 4 s later: the first attempt is the
  // engine's. A stall is declared 8 s after the last token, by when this replica is ready.
  Server sim = Must(StartWorker("qwen", {"--synthetic_load_time=4s", "--synthetic_time_scale=0",
                                         "--synthetic_output_tokens=5000"}));
  StartGatewayFor({upstream.grpc_address, sim.grpc_address},
                  {"--stall_timeout_min=8s", "--stall_timeout_multiple=3"});
  ExpectContinuedWhenFrozen(&llama, upstream, sim, [] {});
  llama.process->Signal(SIGCONT);  // so that it stops cleanly with the test
}

// The other way: a native-protocol worker dies mid-answer and llama-server continues the partial
// answer (continue_final_message) through the upstream worker, which turns ready only then.
TEST_F(UpstreamEngineTest, AnAnswerCutOffElsewhereIsContinuedByTheEngine) {
  Server sim =
      Must(StartWorker("qwen", {"--synthetic_time_scale=20", "--synthetic_output_tokens=5000"}));
  // The engine is stopped from before its worker starts until the answer started elsewhere: the
  // worker is "starting" until then.
  Server llama = Must(StartLlamaServer("qwen"));
  llama.process->Signal(SIGSTOP);
  Server upstream = Must(StartWorker("qwen", UpstreamWorkerFlags(llama)));
  StartGatewayFor({sim.grpc_address, upstream.grpc_address});
  ASSERT_TRUE(WaitUntil([&] { return Usable(sim.grpc_address); }));
  ASSERT_FALSE(Usable(upstream.grpc_address));

  const Streamed s = StreamWith(stub_.get(), NoThinking("Tell a long story.", 200), [&](auto& c) {
    EXPECT_EQ(c.route().worker(), sim.grpc_address);
    llama.process->Signal(SIGCONT);
    EXPECT_TRUE(WaitUntil([&] { return Usable(upstream.grpc_address); }));
    sim.process->Signal(SIGKILL);
  });
  ExpectWholeAfterOneFailover(s, upstream.grpc_address, 200);
}

// A port free now, for a server that cannot report the one it bound (the worker must know its
// engine's URL before starting it).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

// The pids of the engines the worker started, from its log.
std::vector<pid_t> EnginePids(const Server& worker) {
  std::vector<pid_t> pids;
  const std::string log = worker.process->ReadLog();
  const std::string needle = "started the engine (pid ";
  for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) {
    pids.push_back(std::atoi(log.c_str() + at + needle.size()));
  }
  return pids;
}

// Tandem's own engine (the CPU engine on a random-weight checkpoint) and an upstream worker
// continue each other's answers, both ways; each answer is whole. A replica is kept out of the
// first attempt by being stopped (native) or by its engine not listening yet (upstream).
TEST_F(UpstreamEngineTest, NativeAndUpstreamWorkersContinueEachOthersAnswers) {
  constexpr int32_t kTokens = 300;
  Server llama = Must(StartLlamaServer("qwen"));
  Server upstream = Must(StartWorker("qwen", UpstreamWorkerFlags(llama)));
  // The second engine is stopped from before its worker starts until it is needed: the worker
  // never sees it ready (its port stays its own, nothing else can take it meanwhile).
  Server later = Must(StartLlamaServer("qwen"));
  later.process->Signal(SIGSTOP);
  Server upstream_later = Must(StartWorker("qwen", UpstreamWorkerFlags(later)));
  Server native = Must(
      StartWorker("qwen", {"--engine=native", "--checkpoint=" + NativeCheckpoint("qwen3_5_moe"),
                           "--memory_budget=268435456", "--native_threads=1"}));
  ASSERT_TRUE(WaitForHealth(native.grpc_address, "", /*serving=*/true).ok());
  ASSERT_TRUE(WaitForHealth(upstream.grpc_address, "", /*serving=*/true).ok());

  // Upstream -> native: the native worker is stopped until the engine's answer has begun.
  native.process->Signal(SIGSTOP);
  StartGatewayFor({upstream.grpc_address, native.grpc_address, upstream_later.grpc_address});
  ASSERT_TRUE(WaitUntil([&] { return Usable(upstream.grpc_address); }));
  Streamed s = StreamWith(stub_.get(), NoThinking("Tell a long story.", kTokens), [&](auto& c) {
    EXPECT_EQ(c.route().worker(), upstream.grpc_address);
    llama.process->Signal(SIGSTOP);  // its answer cannot end while the native one wakes
    native.process->Signal(SIGCONT);
    EXPECT_TRUE(WaitUntil([&] { return Usable(native.grpc_address); }));
    llama.process->Signal(SIGKILL);
  });
  ASSERT_NO_FATAL_FAILURE(ExpectWholeAfterOneFailover(s, native.grpc_address, kTokens));
  llama.process->Wait(absl::Seconds(10));
  ASSERT_TRUE(WaitUntil([&] { return !Usable(upstream.grpc_address); }));

  // Native -> upstream: the second engine resumes once the native answer began.
  s = StreamWith(stub_.get(), NoThinking("Tell a long story.", kTokens), [&](auto& c) {
    EXPECT_EQ(c.route().worker(), native.grpc_address);
    native.process->Signal(SIGSTOP);  // its answer cannot end while the engine wakes
    later.process->Signal(SIGCONT);
    EXPECT_TRUE(WaitUntil([&] { return Usable(upstream_later.grpc_address); }));
    native.process->Signal(SIGKILL);
  });
  ASSERT_NO_FATAL_FAILURE(ExpectWholeAfterOneFailover(s, upstream_later.grpc_address, kTokens));
}

TEST_F(UpstreamEngineTest, TheWorkerRunsTheEngineAsItsChildRestartsItAndStopsIt) {
  auto dir = LlamaServerDir();
  auto gguf = TinyGguf("qwen");
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string command = absl::StrCat(
      "/bin/sh -c 'echo engine sees CUDA_VISIBLE_DEVICES=[$CUDA_VISIBLE_DEVICES] >&2; exec \"$0\" "
      "\"$@\" 2>/dev/null' ",
      *dir, "/bin/llama-server -m ", *gguf, " --host 127.0.0.1 --port ", port,
      " -c 4096 -np 2 -t 1 --jinja --metrics --alias tiny-qwen");
  Server worker =
      Must(StartWorker("qwen", {"--engine=upstream", "--upstream_profile=llamacpp",
                                absl::StrCat("--upstream_url=http://127.0.0.1:", port),
                                "--upstream_command=" + command, "--upstream_health_interval=100ms",
                                "--upstream_stop_timeout=10s"}));
  ASSERT_TRUE(WaitForHealth(worker.grpc_address, "", /*serving=*/true).ok());
  EXPECT_THAT(worker.process->ReadLog(), HasSubstr("engine sees CUDA_VISIBLE_DEVICES=[]"))
      << "--device=cpu hides every GPU from the engine";
  std::vector<pid_t> pids = EnginePids(worker);
  ASSERT_EQ(pids.size(), 1u);

  // The engine dies: the worker starts it again and serves once it is ready.
  kill(pids[0], SIGKILL);
  ASSERT_TRUE(WaitUntil([&] { return EnginePids(worker).size() == 2; }));
  ASSERT_TRUE(WaitUntil([&] {
    return WorkerGenerate(worker.grpc_address, WorkerPrompt("hello", 2), std::chrono::seconds(10))
        .status.ok();
  }));

  // The worker stops: its engine stops with it.
  const pid_t second = EnginePids(worker)[1];
  worker.process->Signal(SIGTERM);
  EXPECT_EQ(worker.process->Wait(absl::Seconds(30)), 0);
  EXPECT_TRUE(WaitUntil([&] { return kill(second, 0) != 0; }));
}

// The gateway's policy reads llama-server's own queue (llamacpp:requests_deferred, exported by
// the worker as tandem_worker_num_requests_waiting) and spills to the other model while it is
// long, and back once it drains.
TEST_F(UpstreamEngineTest, APolicyReadingTheEnginesQueueSpillsToTheOtherModel) {
  Server llama = Must(StartLlamaServer("qwen", 0, {"-np", "1"}));  // one slot: the rest queue
  Server qwen = Must(StartWorker("qwen", UpstreamWorkerFlags(llama)));
  Server nemotron = Must(StartWorker("nemotron", {"--synthetic_time_scale=0"}));
  const std::string policy = WriteTempFile("spill.yaml", R"(schema: 1
version: test
models: {qwen: {}, nemotron: {}}
classes: [accuracy_critical]
default_class: accuracy_critical
signals:
  qwen_queue:
    scrape: {model: qwen, metric: tandem_worker_num_requests_waiting, aggregate: max}
triggers:
  qwen_busy: {signal: qwen_queue, enter: {gt: 1}, exit: {lt: 1}}
rules:
  - name: pinned
    when: {hint.model: {present: true}}
    action: {route_to_pinned: true}
  - name: spill
    when: {trigger.qwen_busy: on}
    action: {route: nemotron}
  - name: rest
    action: {route: qwen}
)");
  gateway_ = Must(StartGateway({"qwen=" + qwen.grpc_address, "nemotron=" + nemotron.grpc_address},
                               {"--policy=" + policy, "--scrape_interval=100ms"}));
  auto channel = grpc::CreateChannel(gateway_.grpc_address, grpc::InsecureChannelCredentials());
  stub_ = tandem::v1::Gateway::NewStub(channel);
  admin_ = tandem::v1::Admin::NewStub(channel);
  ASSERT_TRUE(
      WaitUntil([&] { return Usable(qwen.grpc_address) && Usable(nemotron.grpc_address); }));
  auto rule = [&] {
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(5));
    tandem::v1::RouteResponse r;
    grpc::Status s = stub_->Route(&ctx, Prompt("hello", 8), &r);
    return s.ok() ? r.route().rule() : "error: " + s.error_message();
  };
  EXPECT_EQ(rule(), "rest");

  // Three long answers pinned to qwen: one runs in llama-server's only slot, two wait there.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::thread> load;
  for (int i = 0; i < 3; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    grpc::ClientContext* ctx = contexts.back().get();
    load.emplace_back([this, ctx] {
      Deadline(ctx, std::chrono::seconds(60));
      GenerateRequest r = NoThinking("Go on and on.", 3500);
      r.mutable_hints()->set_model("qwen");
      auto reader = stub_->GenerateStream(ctx, r);
      tandem::v1::GenerateStreamChunk c;
      while (reader->Read(&c)) {
      }
      reader->Finish();
    });
  }
  EXPECT_TRUE(WaitUntil([&] { return rule() == "spill"; }));
  for (auto& ctx : contexts) ctx->TryCancel();
  for (std::thread& t : load) t.join();
  EXPECT_TRUE(WaitUntil([&] { return rule() == "rest"; }));
}

TEST_F(UpstreamEngineTest, AnEngineServingAnotherModelIsAStartUpErrorNamingBoth) {
  Server llama = Must(StartLlamaServer("qwen"));
  auto [code, output] =
      RunToExit(tandem::testing::WorkerBin(),
                {"--model=qwen", "--device=cpu", "--plaintext", "--listen=127.0.0.1:0",
                 "--metrics_listen=127.0.0.1:0", "--engine=upstream", "--upstream_profile=llamacpp",
                 "--upstream_url=http://" + llama.http_address, "--upstream_health_interval=100ms",
                 "--upstream_model=Qwen/Qwen3.5-35B-A3B"});
  EXPECT_NE(code, 0);
  EXPECT_THAT(output, HasSubstr("Qwen/Qwen3.5-35B-A3B"));
  EXPECT_THAT(output, HasSubstr("tiny-qwen"));
}

}  // namespace
}  // namespace tandem::testing
