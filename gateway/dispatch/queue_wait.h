#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/dispatch/call_alarm.h"
#include "gateway/dispatch/fair_queue.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"

namespace tandem::gateway {

// One call's place in its model's FairQueue: the slot it holds, or its wait for one, bounded by
// --max_queue_wait, with the queue gauges and wait histogram kept while it waits.
class QueueWait {
 public:
  // The call that waits. Its grant and its timeout each hold a reference on it.
  class Owner {
   public:
    virtual void Ref() = 0;
    virtual void Unref() = 0;
    // The slot is the call's now; runs on the thread that freed it (a call that finished, or a
    // health probe that added capacity), never nested inside another grant.
    virtual void OnSlotGranted() = 0;
    // The wait passed its bound; the call has left the queue.
    virtual void OnQueueTimeout() = 0;

   protected:
    ~Owner() = default;
  };

  // What a wait counts in; a null gauge is not counted.
  struct Meters {
    prometheus::Gauge* tenant_queued = nullptr;
    prometheus::Gauge* model_queued = nullptr;
    prometheus::Histogram* wait = nullptr;
  };

  QueueWait(Owner* owner, TimerQueue* timers) : owner_(owner), alarm_(timers) {}

  // Asks `queue` for a slot for `tenant` at `priority`. kRun: the slot is held now. kQueued: the
  // call waits; OnSlotGranted, or OnQueueTimeout after `max_wait`, follows unless it Leaves
  // first. kFull: neither (the tenant has as many waiting as it may).
  FairQueue::Result Join(FairQueue* queue, const std::string& tenant, int priority,
                         absl::Duration max_wait, Meters meters) ABSL_LOCKS_EXCLUDED(mu_);
  // Leaves the queue: true when the call was waiting there (and now is not).
  bool Leave() ABSL_LOCKS_EXCLUDED(mu_);
  // Gives the slot, if this call holds one, to the next waiter, whose dispatch runs on this
  // thread.
  void ReleaseSlot() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Granted() ABSL_LOCKS_EXCLUDED(mu_);
  void OnAlarm(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  bool LeaveQueue() ABSL_LOCKS_EXCLUDED(mu_);
  void WaitEnded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Owner* const owner_;
  // Held by Join while it queues, so that a slot freed on another thread right after Acquire
  // cannot grant (or a cancel take) this call before its timer and gauges exist.
  absl::Mutex mu_;
  FairQueue* queue_ ABSL_GUARDED_BY(mu_) = nullptr;
  FairQueue::Waiter waiter_;
  std::atomic<bool> slot_held_{false};  // set on the thread that granted it
  std::chrono::steady_clock::time_point queued_at_ ABSL_GUARDED_BY(mu_);
  Meters meters_ ABSL_GUARDED_BY(mu_);
  CallAlarm alarm_;  // --max_queue_wait
};

}  // namespace tandem::gateway
