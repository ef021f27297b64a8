#include "router/request_features.h"

#include "gtest/gtest.h"

namespace tandem::router {
namespace {

TEST(EstimateTokensTest, AsciiAtFourBytesAndOnePerNonAsciiCodePoint) {
  EXPECT_EQ(EstimateTokens(""), 0);
  EXPECT_EQ(EstimateTokens("abcd"), 1);
  EXPECT_EQ(EstimateTokens("abcde"), 2);
  EXPECT_EQ(EstimateTokens("\xE6\x97\xA5\xE6\x9C\xAC"), 2);  // two CJK characters
}

TEST(ExtractFeaturesTest, ReadsEveryField) {
  tandem::v1::GenerateRequest r;
  auto* sys = r.add_messages();
  sys->set_role("system");
  sys->add_content()->set_text("be brief");
  auto* user = r.add_messages();
  user->set_role("user");
  user->add_content()->set_text("12345678");
  user->add_content()->mutable_image()->set_data("x");
  r.add_messages()->set_role("assistant");
  r.add_messages()->set_role("user");
  r.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);
  r.mutable_hints()->set_model("nemotron");
  r.mutable_hints()->mutable_reasoning()->set_mode(tandem::v1::REASONING_OFF);
  r.mutable_sampling()->set_max_tokens(77);
  (*r.mutable_labels())["tenant"] = "acme";
  (*r.mutable_labels())["app"] = "chat";

  const RequestFeatures f = ExtractFeatures(r);
  EXPECT_EQ(f.num_messages, 4);
  EXPECT_EQ(f.num_turns, 2);
  EXPECT_EQ(f.image_count, 1);
  EXPECT_EQ(f.prompt_bytes, 16);
  // 4 messages of template overhead + "be brief" (2) + "12345678" (2).
  EXPECT_EQ(f.prompt_tokens, 4 * kPerMessageTemplateTokens + 4);
  EXPECT_FALSE(f.prompt_tokens_exact);
  EXPECT_EQ(f.objective, Objective::kLatency);
  EXPECT_EQ(f.pinned_model, "nemotron");
  EXPECT_EQ(f.reasoning, ReasoningMode::kOff);
  EXPECT_EQ(f.max_tokens, 77);
  EXPECT_EQ(f.tenant, "acme");
  EXPECT_EQ(f.app, "chat");
  EXPECT_EQ(DescribeFeatures(f).size(), 11u);
}

}  // namespace
}  // namespace tandem::router
