#include "gateway/prompt_token_counter.h"

#include <string>

#include "gtest/gtest.h"
#include "router/request_features.h"
#include "tests/support/requests.h"

namespace tandem::gateway {
namespace {

constexpr char kTokenizer[] = TANDEM_SOURCE_DIR "/tests/tokenizer/qwen3/tokenizer.json";

TEST(PromptTokenCounterTest, NearIsABandAroundEachPositiveThreshold) {
  auto counter = PromptTokenCounter::Load(kTokenizer, 0.5);
  ASSERT_TRUE(counter.ok()) << counter.status();
  EXPECT_TRUE((*counter)->Near(1000, {1000}));
  EXPECT_TRUE((*counter)->Near(500, {1000}));
  EXPECT_TRUE((*counter)->Near(1500, {1000}));
  EXPECT_FALSE((*counter)->Near(499, {1000}));
  EXPECT_FALSE((*counter)->Near(1501, {1000}));
  EXPECT_TRUE((*counter)->Near(40, {1000, 50}));
  // No limit (0) and thresholds below zero (a burst smaller than max_tokens) are not thresholds.
  EXPECT_FALSE((*counter)->Near(0, {0, -5}));
  EXPECT_FALSE((*counter)->Near(10, {}));
}

TEST(PromptTokenCounterTest, CountsTheTextAsTheTokenizerDoesPlusTheTemplate) {
  auto counter = PromptTokenCounter::Load(kTokenizer, 0.5);
  ASSERT_TRUE(counter.ok()) << counter.status();
  // Whitespace runs: the estimate (4 bytes a token) is far above the real count.
  std::string text;
  for (int i = 0; i < 300; ++i) text += "x               ";
  const tandem::v1::GenerateRequest r = testing::Prompt(text);
  const int64_t exact = (*counter)->Count(r);
  const int64_t estimate = router::EstimateTokens(text) + router::kPerMessageTemplateTokens;
  EXPECT_GT(exact, router::kPerMessageTemplateTokens);
  EXPECT_LT(exact * 3 / 2, estimate);
  // Counting is additive over messages, template included.
  tandem::v1::GenerateRequest twice = r;
  *twice.add_messages() = r.messages(0);
  EXPECT_EQ((*counter)->Count(twice), 2 * exact);
}

TEST(PromptTokenCounterTest, AMissingTokenizerIsAnError) {
  EXPECT_FALSE(PromptTokenCounter::Load("/nonexistent/tokenizer.json", 0.5).ok());
}

}  // namespace
}  // namespace tandem::gateway
