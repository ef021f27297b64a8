#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tandem::workers::upstream {

// The engine server as the worker's child (--upstream_command), so one tandem-worker still owns
// one GPU with the engine's CUDA runtime in its child: started with CUDA_VISIBLE_DEVICES set to
// the worker's device, restarted with backoff when it dies, sent SIGTERM (then SIGKILL after
// `stop_timeout`) when the worker stops, and killed by the kernel if the worker dies first.
class EngineProcess {
 public:
  struct Options {
    std::string command;  // run by /bin/sh -c
    // The worker's --device: "cpu" hides every GPU (CUDA_VISIBLE_DEVICES=""), "N" shows GPU N.
    std::string device;
    absl::Duration min_backoff = absl::Seconds(1);
    absl::Duration max_backoff = absl::Seconds(30);
    absl::Duration stop_timeout = absl::Seconds(30);
  };

  explicit EngineProcess(Options options);
  ~EngineProcess();

  // Starts the child and its supervisor thread.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // SIGTERM to the child's process group, SIGKILL after stop_timeout; no restart after it.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // The running child's pid, 0 between a death and its restart.
  pid_t pid() const { return pid_.load(); }
  int restarts() const { return restarts_.load(); }

 private:
  pid_t Spawn();
  void Supervise() ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  std::atomic<pid_t> pid_{0};
  std::atomic<int> restarts_{0};
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread supervisor_;
};

}  // namespace tandem::workers::upstream
