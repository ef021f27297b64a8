#include "router/builtin_router.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;

TEST(BuiltinRouterTest, RulesApplyInOrderFirstMatchWins) {
  BuiltinRouter router({});
  RequestFeatures f;
  auto d = router.Route(f);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->model, "qwen");
  EXPECT_EQ(d->rule, "default");
  ASSERT_EQ(d->trace.size(), 6u);
  EXPECT_TRUE(d->trace.back().matched);

  f.objective = Objective::kLatency;
  EXPECT_EQ(router.Route(f)->model, "nemotron");
  EXPECT_EQ(router.Route(f)->request_class, "latency_critical");

  f.prompt_tokens = 40000;  // long context beats the objective
  EXPECT_EQ(router.Route(f)->rule, "long_context");
  EXPECT_EQ(router.Route(f)->request_class, "long_context");

  f.image_count = 1;  // images beat long context: only qwen sees them
  EXPECT_EQ(router.Route(f)->rule, "vision");
  EXPECT_EQ(router.Route(f)->model, "qwen");

  f.pinned_model = "nemotron";  // a pin beats everything
  auto pinned = router.Route(f);
  EXPECT_EQ(pinned->rule, "pin");
  EXPECT_EQ(pinned->model, "nemotron");
  EXPECT_EQ(pinned->trace.size(), 1u);
}

TEST(BuiltinRouterTest, ThresholdIsExclusiveAndExplained) {
  BuiltinRouterConfig c;
  c.long_context_tokens = 100;
  BuiltinRouter router(c);
  RequestFeatures f;
  f.prompt_tokens = 100;
  auto d = router.Route(f);
  EXPECT_EQ(d->rule, "default");
  EXPECT_THAT(d->trace[2].detail, HasSubstr("~100 tokens is within the threshold 100"));
  f.prompt_tokens = 101;
  EXPECT_EQ(router.Route(f)->rule, "long_context");
}

TEST(BuiltinRouterTest, UnknownPinIsInvalidArgument) {
  BuiltinRouter router({});
  RequestFeatures f;
  f.pinned_model = "llama";
  auto d = router.Route(f);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("hints.model: unknown model 'llama'"));
}

TEST(BuiltinRouterTest, AccuracyObjectiveGoesToTheAccuracyModel) {
  BuiltinRouterConfig c;
  c.default_model = "nemotron";
  BuiltinRouter router(c);
  RequestFeatures f;
  EXPECT_EQ(router.Route(f)->model, "nemotron");
  f.objective = Objective::kAccuracy;
  EXPECT_EQ(router.Route(f)->model, "qwen");
  EXPECT_EQ(router.Route(f)->request_class, "accuracy_critical");
}

}  // namespace
}  // namespace tandem::router
