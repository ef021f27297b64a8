#include "gateway/intake/reload_loop.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

// What the loop's thread did, in order; the test waits (bounded) for a count of entries.
class Recorder {
 public:
  void Add(const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    log_.push_back(what);
    cv_.notify_all();
  }
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(30), [&] { return log_.size() >= n; });
  }
  std::vector<std::string> log() {
    std::lock_guard<std::mutex> l(mu_);
    return log_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> log_;
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
