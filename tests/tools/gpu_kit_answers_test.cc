// The GPU kit's answer comparison (tools/gpu_kit/answers.h): where a streamed answer may differ
// from the CPU engine's reference, and the JSON-lines files it reads.
#include <fstream>

#include "gtest/gtest.h"
#include "tests/support/temp_path.h"
#include "tools/gpu_kit/answers.h"

namespace tandem::tools {
namespace {

// Five tokens "a", "b", "c", "d", "e" with the given margins.
ReferenceAnswer Reference(std::vector<double> margins, bool stopped = false) {
  ReferenceAnswer r;
  r.id = "p";
  for (size_t i = 0; i < margins.size(); ++i) {
    r.tokens.push_back(static_cast<int32_t>(i));
    if (!(stopped && i + 1 == margins.size())) r.text += static_cast<char>('a' + i);
    r.text_ends.push_back(static_cast<int64_t>(r.text.size()));
  }
  r.margins = std::move(margins);
  r.stopped = stopped;
  return r;
}

TEST(GpuKitCompareTest, EqualAnswerIsExact) {
  const Comparison c = Compare(Reference({1, 1, 1, 1, 1}), "abcde", 5, 0.5);
  EXPECT_EQ(c.result, Comparison::kExact);
  EXPECT_EQ(c.tokens_agree, 5);
  EXPECT_EQ(c.clear_tokens, 5);
}

TEST(GpuKitCompareTest, DifferenceAtALowMarginTokenIsTolerated) {
  const Comparison c = Compare(Reference({1, 1, 0.1, 1, 1}), "abXYZ", 5, 0.5);
  EXPECT_EQ(c.result, Comparison::kLowMargin);
  EXPECT_EQ(c.tokens_agree, 2);
  EXPECT_DOUBLE_EQ(c.margin_at_divergence, 0.1);
  EXPECT_EQ(c.clear_tokens, 2);
}

TEST(GpuKitCompareTest, DifferenceWhereEveryTokenWasClearIsAMismatch) {
  const Comparison c = Compare(Reference({1, 1, 0.9, 0.1, 1}), "abX", 3, 0.5);
  EXPECT_EQ(c.result, Comparison::kMismatch);
  EXPECT_EQ(c.tokens_agree, 2);
  EXPECT_DOUBLE_EQ(c.margin_at_divergence, 0.9);
  EXPECT_EQ(c.clear_tokens, 3);
}

TEST(GpuKitCompareTest, FirstTokenDifferentIsAMismatchWhenClear) {
  EXPECT_EQ(Compare(Reference({0.6, 0.1}), "Xb", 2, 0.5).result, Comparison::kMismatch);
  EXPECT_EQ(Compare(Reference({0.4, 0.1}), "Xb", 2, 0.5).result, Comparison::kLowMargin);
}

TEST(GpuKitCompareTest, StopTokenIsNotCountedButItsMarginDecides) {
  // The reference stopped after "abcd"; the worker does not count the stop token.
  EXPECT_EQ(Compare(Reference({1, 1, 1, 1, 1}, true), "abcd", 4, 0.5).result, Comparison::kExact);
  // Going on past it differs at the stop token: clear here, so a mismatch.
  EXPECT_EQ(Compare(Reference({1, 1, 1, 1, 1}, true), "abcdXY", 6, 0.5).result,
            Comparison::kMismatch);
  EXPECT_EQ(Compare(Reference({1, 1, 1, 1, 0.2}, true), "abcdXY", 6, 0.5).result,
            Comparison::kLowMargin);
}

TEST(GpuKitCompareTest, ZeroMarginRequiresEqualAnswers) {
  EXPECT_EQ(Compare(Reference({0, 0, 0}), "abc", 3, 0).result, Comparison::kExact);
  EXPECT_EQ(Compare(Reference({0, 0, 0}), "abX", 3, 0).result, Comparison::kMismatch);
}

TEST(GpuKitAnswersTest, ReadsPromptsAndReferencesAndRejectsBadLines) {
  const std::string prompts = ::tandem::testing::TempPath("prompts.jsonl");
  std::ofstream(prompts) << R"({"id": "a", "messages": [{"role": "user", "content": "hi"}]})"
                         << "\n\n";
  auto p = ReadPrompts(prompts);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].messages[0].content(0).text(), "hi");

  const std::string reference = ::tandem::testing::TempPath("reference.jsonl");
  std::ofstream(reference) << ReferenceToJson(Reference({1, 0.5}, true)) << "\n";
  auto r = ReadReference(reference);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].text, "a");
  EXPECT_EQ((*r)[0].CompletionTokens(), 1);

  std::ofstream(reference) << R"({"id": "x", "text": "", "tokens": [1], "text_ends": [],)"
                           << R"( "margins": [1], "stopped": false})"
                           << "\n";
  EXPECT_FALSE(ReadReference(reference).ok());
  std::ofstream(prompts) << "not json\n";
  EXPECT_FALSE(ReadPrompts(prompts).ok());
}

}  // namespace
}  // namespace tandem::tools
