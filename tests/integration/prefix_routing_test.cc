// Prefix caching end to end: two real qwen workers (the native CPU engine on the random-weight
// checkpoint, small cache blocks) behind a gateway that picks workers by prefix. A conversation
// stays on the worker that holds its history, and each later turn resumes from that worker's
// cache and says so in its usage (gRPC and the OpenAI front). Partitions by tenant:
// prefix_cache_test (engine) and worker_pools_test (gateway index).
#include <grpcpp/grpcpp.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tests/support/golden_files.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/streams.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

class PrefixRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      auto w = StartWorker(
          "qwen", {"--engine=native", "--checkpoint=" + NativeCheckpoint("qwen3_5_moe"),
                   "--memory_budget=268435456", "--native_threads=1", "--prefix_block_tokens=16"});
      ASSERT_TRUE(w.ok()) << w.status();
      entries_.push_back("qwen=" + w->grpc_address);
      workers_.push_back(std::move(*w));
    }
    // The default policy routes to both models; every request here pins qwen.
    auto nemotron = StartWorker("nemotron", {"--synthetic_time_scale=0"});
    ASSERT_TRUE(nemotron.ok()) << nemotron.status();
    entries_.push_back("nemotron=" + nemotron->grpc_address);
    workers_.push_back(std::move(*nemotron));
  }

  // The gateway in front of them, with `args` (how qwen's workers are picked) and the rest.
  void StartGatewayWith(std::vector<std::string> args) {
    for (const char* a :
         {"--prefix_pick_min_tokens=1", "--expose_worker_addresses", "--http_listen=127.0.0.1:0"}) {
      args.push_back(a);
    }
    auto g = StartServingGateway(entries_, args);
    ASSERT_TRUE(g.ok()) << g.status();
    gateway_ = std::move(*g);
    stub_ = tandem::v1::Gateway::NewStub(
        grpc::CreateChannel(gateway_.grpc_address, grpc::InsecureChannelCredentials()));
  }

  // A policy file whose qwen workers are picked by prefix, with `rules` (YAML list items).
  static std::string PrefixPolicy(const std::string& name, const std::string& rules) {
    return WriteTempFile(name + ".yaml", absl::StrCat("schema: 1\nversion: ", name, R"(
models:
  qwen: {worker_pick: prefix}
  nemotron: {}
classes: [any]
default_class: any
rules:
)",
                                                      rules));
  }

  std::vector<Server> workers_;
  std::vector<std::string> entries_;
  Server gateway_;
  std::unique_ptr<tandem::v1::Gateway::Stub> stub_;
};

tandem::v1::ChatMessage* Add(tandem::v1::GenerateRequest* r, const std::string& role,
                             const std::string& text) {
  auto* m = r->add_messages();
  m->set_role(role);
  m->add_content()->set_text(text);
  return m;
}

// By the gateway's flag, per model.
TEST_F(PrefixRoutingTest, AConversationStaysWithItsCacheAndResumesFromIt) {
  ASSERT_NO_FATAL_FAILURE(StartGatewayWith({"--endpoint_pick=least_outstanding,qwen=prefix"}));
  tandem::v1::GenerateRequest req;
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_max_tokens(12);
  req.mutable_hints()->set_model("qwen");
  Add(&req, "system",
      "You are the support assistant of a shipping company. Answer in one short paragraph, "
      "name the tracking page when a parcel is late, and never promise a delivery date.");
  Add(&req, "user", "Where is my parcel? It left the depot on Monday.");
  std::string worker;
  for (int turn = 0; turn < 4; ++turn) {
    tandem::v1::GenerateResponse resp;
    const grpc::Status status = UnaryGenerate(stub_.get(), req, &resp, std::chrono::seconds(60));
    ASSERT_TRUE(status.ok()) << turn << ": " << status.error_message();
    if (turn == 0) {
      worker = resp.route().worker();
      EXPECT_EQ(resp.usage().cached_prompt_tokens(), 0);
    } else {
      EXPECT_EQ(resp.route().worker(), worker) << "turn " << turn;
      EXPECT_THAT(resp.route().reason(), HasSubstr("worker by prefix")) << turn;
      // The turn before, prompt and answer, came from the cache: whole blocks of it.
      EXPECT_GT(resp.usage().cached_prompt_tokens(), 16) << turn;
      EXPECT_EQ(resp.usage().cached_prompt_tokens() % 16, 0) << turn;
      EXPECT_LT(resp.usage().cached_prompt_tokens(), resp.usage().prompt_tokens()) << turn;
    }
    Add(&req, "assistant", resp.text());
    Add(&req, "user", absl::StrCat("And what if it is still not here by day ", turn + 2, "?"));
  }
  const std::string held = worker == workers_[0].grpc_address ? workers_[0].metrics_address
                                                              : workers_[1].metrics_address;
  const std::string other = worker == workers_[0].grpc_address ? workers_[1].metrics_address
                                                               : workers_[0].metrics_address;
  EXPECT_GE(ScrapeMetric(held, "tandem_worker_prefix_cache_hits_total"), 3);
  EXPECT_GT(ScrapeMetric(held, "tandem_worker_prefix_cache_tokens_saved_total"), 48);
  EXPECT_GT(ScrapeMetric(held, "tandem_worker_prefix_cache_bytes"), 0);
  EXPECT_EQ(ScrapeMetric(other, "tandem_worker_prefix_cache_hits_total"), 0);
  EXPECT_GE(ScrapeMetric(gateway_.metrics_address, "tandem_gateway_endpoint_picks_total",
                         {{"model_name", "qwen"}, {"rule", "prefix"}}),
            3);
  EXPECT_GT(ScrapeMetric(gateway_.metrics_address, "tandem_gateway_cached_prompt_tokens_total",
                         {{"model_name", "qwen"}}),
            48);
}

// By the policy (models.qwen.worker_pick), over the gateway's least_outstanding.
TEST_F(PrefixRoutingTest, TheOpenAiFrontReportsCachedTokens) {
  const std::string policy =
      PrefixPolicy("prefix-test", "  - {name: all, action: {route: qwen}}\n");
  ASSERT_NO_FATAL_FAILURE(
      StartGatewayWith({"--endpoint_pick=least_outstanding", "--policy=" + policy}));
  const std::string body = R"({"model":"qwen","max_tokens":4,"temperature":0,"messages":[
    {"role":"system","content":"You are a careful assistant for a library catalogue. Answer with the shelf mark first, then one sentence about the book, and nothing else."},
    {"role":"user","content":"Where do I find books on the history of bridges?"}]})";
  std::vector<int> cached;
  for (int i = 0; i < 2; ++i) {
    auto answer = HttpPost(gateway_.http_address, "/v1/chat/completions", body);
    ASSERT_TRUE(answer.ok()) << answer.status();
    ASSERT_EQ(answer->status, 200) << answer->body;
    const auto json = nlohmann::json::parse(answer->body);
    cached.push_back(json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>());
  }
  EXPECT_EQ(cached[0], 0);
  EXPECT_GT(cached[1], 0) << "the repeated prompt resumes from its last block boundary";
  EXPECT_EQ(ScrapeMetric(gateway_.metrics_address, "tandem_gateway_endpoint_picks_total",
                         {{"model_name", "qwen"}, {"rule", "prefix"}}),
            1)
      << "the second request, by the policy's rule";
}

// prefix_hit_tokens.MODEL in a policy: a conversation whose history a qwen worker holds stays on
// qwen when a later turn would otherwise go to nemotron; a new conversation of the same kind
// does not.
TEST_F(PrefixRoutingTest, APolicyKeepsAConversationOnTheModelThatHoldsItsPrefix) {
  const std::string policy = PrefixPolicy("prefix-hit-test", R"(  - name: cached_on_qwen
    when: {prefix_hit_tokens.qwen: {ge: 32}}
    action: {route: qwen}
  - name: accurate
    when: {objective: accuracy}
    action: {route: qwen}
  - {name: rest, action: {route: nemotron}}
)");
  ASSERT_NO_FATAL_FAILURE(
      StartGatewayWith({"--endpoint_pick=least_outstanding", "--policy=" + policy}));
  auto turn = [&](tandem::v1::GenerateRequest& req, tandem::v1::Objective objective) {
    req.mutable_hints()->set_objective(objective);
    tandem::v1::GenerateResponse resp;
    const grpc::Status status = UnaryGenerate(stub_.get(), req, &resp, std::chrono::seconds(60));
    EXPECT_TRUE(status.ok()) << status.error_message();
    return resp;
  };
  const std::string system =
      "You plan trips by train across Europe. List the connections with their times, then the "
      "total travel time, and mention seat reservations where a train needs one.";
  tandem::v1::GenerateRequest chat;
  chat.mutable_sampling()->set_max_tokens(4);
  Add(&chat, "system", system);
  Add(&chat, "user", "How do I get from Vienna to Brussels in one day?");
  const auto first = turn(chat, tandem::v1::OBJECTIVE_ACCURACY);
  EXPECT_EQ(first.route().model(), "qwen");
  EXPECT_EQ(first.route().rule(), "accurate");
  Add(&chat, "assistant", first.text());
  Add(&chat, "user", "Thanks. Is there a later option?");
  const auto second = turn(chat, tandem::v1::OBJECTIVE_LATENCY);
  EXPECT_EQ(second.route().model(), "qwen");
  EXPECT_EQ(second.route().rule(), "cached_on_qwen");
  EXPECT_THAT(second.route().reason(), HasSubstr("prefix_hit_tokens.qwen"));
  tandem::v1::GenerateRequest other;
  other.mutable_sampling()->set_max_tokens(4);
  Add(&other, "system", "You answer questions about opening hours of public libraries.");
  Add(&other, "user", "Is the central library open on Sunday?");
  const auto fresh = turn(other, tandem::v1::OBJECTIVE_LATENCY);
  EXPECT_EQ(fresh.route().model(), "nemotron");
  EXPECT_EQ(fresh.route().rule(), "rest");
}

}  // namespace
}  // namespace tandem::testing
