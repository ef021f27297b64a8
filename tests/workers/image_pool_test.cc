#include "workers/image_pool.h"

#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace tandem::workers {
namespace {

// Threads plus queue jobs are held; one more is refused at once, without running; what was
// held all runs, and the gauges follow.
TEST(ImagePoolTest, AFullPoolRefusesAtOnceAndRunsWhatItHeld) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, WorkerMetrics::Labels{"qwen", "id", "native", "cpu", "cpu"});
  auto pool = std::make_unique<ImagePool>(ImagePool::Options{.threads = 2, .queue = 3}, &metrics);
  EXPECT_EQ(metrics.image_pool_threads.Value(), 2);
  EXPECT_EQ(metrics.image_pool_queue_capacity.Value(), 3);
  absl::Notification release;
  absl::Mutex mu;
  int started = 0;
  int ran = 0;
  absl::CondVar changed;
  auto job = [&] {
    {
      absl::MutexLock l(&mu);
      ++started;
      changed.SignalAll();
    }
    release.WaitForNotification();
    absl::MutexLock l(&mu);
    ++ran;
  };
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool->Submit(job).ok()) << i;
  {
    // Both threads busy, so three wait.
    absl::MutexLock l(&mu);
    while (started < 2) changed.Wait(&mu);
  }
  EXPECT_EQ(metrics.image_pool_busy.Value(), 2);
  EXPECT_EQ(metrics.image_pool_queued.Value(), 3);
  bool refused_ran = false;
  const absl::Status refused = pool->Submit([&] { refused_ran = true; });
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  release.Notify();
  pool.reset();  // runs what is queued, then joins
  EXPECT_EQ(ran, 5);
  EXPECT_FALSE(refused_ran);
  EXPECT_EQ(metrics.image_pool_busy.Value(), 0);
  EXPECT_EQ(metrics.image_pool_queued.Value(), 0);
}

TEST(ImagePoolTest, AQueueOfZeroHoldsOneJobAThread) {
  ImagePool pool(ImagePool::Options{.threads = 1, .queue = 0}, nullptr);
  absl::Notification release, started;
  ASSERT_TRUE(pool.Submit([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
  EXPECT_EQ(pool.Submit([] {}).code(), absl::StatusCode::kResourceExhausted);
  release.Notify();
}

}  // namespace
}  // namespace tandem::workers
