#include "gateway/dispatch/timer_queue.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

using Clock = TimerQueue::Clock;
using std::chrono::hours;
using std::chrono::milliseconds;

TEST(TimerQueueTest, ADeadlineThatPassedRunsAtOnce) {
  TimerQueue timers;
  absl::Notification ran;
  timers.Schedule(Clock::now() - milliseconds(1), [&] { ran.Notify(); });
  ran.WaitForNotification();
}

TEST(TimerQueueTest, CallbacksRunInDeadlineOrderThenInTheOrderScheduled) {
  TimerQueue timers;
  absl::Mutex mu;
  std::vector<int> order;
  absl::Notification gate, done;
  const auto now = Clock::now();
  // The first callback holds the thread until every other one is scheduled, so the order below
  // is the queue's, not the order of the Schedule calls racing the thread.
  timers.Schedule(now, [&] { gate.WaitForNotification(); });
  auto record = [&](int i) {
    return [&, i] {
      absl::MutexLock l(&mu);
      order.push_back(i);
    };
  };
  timers.Schedule(now + milliseconds(2), record(3));
  timers.Schedule(now + milliseconds(1), record(1));
  timers.Schedule(now + milliseconds(1), record(2));
  timers.Schedule(now + milliseconds(2), [&] { done.Notify(); });
  gate.Notify();
  done.WaitForNotification();
  absl::MutexLock l(&mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(TimerQueueTest, ACancelledTimerNeverRunsAndSaysItWasPending) {
  TimerQueue timers;
  std::atomic<bool> ran{false};
  TimerQueue::Handle far = timers.Schedule(Clock::now() + hours(1), [&] { ran = true; });
  EXPECT_TRUE(timers.Cancel(far));
  EXPECT_FALSE(timers.Cancel(far));  // once
  EXPECT_FALSE(timers.Cancel(TimerQueue::Handle{}));
  // A later timer still runs: cancelling did not stop the queue.
  absl::Notification next;
  timers.Schedule(Clock::now(), [&] { next.Notify(); });
  next.WaitForNotification();
  EXPECT_FALSE(ran);
}

TEST(TimerQueueTest, ATimerThatRanCannotBeCancelled) {
  TimerQueue timers;
  absl::Notification ran;
  TimerQueue::Handle h = timers.Schedule(Clock::now(), [&] { ran.Notify(); });
  ran.WaitForNotification();
  EXPECT_FALSE(timers.Cancel(h));
}

TEST(TimerQueueTest, ACallbackMayScheduleAndCancelTimers) {
  TimerQueue timers;
  absl::Notification second;
  std::atomic<bool> cancelled_ran{false};
  timers.Schedule(Clock::now(), [&] {
    TimerQueue::Handle h = timers.Schedule(Clock::now() + hours(1), [&] { cancelled_ran = true; });
    EXPECT_TRUE(timers.Cancel(h));
    timers.Schedule(Clock::now(), [&] { second.Notify(); });
  });
  second.WaitForNotification();
  EXPECT_FALSE(cancelled_ran);
}

// The thread is woken only for a deadline before the wake it planned: a timer scheduled into an
// empty queue while the thread still sleeps towards a cancelled, later deadline must still fire
// on time, and one scheduled behind a nearer deadline must fire too.
TEST(TimerQueueTest, AnEarlierDeadlineWakesTheThreadAfterALaterOneWasCancelled) {
  TimerQueue q;
  const auto far = TimerQueue::Clock::now() + std::chrono::hours(1);
  const TimerQueue::Handle later = q.Schedule(far, [] {});
  EXPECT_TRUE(q.Cancel(later));
  absl::Notification near_ran;
  q.Schedule(TimerQueue::Clock::now() + std::chrono::milliseconds(5),
             [&near_ran] { near_ran.Notify(); });
  absl::Notification behind_ran;
  q.Schedule(TimerQueue::Clock::now() + std::chrono::milliseconds(10),
             [&behind_ran] { behind_ran.Notify(); });
  // Minutes would mean the thread slept towards the hour; seconds of slack for a loaded machine.
  EXPECT_TRUE(near_ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(behind_ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST(TimerQueueTest, PendingCallbacksAreDroppedWhenTheQueueGoes) {
  auto owned = std::make_shared<int>(7);
  std::weak_ptr<int> watch = owned;
  {
    TimerQueue timers;
    timers.Schedule(Clock::now() + hours(1), [owned = std::move(owned)] {});
  }
  EXPECT_TRUE(watch.expired());  // the callback (and what it held) was destroyed, not run
}

}  // namespace
}  // namespace tandem::gateway
