#pragma once

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/intake/reload_loop.h"
#include "gateway/intake/router_holder.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pool/worker_pools.h"
#include "gateway/signals/signal_engine.h"
#include "policies/policy_loader.h"

namespace tandem::gateway {

// Loads the policy file, validates it (schema, and every model it names has workers), and swaps
// it in atomically. Runs off the request path on its own thread: when the file's content
// changes, on SIGHUP and on the admin RPC. An invalid file never replaces the live policy: its
// errors are logged, returned and counted. So is a file over `limits` (a policy path that became
// a link to /dev/zero included): it is read no further than the limit.
class PolicyReloader {
 public:
  // `signals` (may be null) gets every policy before it goes live.
  PolicyReloader(std::string path, const WorkerPools* pools, RouterHolder* holder,
                 GatewayMetrics* metrics, SignalEngine* signals = nullptr,
                 policies::PolicyLimits limits = policies::PolicyLimits())
      : path_(std::move(path)),
        pools_(pools),
        holder_(holder),
        metrics_(metrics),
        signals_(signals),
        limits_(limits),
        loop_([this] { CheckFile(); }, [this](const std::string& t) { return Reload(t); }) {}
  ~PolicyReloader() { Stop(); }

  // Loads and, if valid, swaps, on the calling thread. `trigger` is for the log line.
  absl::Status Reload(const std::string& trigger) ABSL_LOCKS_EXCLUDED(mu_, live_mu_);
  // Starts the reload thread: it polls the file every `interval` and serves ReloadAsync.
  void Start(absl::Duration interval) { loop_.Start(interval); }
  // Queues a reload on the reload thread; `done` (may be empty) gets its result there.
  void ReloadAsync(std::string trigger, std::function<void(absl::Status)> done) {
    loop_.Enqueue(std::move(trigger), std::move(done));
  }
  void Stop() { loop_.Stop(); }

  const std::string& path() const { return path_; }
  // The live policy's version and sha256.
  std::pair<std::string, std::string> Live() const ABSL_LOCKS_EXCLUDED(live_mu_);

  // What the reload thread does every interval: re-reads the file and reloads it when it (or the
  // classifier model's size or time) changed; a file that fails is reported once per change.
  // Public for tests, which call it instead of waiting for the thread.
  void CheckFile() ABSL_LOCKS_EXCLUDED(mu_, live_mu_);

 private:
  // Parses `text` (the file's bytes as read once) and swaps it in if valid.
  absl::Status ReloadText(const std::string& text, const std::string& trigger)
      ABSL_LOCKS_EXCLUDED(mu_, live_mu_);

  const std::string path_;
  const WorkerPools* const pools_;
  RouterHolder* const holder_;
  GatewayMetrics* const metrics_;
  SignalEngine* const signals_;
  const policies::PolicyLimits limits_;
  absl::Mutex mu_;  // serialises reloads; held through file I/O and parsing
  // The live policy's YAML hash and its model file's size and mtime; and the same key of the
  // last file that failed, so it is reported once per change.
  std::string live_key_ ABSL_GUARDED_BY(mu_);
  std::string live_classifier_path_ ABSL_GUARDED_BY(mu_);
  std::string last_failed_key_ ABSL_GUARDED_BY(mu_);
  // What Live() reports; its own lock so admin RPCs never wait for a reload's I/O.
  mutable absl::Mutex live_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::string live_version_ ABSL_GUARDED_BY(live_mu_);
  std::string live_sha256_ ABSL_GUARDED_BY(live_mu_);
  ReloadLoop loop_;  // last: its thread uses the members above
};

}  // namespace tandem::gateway
