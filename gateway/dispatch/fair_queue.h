#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::gateway {

// Dispatch slots of one model: at most `capacity` requests go to its workers at once; the rest
// wait in one FIFO per tenant and are let through by weighted fair queueing, so a tenant that
// floods the gateway waits behind its own requests, not in front of everyone else's.
//
// Scheduling is stride scheduling: each tenant has a virtual time that advances by
// 1/priority per request it is given; a freed slot goes to the waiting tenant with the smallest
// virtual time. A tenant that starts waiting starts at the virtual time of the last grant, so
// idle periods bank no credit.
//
// Thread-safe; callbacks run outside the lock, on the thread that released the slot.
class FairQueue {
 public:
  struct Options {
    // Requests dispatched at once, until SetCapacity; 0 means no limit (nothing ever waits).
    int max_inflight = 0;
    // Requests waiting per tenant; beyond it Acquire answers kFull.
    int max_queued_per_tenant = 0;
  };
  explicit FairQueue(Options options) : options_(options), capacity_(options.max_inflight) {}

  // A waiting request. `grant` runs once when it gets its slot (unless cancelled first).
  struct Waiter {
    std::function<void()> grant;
    std::string tenant;
  };

  enum class Result { kRun, kQueued, kFull };
  // kRun: a slot is taken now (grant is not called). kQueued: `waiter` waits and must stay
  // alive until granted or cancelled. kFull: the tenant's queue is full.
  Result Acquire(Waiter* waiter, int priority) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a waiting request; false when it was already granted (or never queued).
  bool Cancel(Waiter* waiter) ABSL_LOCKS_EXCLUDED(mu_);
  // A dispatched request ended: its slot goes to the next waiter, if any.
  void Release() ABSL_LOCKS_EXCLUDED(mu_);
  // Changes how many requests may be dispatched at once (>= 1); more room grants waiters now.
  // The gateway sets it to what the model's usable workers can run.
  void SetCapacity(int capacity) ABSL_LOCKS_EXCLUDED(mu_);
  int capacity() const ABSL_LOCKS_EXCLUDED(mu_);

  int inflight() const ABSL_LOCKS_EXCLUDED(mu_);
  int queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct TenantQueue {
    std::deque<Waiter*> waiting;
    double vtime = 0;
    int priority = 1;
  };

  // The waiter to grant next, taken off its queue; null when none may be granted.
  Waiter* PopNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  int capacity_ ABSL_GUARDED_BY(mu_);
  int inflight_ ABSL_GUARDED_BY(mu_) = 0;
  int queued_ ABSL_GUARDED_BY(mu_) = 0;
  // Only tenants with waiters.
  std::map<std::string, TenantQueue> queues_ ABSL_GUARDED_BY(mu_);
  double last_vtime_ ABSL_GUARDED_BY(mu_) = 0;  // of the last grant
};

}  // namespace tandem::gateway
