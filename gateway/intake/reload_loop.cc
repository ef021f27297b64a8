#include "gateway/intake/reload_loop.h"

#include <chrono>

#include "common/steady_wait.h"

namespace tandem::gateway {

void ReloadLoop::Start(absl::Duration interval) {
  absl::MutexLock l(&mu_);
  if (started_ || stop_) return;
  started_ = true;
  thread_ = std::thread([this, interval] { Loop(interval); });
}

void ReloadLoop::Enqueue(std::string trigger, std::function<void(absl::Status)> done) {
  {
    absl::MutexLock l(&mu_);
    if (!stop_) {
      queue_.push_back({std::move(trigger), std::move(done)});
      cv_.Signal();
      return;
    }
  }
  if (done) done(absl::UnavailableError("the gateway is shutting down"));
}

void ReloadLoop::Loop(absl::Duration interval) {
  const auto period = absl::ToChronoMilliseconds(interval);
  absl::MutexLock l(&mu_);
  while (!stop_) {
    const auto deadline = std::chrono::steady_clock::now() + period;
    while (!stop_ && queue_.empty() && WaitUntil(cv_, mu_, deadline)) {
    }
    if (!stop_ && queue_.empty()) {  // the period passed with nothing queued
      mu_.Unlock();
      poll_();
      mu_.Lock();
      continue;
    }
    while (!queue_.empty() && !stop_) {
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      mu_.Unlock();
      absl::Status s = reload_(p.trigger);
      if (p.done) p.done(s);
      mu_.Lock();
    }
  }
}

void ReloadLoop::Stop() {
  std::deque<Pending> left;
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  {
    absl::MutexLock j(&join_mu_);
    if (thread_.joinable()) thread_.join();
  }
  {
    absl::MutexLock l(&mu_);
    left.swap(queue_);
  }
  // Nothing queued is left without an answer.
  for (auto& p : left) {
    if (p.done) p.done(absl::UnavailableError("the gateway is shutting down"));
  }
}

}  // namespace tandem::gateway
