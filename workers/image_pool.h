#pragma once

// The threads that decode and resize request images, apart from gRPC's: a decode can take
// seconds of CPU and hundreds of MB, and on gRPC's callback threads it held up health checks
// and every other call. A bounded number of threads, a bounded queue in front of them, and a
// full pool refuses at once (RESOURCE_EXHAUSTED) instead of queueing without end.

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "workers/worker_metrics.h"

namespace tandem::workers {

class ImagePool {
 public:
  struct Options {
    // Threads that run image work (--image_threads).
    int32_t threads = 2;
    // Jobs that may wait for a thread (--image_queue); beyond them Submit refuses.
    int32_t queue = 16;
  };

  // Starts the threads. `metrics` (may be null) gets the pool's size and occupancy.
  ImagePool(Options options, WorkerMetrics* metrics);
  // Runs what is queued, then joins the threads.
  ~ImagePool() ABSL_LOCKS_EXCLUDED(mu_);
  ImagePool(const ImagePool&) = delete;
  ImagePool& operator=(const ImagePool&) = delete;

  // Runs `job` on a pool thread. RESOURCE_EXHAUSTED, without running it, when every thread is
  // busy and the queue is full.
  absl::Status Submit(absl::AnyInvocable<void() &&> job) ABSL_LOCKS_EXCLUDED(mu_);

  const Options& options() const { return options_; }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  WorkerMetrics* const metrics_;
  absl::Mutex mu_;
  absl::CondVar work_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  int32_t busy_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tandem::workers
