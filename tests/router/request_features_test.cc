#include "router/request_features.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tandem::router {
namespace {

TEST(EstimateTokensTest, AsciiAtFourBytesAndOnePerNonAsciiCodePoint) {
  EXPECT_EQ(EstimateTokens(""), 0);
  EXPECT_EQ(EstimateTokens("abcd"), 1);
  EXPECT_EQ(EstimateTokens("abcde"), 2);
  EXPECT_EQ(EstimateTokens("\xE6\x97\xA5\xE6\x9C\xAC"), 2);  // two CJK characters
}

// The estimate against Qwen3's real tokenizer (counts from tests/tokens/count_tokens.js, see
// scripts/measure_token_estimate.sh). Prints the error; fails if it grows past the bounds
// documented in docs/policies.md.
TEST(EstimateTokensTest, ErrorAgainstQwen3Tokenizer) {
  std::ifstream in(tandem::testing::SourcePath("/tests/tokens/qwen3_token_counts.jsonl"));
  ASSERT_TRUE(in) << "missing tests/tokens/qwen3_token_counts.jsonl";
  std::string line;
  double abs_rel = 0, signed_rel = 0, est_sum = 0, ref_sum = 0, worst = 0;
  int n = 0;
  while (std::getline(in, line)) {
    google::protobuf::Struct row;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &row).ok()) << line;
    const std::string text = row.fields().at("text").string_value();
    const double ref = row.fields().at("tokens").number_value();
    if (ref <= 0) continue;
    const double est = static_cast<double>(EstimateTokens(text));
    const double rel = (est - ref) / ref;
    abs_rel += std::fabs(rel);
    signed_rel += rel;
    worst = std::max(worst, std::fabs(rel));
    est_sum += est;
    ref_sum += ref;
    ++n;
  }
  ASSERT_GT(n, 1000);
  const double mape = abs_rel / n;
  std::printf(
      "token estimate vs Qwen3 tokenizer over %d texts: mean |error| %.1f%%, mean bias "
      "%+.1f%%, total %+.1f%%, worst %.0f%%\n",
      n, 100 * mape, 100 * signed_rel / n, 100 * (est_sum / ref_sum - 1), 100 * worst);
  EXPECT_LT(mape, 0.25);
  EXPECT_LT(std::fabs(est_sum / ref_sum - 1), 0.15);
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
  r.mutable_hints()->mutable_reasoning()->set_mode(tandem::v1::REASONING_MODE_OFF);
  r.mutable_sampling()->set_max_tokens(77);
  (*r.mutable_labels())["tenant"] = "acme";
  (*r.mutable_labels())["app"] = "chat";

  const RequestFeatures f = ExtractFeatures(r);
  EXPECT_EQ(f.num_messages, 4);
  EXPECT_EQ(f.num_turns, 2);
  EXPECT_EQ(f.image_count, 1);
  EXPECT_EQ(f.prompt_bytes, 16);
  // 4 messages of template overhead + "be brief" (2) + "12345678" (2) + an image of unknown
  // size (no image_tokens given).
  EXPECT_EQ(f.image_tokens, kUnknownImageTokens);
  EXPECT_EQ(f.prompt_tokens, 4 * kPerMessageTemplateTokens + 4 + kUnknownImageTokens);
  EXPECT_FALSE(f.prompt_tokens_exact);
  EXPECT_EQ(f.objective, Objective::kLatency);
  EXPECT_EQ(f.pinned_model, "nemotron");
  EXPECT_EQ(f.reasoning, ReasoningMode::kOff);
  EXPECT_EQ(f.max_tokens, 77);
  // The tenant comes from authentication (the gateway sets it), never from a label.
  EXPECT_EQ(f.tenant, "");
  EXPECT_EQ(f.labels.at("tenant"), "acme");
  EXPECT_EQ(f.app, "chat");
  EXPECT_EQ(DescribeFeatures(f).size(), 23u);
  EXPECT_EQ(f.deadline_ms, -1);
  EXPECT_EQ(f.system_prompt_bytes, 8);
  EXPECT_EQ(f.last_role, "user");
  EXPECT_EQ(f.tool_count, 0);
  EXPECT_EQ(f.agent_steps, 0);
}

// The request's shape: tools declared, the last message's role and the agent loop's steps since
// the user's last message (parallel calls in one assistant message are one step).
TEST(ExtractFeaturesTest, ReadsTheShapeOfAnAgentLoop) {
  tandem::v1::GenerateRequest r;
  r.add_tools()->set_name("search");
  r.add_tools()->set_name("fetch");
  auto add = [&r](const std::string& role, int calls) {
    auto* m = r.add_messages();
    m->set_role(role);
    if (calls == 0) m->add_content()->set_text("text");
    for (int i = 0; i < calls; ++i) m->add_tool_calls()->set_name("search");
  };
  add("user", 0);
  const RequestFeatures start = ExtractFeatures(r);
  EXPECT_EQ(start.tool_count, 2);
  EXPECT_EQ(start.last_role, "user");
  EXPECT_EQ(start.agent_steps, 0);

  add("assistant", 2);
  add("tool", 0);
  add("tool", 0);
  add("assistant", 1);
  add("tool", 0);
  const RequestFeatures step = ExtractFeatures(r);
  EXPECT_EQ(step.last_role, "tool");
  EXPECT_EQ(step.agent_steps, 2);
  EXPECT_EQ(step.num_turns, 1);

  // A new user message starts a new task; an answer without tool calls is not a step.
  add("assistant", 0);
  add("user", 0);
  const RequestFeatures next = ExtractFeatures(r);
  EXPECT_EQ(next.agent_steps, 0);
  EXPECT_EQ(next.last_role, "user");
  EXPECT_EQ(next.num_turns, 2);
  EXPECT_EQ(ExtractFeatures(tandem::v1::GenerateRequest()).last_role, "");
}

// The caller measures the images (the router reads none): each counts the tokens given for it,
// in message order, and one past the given counts the fixed estimate.
TEST(ExtractFeaturesTest, ImagesCountTheTokensTheCallerGives) {
  tandem::v1::GenerateRequest r;
  auto* first = r.add_messages();
  first->set_role("user");
  first->add_content()->mutable_image()->set_data("a");
  first->add_content()->set_text("abcd");
  auto* second = r.add_messages();
  second->set_role("user");
  second->add_content()->mutable_image()->set_data("b");
  second->add_content()->mutable_image()->set_data("c");
  const int64_t text = 2 * kPerMessageTemplateTokens + 1;

  const std::vector<int64_t> sizes = {68, 770};
  const RequestFeatures f = ExtractFeatures(r, sizes);
  EXPECT_EQ(f.image_count, 3);
  EXPECT_EQ(f.image_tokens, 68 + 770 + kUnknownImageTokens);
  EXPECT_EQ(f.prompt_tokens, text + f.image_tokens);
  EXPECT_EQ(f.prompt_bytes, 4);  // images are not prompt bytes
  const auto described = DescribeFeatures(f);
  EXPECT_NE(std::find(described.begin(), described.end(),
                      std::pair<std::string, std::string>{"image_tokens", "1864"}),
            described.end());

  const std::vector<int64_t> all = {10, 20, 30};
  EXPECT_EQ(ExtractFeatures(r, all).prompt_tokens, text + 60);
  EXPECT_EQ(ExtractFeatures(r).image_tokens, 3 * kUnknownImageTokens);
  // The fixed estimate is a 1024 x 1024 image's grid at the released settings plus the markers.
  EXPECT_EQ(kUnknownImageTokens, 1026);
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
