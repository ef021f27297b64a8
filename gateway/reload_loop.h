#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tandem::gateway {

// The thread behind a reloadable file (the policy, the tenants file): it calls `poll` every
// interval (to notice the file changing) and runs queued reloads (SIGHUP, the admin RPC) one at a
// time, so reloads never touch the request path and never overlap.
class ReloadLoop {
 public:
  using Reload = std::function<absl::Status(const std::string& trigger)>;
  ReloadLoop(std::function<void()> poll, Reload reload)
      : poll_(std::move(poll)), reload_(std::move(reload)) {}
  ~ReloadLoop() { Stop(); }

  // Starts the thread (once; later calls do nothing). `interval` must be positive and finite.
  void Start(absl::Duration interval);
  // Queues `reload(trigger)`; `done` (may be empty) gets its result on the loop's thread, or
  // UNAVAILABLE once stopping.
  void Enqueue(std::string trigger, std::function<void(absl::Status)> done);
  // Answers what is still queued with UNAVAILABLE and joins the thread. Idempotent; not from
  // `poll` or `reload` themselves.
  void Stop();

 private:
  struct Pending {
    std::string trigger;
    std::function<void(absl::Status)> done;
  };
  void Loop(absl::Duration interval);

  const std::function<void()> poll_;
  const Reload reload_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_
  bool started_ = false;       // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  std::mutex join_mu_;         // concurrent Stop calls join once
  std::thread thread_;
};

}  // namespace tandem::gateway
