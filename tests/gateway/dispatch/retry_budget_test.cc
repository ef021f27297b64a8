#include "gateway/dispatch/retry_budget.h"

#include <chrono>

#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RetryBudgetTest, RetriesAreARateOverTheWindow) {
  RetryBudget budget(0.2, 3, seconds(10));
  const auto t0 = RetryBudget::Clock::time_point() + seconds(1000);
  // Quiet: the floor of 3 in any window.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(budget.TryRetry(t0)) << i;
  EXPECT_FALSE(budget.TryRetry(t0));
  // 100 requests start: 20% of them may be retried in the window, the 3 already spent included.
  for (int i = 0; i < 100; ++i) budget.RequestStarted(t0 + milliseconds(10 * i));
  int granted = 0;
  while (budget.TryRetry(t0 + seconds(2))) ++granted;
  EXPECT_EQ(granted, 17);
  // Retries hold nothing: the requests ending does not give any back...
  for (int i = 0; i < 100; ++i) budget.RequestEnded();
  EXPECT_FALSE(budget.TryRetry(t0 + seconds(5)));
  // ...the window moving on does: the requests and retries of t0 have left it.
  EXPECT_TRUE(budget.TryRetry(t0 + seconds(12)));
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(budget.TryRetry(t0 + seconds(12)));
  EXPECT_FALSE(budget.TryRetry(t0 + seconds(12)));
}

TEST(RetryBudgetTest, AStaleRingIsNotCounted) {
  RetryBudget budget(0.5, 0, seconds(10));
  const auto t0 = RetryBudget::Clock::time_point() + seconds(1000);
  for (int i = 0; i < 10; ++i) budget.RequestStarted(t0);
  EXPECT_TRUE(budget.TryRetry(t0));
  // Exactly a whole ring later the same slot comes round again: its old counts are reset, and the
  // other slots are from an older round, so nothing is left to retry against.
  EXPECT_FALSE(budget.TryRetry(t0 + seconds(10)));
  budget.RequestStarted(t0 + seconds(10));
  budget.RequestStarted(t0 + seconds(10));
  EXPECT_TRUE(budget.TryRetry(t0 + seconds(10)));
  EXPECT_FALSE(budget.TryRetry(t0 + seconds(10)));
}

TEST(RetryBudgetTest, HedgesAreBoundedByConcurrency) {
  RetryBudget budget(0.2, 1, seconds(10));
  const auto t0 = RetryBudget::Clock::time_point() + seconds(1000);
  EXPECT_TRUE(budget.TryHedge());  // the floor
  EXPECT_FALSE(budget.TryHedge());
  for (int i = 0; i < 20; ++i) budget.RequestStarted(t0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(budget.TryHedge()) << i;  // 20% of 20 active
  EXPECT_FALSE(budget.TryHedge());
  budget.ReleaseHedge();
  EXPECT_TRUE(budget.TryHedge());
  // Hedges and retries are separate budgets.
  EXPECT_TRUE(budget.TryRetry(t0));
}

}  // namespace
}  // namespace tandem::gateway
