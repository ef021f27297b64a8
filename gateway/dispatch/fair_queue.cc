#include "gateway/dispatch/fair_queue.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace tandem::gateway {

FairQueue::Result FairQueue::Acquire(Waiter* waiter, int priority) {
  absl::MutexLock l(&mu_);
  if (capacity_ <= 0 || (inflight_ < capacity_ && queued_ == 0)) {
    ++inflight_;
    return Result::kRun;
  }
  auto it = queues_.find(waiter->tenant);
  if (it == queues_.end()) {
    // Joins at the virtual time of the last grant: no credit for having been idle, and no
    // penalty either.
    it = queues_.emplace(waiter->tenant, TenantQueue{}).first;
    it->second.vtime = last_vtime_;
  }
  TenantQueue& q = it->second;
  if (static_cast<int>(q.waiting.size()) >= options_.max_queued_per_tenant) {
    if (q.waiting.empty()) queues_.erase(it);
    return Result::kFull;
  }
  q.priority = std::max(1, priority);
  q.waiting.push_back(waiter);
  ++queued_;
  return Result::kQueued;
}

bool FairQueue::Cancel(Waiter* waiter) {
  absl::MutexLock l(&mu_);
  auto it = queues_.find(waiter->tenant);
  if (it == queues_.end()) return false;
  auto& w = it->second.waiting;
  auto pos = std::find(w.begin(), w.end(), waiter);
  if (pos == w.end()) return false;
  w.erase(pos);
  --queued_;
  if (w.empty()) queues_.erase(it);
  return true;
}

FairQueue::Waiter* FairQueue::PopNextLocked() {
  if (queued_ == 0 || (capacity_ > 0 && inflight_ >= capacity_)) return nullptr;
  auto best = queues_.end();
  for (auto it = queues_.begin(); it != queues_.end(); ++it) {
    if (best == queues_.end() || it->second.vtime < best->second.vtime) best = it;
  }
  TenantQueue& q = best->second;
  Waiter* next = q.waiting.front();
  q.waiting.pop_front();
  --queued_;
  ++inflight_;
  last_vtime_ = q.vtime;
  q.vtime += 1.0 / q.priority;
  if (q.waiting.empty()) queues_.erase(best);
  return next;
}

void FairQueue::Release() {
  Waiter* next = nullptr;
  {
    absl::MutexLock l(&mu_);
    --inflight_;
    next = PopNextLocked();
  }
  if (next != nullptr) next->grant();
}

void FairQueue::SetCapacity(int capacity) {
  std::vector<Waiter*> granted;
  {
    absl::MutexLock l(&mu_);
    capacity_ = std::max(1, capacity);
    while (Waiter* next = PopNextLocked()) granted.push_back(next);
  }
  for (Waiter* w : granted) w->grant();
}

int FairQueue::capacity() const {
  absl::MutexLock l(&mu_);
  return capacity_;
}

int FairQueue::inflight() const {
  absl::MutexLock l(&mu_);
  return inflight_;
}

int FairQueue::queued() const {
  absl::MutexLock l(&mu_);
  return queued_;
}

}  // namespace tandem::gateway
