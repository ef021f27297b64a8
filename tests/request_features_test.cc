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
  EXPECT_EQ(DescribeFeatures(f).size(), 16u);
  EXPECT_EQ(f.deadline_ms, -1);
}

TEST(ContentCuesTest, FindsCodeMathReasoningAndStructuredOutput) {
  ContentCues c;
  ScanContentCues("Fix this:\n```python\ndef add(a, b): return a+b\n```", &c);
  EXPECT_GE(c.code, 2);
  EXPECT_EQ(c.math, 0);
  ContentCues m;
  ScanContentCues("Solve the equation 3 * 4 = x and explain WHY, step by step.", &m);
  EXPECT_GE(m.math, 3);  // solve, equation, 3 * 4
  EXPECT_EQ(m.reasoning, 2);
  EXPECT_EQ(m.code, 0);
  ContentCues j;
  ScanContentCues("Extract the names and respond only with JSON matching this schema", &j);
  EXPECT_EQ(j.structured_output, 3);
  ContentCues none;
  ScanContentCues("hey, how are you doing today?", &none);
  EXPECT_EQ(none.code + none.math + none.reasoning + none.structured_output, 0);
}

TEST(ContentCuesTest, ScansABoundedPrefix) {
  ContentCues c;
  ScanContentCues(std::string(kMaxCueScanBytes, 'a') + "```", &c);
  EXPECT_EQ(c.code, 0);
}

}  // namespace
}  // namespace tandem::router
