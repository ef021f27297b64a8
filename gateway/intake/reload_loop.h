#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
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
  void Start(absl::Duration interval) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues `reload(trigger)`; `done` (may be empty) gets its result on the loop's thread, or
  // UNAVAILABLE once stopping.
  void Enqueue(std::string trigger, std::function<void(absl::Status)> done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Answers what is still queued with UNAVAILABLE and joins the thread. Idempotent; not from
  // `poll` or `reload` themselves.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_, join_mu_);

 private:
  struct Pending {
    std::string trigger;
    std::function<void(absl::Status)> done;
  };
  void Loop(absl::Duration interval) ABSL_LOCKS_EXCLUDED(mu_);

  const std::function<void()> poll_;
  const Reload reload_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // concurrent Stop calls join once
  // Set by Start under mu_, joined by Stop under join_mu_ (after stop_, so Start sets it no more).
  std::thread thread_;
};

}  // namespace tandem::gateway
