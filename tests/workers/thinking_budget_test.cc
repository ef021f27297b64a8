#include "workers/thinking_budget.h"

#include <vector>

#include "gtest/gtest.h"
#include "workers/simulator/synthetic_tokenizer.h"

namespace tandem::workers {
namespace {

// "<think>" = 2 and "</think>" = 12, as in cpu_engine_test.cc.
ThinkingMarkers Markers() {
  ThinkingMarkers m;
  m.start = 2;
  m.end = {12};
  return m;
}

// The tokens emitted for `sampled`, one Next per step.
std::vector<int32_t> Emit(ThinkingBudget& b, const std::vector<int32_t>& sampled) {
  std::vector<int32_t> out;
  for (const int32_t t : sampled) out.push_back(b.Next(t));
  return out;
}

TEST(ThinkingBudgetTest, ForcesTheEndOnceTheBudgetIsSpentThenLetsTheAnswerThrough) {
  ThinkingBudget b(Markers(), /*budget=*/3, /*prompt=*/{1, 2});
  EXPECT_TRUE(b.thinking());
  EXPECT_EQ(Emit(b, {3, 4, 5, 6, 7, 8}), (std::vector<int32_t>{3, 4, 5, 12, 7, 8}));
  EXPECT_FALSE(b.thinking());
}

TEST(ThinkingBudgetTest, WithoutABudgetTheModelThinksAsLongAsItLikes) {
  ThinkingBudget b(Markers(), /*budget=*/0, /*prompt=*/{1, 2});
  const std::vector<int32_t> sampled = {3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(Emit(b, sampled), sampled);
  EXPECT_TRUE(b.thinking());
  EXPECT_EQ(b.thinking_tokens(), 8);
  EXPECT_EQ(b.Next(12), 12);  // it closes the block itself
  EXPECT_FALSE(b.thinking());
}

TEST(ThinkingBudgetTest, APromptThatClosedItsBlockStartsOutsideAndPromptTokensNeverCount) {
  // The prompt closed its block (reasoning off renders an empty one): nothing is forced.
  ThinkingBudget closed(Markers(), /*budget=*/1, /*prompt=*/{2, 12, 5});
  EXPECT_FALSE(closed.thinking());
  EXPECT_EQ(Emit(closed, {3, 4, 5}), (std::vector<int32_t>{3, 4, 5}));
  // An open block with thinking already in the prompt: only generated tokens count.
  ThinkingBudget open(Markers(), /*budget=*/2, /*prompt=*/{2, 7, 7, 7, 7});
  EXPECT_EQ(open.thinking_tokens(), 0);
  EXPECT_EQ(Emit(open, {3, 4, 5}), (std::vector<int32_t>{3, 4, 12}));
}

TEST(ThinkingBudgetTest, ABlockTheModelOpensLaterGetsAFreshBudget) {
  ThinkingBudget b(Markers(), /*budget=*/2, /*prompt=*/{1});
  EXPECT_FALSE(b.thinking());
  EXPECT_EQ(Emit(b, {5, 2, 3, 4, 5, 6}), (std::vector<int32_t>{5, 2, 3, 4, 12, 6}));
  // Closed by the model before the budget: the next block counts from zero again.
  EXPECT_EQ(Emit(b, {2, 3, 12, 2, 3, 4, 5}), (std::vector<int32_t>{2, 3, 12, 2, 3, 4, 12}));
}

TEST(ThinkingBudgetTest, AMultiTokenEndIsForcedWholeAndRecognisedWhenTheModelWritesIt) {
  ThinkingMarkers m;
  m.start = 2;
  m.end = {10, 11, 12};
  ThinkingBudget b(m, /*budget=*/2, /*prompt=*/{2});
  // Budget spent after 3, 4: the whole end sequence follows, whatever was sampled.
  EXPECT_EQ(Emit(b, {3, 4, 5, 12, 10, 7}), (std::vector<int32_t>{3, 4, 10, 11, 12, 7}));
  EXPECT_FALSE(b.thinking());
  // Written by the model itself, split over steps: the block ends after its last token.
  ThinkingBudget free(m, /*budget=*/0, /*prompt=*/{2});
  EXPECT_EQ(Emit(free, {3, 10, 11}), (std::vector<int32_t>{3, 10, 11}));
  EXPECT_TRUE(free.thinking());
  EXPECT_EQ(free.Next(12), 12);
  EXPECT_FALSE(free.thinking());
}

TEST(ThinkingBudgetTest, AVocabularyWithoutMarkersNeverForcesAnything) {
  // The synthetic tokenizer has no "<think>" / "</think>" special tokens.
  const ThinkingMarkers none = ThinkingMarkers::Of(SyntheticTokenizer(0));
  EXPECT_EQ(none.start, -1);
  EXPECT_TRUE(none.end.empty());
  ThinkingBudget b(none, /*budget=*/1, /*prompt=*/{2});
  EXPECT_EQ(Emit(b, {3, 4, 5}), (std::vector<int32_t>{3, 4, 5}));
  ThinkingBudget inert;
  EXPECT_EQ(inert.Next(9), 9);
  EXPECT_FALSE(inert.thinking());
}

}  // namespace
}  // namespace tandem::workers
