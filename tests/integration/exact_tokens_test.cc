// Exact prompt counts near a threshold, end to end: a gateway with --tokenizer routes a prompt
// whose estimate is on the wrong side of a policy's prompt_tokens threshold by its real size.
#include <grpcpp/grpcpp.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/streams.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kSizesPolicy[] = R"(schema: 1
version: sizes-1
models: {qwen: {}, nemotron: {}}
classes: [any]
default_class: any
rules:
  - name: long
    when: {prompt_tokens: {gt: 1000}}
    action: {route: nemotron}
  - name: rest
    action: {route: qwen}
)";

tandem::v1::RouteResponse RouteOf(const Server& gateway, const std::string& text) {
  auto stub = tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(gateway.grpc_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(10));
  tandem::v1::RouteResponse out;
  const grpc::Status s = stub->Route(&ctx, Prompt(text, 2), &out);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return out;
}

TEST(ExactTokensTest, APromptNearAThresholdIsRoutedByItsRealSize) {
  auto qwen = StartWorker("qwen", {"--synthetic_time_scale=0"});
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  auto nemotron = StartWorker("nemotron", {"--synthetic_time_scale=0"});
  ASSERT_TRUE(nemotron.ok()) << nemotron.status();
  const std::string policy = WriteTempFile("sizes.yaml", kSizesPolicy);
  const std::vector<std::string> workers = {"qwen=" + qwen->grpc_address,
                                            "nemotron=" + nemotron->grpc_address};
  auto estimating = StartGateway(workers, {"--policy=" + policy});
  ASSERT_TRUE(estimating.ok()) << estimating.status();
  auto counting = StartGateway(
      workers,
      {"--policy=" + policy,
       "--tokenizer=" + tandem::testing::SourcePath("/tests/tokenizer/qwen3/tokenizer.json")});
  ASSERT_TRUE(counting.ok()) << counting.status();

  // Whitespace runs: estimated at ~1200 tokens, far fewer in fact.
  std::string spaced;
  for (int i = 0; i < 300; ++i) spaced += "x               ";
  tandem::v1::RouteResponse r = RouteOf(*estimating, spaced);
  EXPECT_EQ(r.route().rule(), "long");
  EXPECT_EQ(r.route().prompt_tokens_source(), "estimate");
  r = RouteOf(*counting, spaced);
  EXPECT_EQ(r.route().rule(), "rest");
  EXPECT_EQ(r.route().prompt_tokens_source(), "tokenizer");
  EXPECT_LT(r.route().prompt_tokens(), 1000);
  EXPECT_THAT(r.features().at("prompt_tokens"), HasSubstr("(tokenizer)"));
  EXPECT_THAT(r.ShortDebugString(), HasSubstr("(tokenizer) gt 1000: no"));

  // Far from every threshold, the estimate stands (no tokenizing on the common path).
  r = RouteOf(*counting, "hello there");
  EXPECT_EQ(r.route().prompt_tokens_source(), "estimate");
  EXPECT_EQ(r.route().rule(), "rest");

  // Served requests are counted by source.
  auto stub = tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(counting->grpc_address, grpc::InsecureChannelCredentials()));
  for (const std::string& text : {spaced, std::string("hello there")}) {
    tandem::v1::GenerateResponse resp;
    ASSERT_TRUE(UnaryGenerate(stub.get(), Prompt(text, 2), &resp).ok());
    EXPECT_EQ(resp.route().model(), "qwen");
  }
  auto text = HttpGet(counting->metrics_address, "/metrics");
  ASSERT_TRUE(text.ok());
  for (const char* source : {"tokenizer", "estimate"}) {
    EXPECT_EQ(MetricValue(*text, "tandem_gateway_prompt_token_counts_total", {{"source", source}})
                  .value_or(-1),
              1)
        << source;
  }
}

}  // namespace
}  // namespace tandem::testing
