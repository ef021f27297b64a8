#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::gateway {

// The gateway's timers (a call's queue wait, hedge delay and stall watch): one thread that runs
// each callback at its deadline. It replaces a
// grpc::Alarm per timer, which allocates, takes gRPC's global timer lock and, when cancelled,
// still hops to a gRPC thread to run its callback; nearly every call cancels its timers, so
// here a cancel that finds its timer pending just removes it, on the caller's thread.
//
// Callbacks run one at a time on the queue's thread, without any lock of the queue held, and
// must be short and never block: a slow one delays every timer behind it.
class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Callback = std::function<void()>;
  // A scheduled callback; default-constructed, it names none.
  struct Handle {
    Clock::time_point deadline;
    uint64_t sequence = 0;
  };

  TimerQueue();
  // Stops the thread; callbacks still pending never run.
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // Runs `callback` on the queue's thread at `deadline` (at once when it has passed); callbacks
  // with the same deadline run in the order they were scheduled.
  Handle Schedule(Clock::time_point deadline, Callback callback) ABSL_LOCKS_EXCLUDED(mu_);
  // True when the callback was pending and now never runs; false when it has run, is running
  // now, or `handle` names none.
  bool Cancel(const Handle& handle) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = std::pair<Clock::time_point, uint64_t>;

  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  absl::CondVar changed_;  // a deadline before wake_at_, or stopping
  // When the thread wakes next at the latest (max: not until signalled). Schedule signals only a
  // deadline before it: with one call at a time, each call's stall watch is alone in the queue,
  // and waking the thread for each one cost two context switches per request.
  Clock::time_point wake_at_ ABSL_GUARDED_BY(mu_) = Clock::time_point::max();
  std::map<Key, Callback> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace tandem::gateway
