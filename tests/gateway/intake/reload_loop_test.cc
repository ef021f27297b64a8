#include "gateway/intake/reload_loop.h"

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/steady_wait.h"
#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

// What the loop's thread did, in order; the test waits (bounded) for a count of entries.
class Recorder {
 public:
  void Add(const std::string& what) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    log_.push_back(what);
    cv_.SignalAll();
  }
  bool WaitFor(size_t n) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (log_.size() < n && WaitUntil(cv_, mu_, deadline)) {
    }
    return log_.size() >= n;
  }
  std::vector<std::string> log() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return log_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
};

TEST(ReloadLoopTest, PollsAndRunsQueuedReloadsInOrder) {
  std::atomic<int> polls{0};
  Recorder poll_seen;
  Recorder results;
  ReloadLoop loop(
      [&] {
        if (++polls == 3) poll_seen.Add("3 polls");
      },
      [&](const std::string& trigger) {
        return trigger == "bad" ? absl::InvalidArgumentError("bad file") : absl::OkStatus();
      });
  loop.Start(absl::Milliseconds(1));
  loop.Start(absl::Milliseconds(1));  // a second start is ignored, not a second thread
  ASSERT_TRUE(poll_seen.WaitFor(1));
  for (const char* trigger : {"SIGHUP", "bad", "admin"}) {
    loop.Enqueue(trigger, [&, t = std::string(trigger)](absl::Status s) {
      results.Add(t + ":" + (s.ok() ? "ok" : std::string(s.message())));
    });
  }
  loop.Enqueue("no one waits", nullptr);  // an empty `done` is allowed
  ASSERT_TRUE(results.WaitFor(3));
  EXPECT_EQ(results.log(), (std::vector<std::string>{"SIGHUP:ok", "bad:bad file", "admin:ok"}));
  loop.Stop();
  // After Stop nothing runs: an enqueue is answered at once, on the caller's thread.
  absl::Status late = absl::OkStatus();
  loop.Enqueue("late", [&](absl::Status s) { late = s; });
  EXPECT_EQ(late.code(), absl::StatusCode::kUnavailable);
  loop.Stop();  // idempotent
}

TEST(ReloadLoopTest, StopWithoutStartAnswersWhatWasQueued) {
  ReloadLoop loop([] {}, [](const std::string&) { return absl::OkStatus(); });
  absl::Status queued = absl::OkStatus();
  loop.Enqueue("SIGHUP", [&](absl::Status s) { queued = s; });
  loop.Stop();
  EXPECT_EQ(queued.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queued.message(), "the gateway is shutting down");
}

}  // namespace
}  // namespace tandem::gateway
