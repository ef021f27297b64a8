#include "gateway/dispatch/queue_wait.h"

#include <functional>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace tandem::gateway {
namespace {

// Runs `fn` now, unless this thread is already inside a call of this function: then `fn` runs
// when the outermost one returns. A dispatch grant runs on the thread that freed the slot; one
// whose dispatch fails at once frees its slot in turn, and would otherwise grant the next waiter
// from inside itself, down the whole queue.
void RunUnnested(std::function<void()> fn) {
  thread_local std::vector<std::function<void()>>* pending = nullptr;
  if (pending != nullptr) {
    pending->push_back(std::move(fn));
    return;
  }
  std::vector<std::function<void()>> queue;
  pending = &queue;
  fn();
  for (size_t i = 0; i < queue.size(); ++i) std::function<void()>(std::move(queue[i]))();
  pending = nullptr;
}

}  // namespace

FairQueue::Result QueueWait::Join(FairQueue* queue, const std::string& tenant, int priority,
                                  absl::Duration max_wait, Meters meters) {
  waiter_.tenant = tenant;
  // Dispatched right on the granting thread, with no hop to another (the dispatch only starts
  // a call; nothing in it blocks or waits for a pool change).
  waiter_.grant = [this] {
    owner_->Ref();
    RunUnnested([this] {
      Granted();
      owner_->Unref();
    });
  };
  absl::MutexLock l(&mu_);
  queue_ = queue;
  const FairQueue::Result result = queue->Acquire(&waiter_, priority);
  if (result == FairQueue::Result::kRun) slot_held_.store(true);
  if (result != FairQueue::Result::kQueued) return result;
  queued_at_ = std::chrono::steady_clock::now();
  meters_ = meters;
  if (meters_.tenant_queued != nullptr) meters_.tenant_queued->Increment();
  if (meters_.model_queued != nullptr) meters_.model_queued->Increment();
  owner_->Ref();
  if (!alarm_.Arm(absl::ToChronoNanoseconds(max_wait), [this](bool ok) {
        OnAlarm(ok);
        owner_->Unref();
      })) {
    owner_->Unref();
  }
  return result;
}

bool QueueWait::Leave() {
  if (!LeaveQueue()) return false;
  alarm_.Cancel();  // drops its reference now, not at --max_queue_wait
  return true;
}

bool QueueWait::LeaveQueue() {
  // Also waits for Join to finish setting up the wait.
  absl::MutexLock l(&mu_);
  if (queue_ == nullptr || !queue_->Cancel(&waiter_)) return false;
  WaitEnded();
  return true;
}

void QueueWait::WaitEnded() {
  if (meters_.wait != nullptr) {
    meters_.wait->Observe(Seconds(std::chrono::steady_clock::now() - queued_at_));
  }
  if (meters_.tenant_queued != nullptr) meters_.tenant_queued->Decrement();
  if (meters_.model_queued != nullptr) meters_.model_queued->Decrement();
}

void QueueWait::Granted() {
  {
    absl::MutexLock l(&mu_);  // Join has finished setting up the wait
    WaitEnded();
  }
  slot_held_.store(true);
  alarm_.Cancel();  // its callback runs with ok=false and drops its reference
  owner_->OnSlotGranted();
}

void QueueWait::OnAlarm(bool ok) {
  if (ok && LeaveQueue()) owner_->OnQueueTimeout();
}

void QueueWait::ReleaseSlot() {
  if (!slot_held_.exchange(false)) return;
  FairQueue* queue = nullptr;
  {
    absl::MutexLock l(&mu_);
    queue = queue_;
  }
  queue->Release();
}

}  // namespace tandem::gateway
