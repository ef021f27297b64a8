#include "gateway/timer_queue.h"

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
  auto it = pending_.emplace(Key{deadline, handle.sequence}, std::move(callback)).first;
  // Only a new earliest deadline changes how long the thread sleeps.
  if (it == pending_.begin()) changed_.Signal();
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
    if (pending_.empty()) {
      changed_.Wait(&mu_);
      continue;
    }
    const Clock::duration wait = pending_.begin()->first.first - Clock::now();
    if (wait > Clock::duration::zero()) {
      changed_.WaitWithTimeout(&mu_, absl::FromChrono(wait));
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
