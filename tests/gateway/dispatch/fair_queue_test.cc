#include "gateway/dispatch/fair_queue.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

// Grants in order, recording which tenant each went to.
class FairQueueTest : public ::testing::Test {
 protected:
  void Enqueue(FairQueue& q, const std::string& tenant, int priority, int n) {
    for (int i = 0; i < n; ++i) {
      auto w = std::make_unique<FairQueue::Waiter>();
      w->tenant = tenant;
      w->grant = [this, tenant] { granted_.push_back(tenant); };
      ASSERT_EQ(q.Acquire(w.get(), priority), FairQueue::Result::kQueued);
      waiters_.push_back(std::move(w));
    }
  }
  std::vector<std::string> granted_;
  std::vector<std::unique_ptr<FairQueue::Waiter>> waiters_;
};

TEST_F(FairQueueTest, RunsAtOnceUnderTheLimitAndQueuesAboveIt) {
  FairQueue q({/*max_inflight=*/2, /*max_queued_per_tenant=*/2});
  FairQueue::Waiter a{nullptr, "a"}, b{nullptr, "a"}, c{nullptr, "a"};
  EXPECT_EQ(q.Acquire(&a, 1), FairQueue::Result::kRun);
  EXPECT_EQ(q.Acquire(&b, 1), FairQueue::Result::kRun);
  Enqueue(q, "a", 1, 2);
  EXPECT_EQ(q.Acquire(&c, 1), FairQueue::Result::kFull);
  EXPECT_EQ(q.queued(), 2);
  // A cancelled waiter is never granted.
  EXPECT_TRUE(q.Cancel(waiters_[0].get()));
  EXPECT_FALSE(q.Cancel(waiters_[0].get()));
  q.Release();
  EXPECT_EQ(granted_.size(), 1u);
  EXPECT_EQ(q.inflight(), 2);
  q.Release();
  q.Release();
  EXPECT_EQ(q.inflight(), 0);
  EXPECT_EQ(q.queued(), 0);
  // No limit: nothing ever waits.
  FairQueue unlimited({0, 0});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(unlimited.Acquire(&a, 1), FairQueue::Result::kRun);
}

TEST_F(FairQueueTest, ALateTenantIsNotStuckBehindAFloodersBacklog) {
  FairQueue q({1, 1000});
  FairQueue::Waiter running{nullptr, "flood"};
  ASSERT_EQ(q.Acquire(&running, 1), FairQueue::Result::kRun);
  Enqueue(q, "flood", 1, 50);
  for (int i = 0; i < 5; ++i) q.Release();  // five of the flood's run
  Enqueue(q, "late", 1, 3);
  for (int i = 0; i < 6; ++i) q.Release();
  // From the moment it arrived, the late tenant alternates with the flooder.
  const std::vector<std::string> after(granted_.begin() + 5, granted_.begin() + 11);
  EXPECT_EQ(std::count(after.begin(), after.end(), "late"), 3) << ::testing::PrintToString(after);
}

TEST_F(FairQueueTest, CapacityFollowsTheWorkersAndMoreRoomGrantsWaiters) {
  FairQueue q({1024, 1000});
  q.SetCapacity(2);  // the model's workers take two at once
  FairQueue::Waiter a{nullptr, "flood"}, b{nullptr, "flood"};
  ASSERT_EQ(q.Acquire(&a, 1), FairQueue::Result::kRun);
  ASSERT_EQ(q.Acquire(&b, 1), FairQueue::Result::kRun);
  Enqueue(q, "flood", 1, 10);
  Enqueue(q, "late", 1, 1);
  EXPECT_TRUE(granted_.empty());
  // A worker joins: its room goes to the waiters at once, the late tenant among the first.
  q.SetCapacity(4);
  ASSERT_EQ(granted_.size(), 2u);
  EXPECT_EQ(std::count(granted_.begin(), granted_.end(), "late"), 1)
      << ::testing::PrintToString(granted_);
  EXPECT_EQ(q.inflight(), 4);
  // A worker leaves: nothing is taken back, but no slot is given until inflight is below it.
  q.SetCapacity(1);
  for (int i = 0; i < 3; ++i) q.Release();
  EXPECT_EQ(granted_.size(), 2u);
  q.Release();
  EXPECT_EQ(granted_.size(), 3u);
  EXPECT_EQ(q.capacity(), 1);
}

TEST_F(FairQueueTest, PriorityIsAShareOfTheSlots) {
  FairQueue q({1, 1000});
  FairQueue::Waiter running{nullptr, "x"};
  ASSERT_EQ(q.Acquire(&running, 1), FairQueue::Result::kRun);
  Enqueue(q, "gold", 3, 100);
  Enqueue(q, "bronze", 1, 100);
  for (int i = 0; i < 40; ++i) q.Release();
  const int gold = static_cast<int>(std::count(granted_.begin(), granted_.end(), "gold"));
  EXPECT_EQ(gold, 30) << ::testing::PrintToString(granted_);
  // Neither starves.
  EXPECT_EQ(40 - gold, 10);
}

}  // namespace
}  // namespace tandem::gateway
