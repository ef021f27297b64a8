#include "gateway/reload_loop.h"

namespace tandem::gateway {

void ReloadLoop::Start(absl::Duration interval) {
  std::lock_guard<std::mutex> l(mu_);
  if (started_ || stop_) return;
  started_ = true;
  thread_ = std::thread([this, interval] { Loop(interval); });
}

void ReloadLoop::Enqueue(std::string trigger, std::function<void(absl::Status)> done) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!stop_) {
      queue_.push_back({std::move(trigger), std::move(done)});
      cv_.notify_one();
      return;
    }
  }
  if (done) done(absl::UnavailableError("the gateway is shutting down"));
}

void ReloadLoop::Loop(absl::Duration interval) {
  const auto period = absl::ToChronoMilliseconds(interval);
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (!cv_.wait_for(l, period, [&] { return stop_ || !queue_.empty(); })) {
      l.unlock();
      poll_();
      l.lock();
      continue;
    }
    while (!queue_.empty() && !stop_) {
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      absl::Status s = reload_(p.trigger);
      if (p.done) p.done(s);
      l.lock();
    }
  }
}

void ReloadLoop::Stop() {
  std::deque<Pending> left;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> j(join_mu_);
    if (thread_.joinable()) thread_.join();
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    left.swap(queue_);
  }
  // Nothing queued is left without an answer.
  for (auto& p : left) {
    if (p.done) p.done(absl::UnavailableError("the gateway is shutting down"));
  }
}

}  // namespace tandem::gateway
