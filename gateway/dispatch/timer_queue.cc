#include "gateway/dispatch/timer_queue.h"

#include "absl/time/time.h"

namespace tandem::gateway {

TimerQueue::TimerQueue() : thread_([this] { Run(); }) {}

TimerQueue::~TimerQueue() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    changed_.Signal();
  }
  thread_.join();
}

TimerQueue::Handle TimerQueue::Schedule(Clock::time_point deadline, Callback callback) {
  absl::MutexLock l(&mu_);
  const Handle handle{deadline, next_sequence_++};
  pending_.emplace(Key{deadline, handle.sequence}, std::move(callback));
  if (deadline < wake_at_) {
    wake_at_ = deadline;
    changed_.Signal();
  }
  return handle;
}

bool TimerQueue::Cancel(const Handle& handle) {
  if (handle.sequence == 0) return false;
  absl::MutexLock l(&mu_);
  return pending_.erase(Key{handle.deadline, handle.sequence}) > 0;
}

void TimerQueue::Run() {
  mu_.Lock();
  while (!stopping_) {
    const Clock::time_point now = Clock::now();
    if (pending_.empty() || pending_.begin()->first.first > now) {
      // Sleep until the earliest deadline; with none, keep the wake already planned while it is
      // ahead (a timer set meanwhile that is no earlier needs no signal), else until signalled.
      if (!pending_.empty()) {
        wake_at_ = pending_.begin()->first.first;
      } else if (wake_at_ <= now) {
        wake_at_ = Clock::time_point::max();
      }
      if (wake_at_ == Clock::time_point::max()) {
        changed_.Wait(&mu_);
      } else {
        changed_.WaitWithTimeout(&mu_, absl::FromChrono(wake_at_ - now));
      }
      continue;
    }
    Callback callback = std::move(pending_.begin()->second);
    pending_.erase(pending_.begin());
    mu_.Unlock();
    callback();
    callback = nullptr;  // what it holds is released here, outside the lock
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace tandem::gateway
