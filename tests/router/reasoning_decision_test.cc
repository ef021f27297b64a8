#include "router/reasoning_decision.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;

ReasoningAction Think(int32_t budget) {
  ReasoningAction a;
  a.set = true;
  a.on = true;
  a.budget_tokens = budget;
  return a;
}

TEST(ReasoningDecisionTest, TheCallersChoiceWinsOverTheRule) {
  RequestFeatures f;
  RouteDecision d;
  const ReasoningAction think = Think(4096);
  f.reasoning = ReasoningMode::kOff;
  DecideReasoning(f, &think, "math", {}, &d);
  EXPECT_EQ(d.reasoning, ReasoningMode::kOff);
  EXPECT_EQ(d.thinking_budget, 0);
  EXPECT_EQ(d.reasoning_source, "caller");
  // A budget alone is a choice too: the mode stays the model's default.
  f.reasoning = ReasoningMode::kDefault;
  f.thinking_budget = 100;
  DecideReasoning(f, &think, "math", {}, &d);
  EXPECT_EQ(d.reasoning, ReasoningMode::kDefault);
  EXPECT_EQ(d.thinking_budget, 100);
  EXPECT_EQ(d.reasoning_source, "caller");
}

TEST(ReasoningDecisionTest, TheRuleDecidesWhenTheCallerLeftItToTheDefault) {
  RequestFeatures f;
  RouteDecision d;
  const ReasoningAction think = Think(4096);
  DecideReasoning(f, &think, "math", {}, &d);
  EXPECT_EQ(d.reasoning, ReasoningMode::kOn);
  EXPECT_EQ(d.thinking_budget, 4096);
  EXPECT_EQ(d.reasoning_source, "rule 'math'");
  ReasoningAction off;
  off.set = true;
  off.on = false;
  DecideReasoning(f, &off, "chat", {}, &d);
  EXPECT_EQ(d.reasoning, ReasoningMode::kOff);
  EXPECT_EQ(d.thinking_budget, 0);
  DecideReasoning(f, nullptr, "builtin", {}, &d);
  EXPECT_EQ(d.reasoning, ReasoningMode::kDefault);
  EXPECT_EQ(d.reasoning_source, "model default");
}

TEST(ReasoningDecisionTest, TheBudgetShrinksMonotonicallyBetweenItsBoundsAndFailsOpen) {
  ReasoningAction a = Think(8000);
  a.shrink_signal = "queue";
  a.shrink_from = 2;
  a.shrink_to = 10;
  a.shrink_min_tokens = 1000;
  SignalSnapshot s;
  // No value: the full budget (a missing metric must not starve thinking).
  EXPECT_EQ(ShrunkBudget(a, s), 8000);
  int32_t last = 8000;
  for (double v = -5; v <= 20; v += 0.25) {
    s.values["queue"] = v;
    const int32_t b = ShrunkBudget(a, s);
    EXPECT_LE(b, last) << v;
    EXPECT_GE(b, 1000) << v;
    EXPECT_LE(b, 8000) << v;
    if (v <= 2) {
      EXPECT_EQ(b, 8000) << v;
    }
    if (v >= 10) {
      EXPECT_EQ(b, 1000) << v;
    }
    last = b;
  }
  s.values["queue"] = 6;
  RouteDecision d;
  DecideReasoning(RequestFeatures{}, &a, "math", s, &d);
  EXPECT_EQ(d.thinking_budget, 4500);
  EXPECT_THAT(d.reasoning_source, HasSubstr("budget 8000 shrunk to 4500 by signal.queue"));
}

TEST(ReasoningDecisionTest, ATenantsCapBoundsAnyThinkingButLeavesOffAlone) {
  RouteDecision d;
  d.reasoning = ReasoningMode::kOn;
  d.thinking_budget = 8000;
  CapThinking(1000, "batch", &d);
  EXPECT_EQ(d.thinking_budget, 1000);
  EXPECT_THAT(d.reasoning_source, HasSubstr("capped at 1000 by tenant 'batch'"));
  // The model's default thinks without a budget: the cap becomes one.
  d = RouteDecision{};
  CapThinking(1000, "batch", &d);
  EXPECT_EQ(d.thinking_budget, 1000);
  // A smaller budget stands; no cap changes nothing; off stays off.
  d.thinking_budget = 10;
  CapThinking(1000, "batch", &d);
  EXPECT_EQ(d.thinking_budget, 10);
  CapThinking(0, "batch", &d);
  EXPECT_EQ(d.thinking_budget, 10);
  d = RouteDecision{};
  d.reasoning = ReasoningMode::kOff;
  CapThinking(1000, "batch", &d);
  EXPECT_EQ(d.thinking_budget, 0);
  EXPECT_EQ(DescribeReasoning(d), "off by model default");
}

}  // namespace
}  // namespace tandem::router
