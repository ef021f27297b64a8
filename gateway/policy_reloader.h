#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gateway/gateway_metrics.h"
#include "gateway/router_holder.h"
#include "gateway/worker_pool.h"

namespace tandem::gateway {

// Loads the policy file, validates it (schema, and every model it names has workers), and swaps
// it in atomically. Runs off the request path: on SIGHUP, and when the file's content changes.
// An invalid file never replaces the live policy: its errors are logged, returned and counted.
class PolicyReloader {
 public:
  PolicyReloader(std::string path, const WorkerPools* pools, RouterHolder* holder,
                 GatewayMetrics* metrics)
      : path_(std::move(path)), pools_(pools), holder_(holder), metrics_(metrics) {}
  ~PolicyReloader();

  // Loads and, if valid, swaps. `trigger` is for the log line.
  absl::Status Reload(const std::string& trigger);
  // Polls the file every `interval` and reloads when its content changed.
  void StartWatching(absl::Duration interval);
  void Stop();

 private:
  const std::string path_;
  const WorkerPools* const pools_;
  RouterHolder* const holder_;
  GatewayMetrics* const metrics_;
  std::mutex mu_;                   // serialises reloads
  std::string live_sha256_;         // guarded by mu_
  std::string last_failed_sha256_;  // guarded by mu_; so a bad file is reported once per change
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::thread watcher_;
};

}  // namespace tandem::gateway
