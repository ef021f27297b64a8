#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "tandem/v1/common.pb.h"
#include "workers/engine.h"
#include "workers/worker_metrics.h"

namespace tandem::workers {

struct GenerationRequest {
  std::string request_id;
  std::vector<int32_t> prompt;
  SamplingConfig sampling;
  int32_t max_tokens = 0;
  // Thinking-token budget (ReasoningOptions.thinking_budget_tokens); 0 for none.
  int32_t thinking_budget = 0;
  std::vector<std::string> stop;
  // The prompt's images, prepared for the engine (SequenceSpec::images).
  std::vector<std::shared_ptr<const vision::PreparedImage>> images;
  // The prefix cache's partition (SequenceSpec::cache_partition).
  std::string cache_partition;
  Clock::TimePoint arrival;
  // Clock::TimePoint::max() when the caller set none.
  Clock::TimePoint deadline = Clock::TimePoint::max();
};

// Receives one request's results. Called only on the engine thread; must not block.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // The request joined the running batch; `cached_prompt_tokens` of its prompt came from the
  // engine's prefix cache.
  virtual void OnStarted(int32_t prompt_tokens, int32_t cached_prompt_tokens,
                         double queue_seconds) = 0;
  // Newly generated text and the number of tokens it came from (text may be empty while a stop
  // sequence or a multi-byte character is still being decided).
  virtual void OnText(std::string_view text, int32_t tokens) = 0;
  // Exactly once, last. On error `reason` is FINISH_REASON_CANCELLED for cancellations and
  // deadlines and FINISH_REASON_UNSPECIFIED otherwise.
  virtual void OnFinished(const absl::Status& status, tandem::v1::FinishReason reason,
                          int32_t completion_tokens) = 0;
};

// Lets the RPC layer stop a request from any thread; honoured at the next step boundary.
class Cancellation {
 public:
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  // The RPC was cancelled because its deadline passed (reported as DEADLINE_EXCEEDED).
  void Expire() {
    expired_.store(true, std::memory_order_relaxed);
    Cancel();
  }
  bool IsCancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  bool IsExpired() const { return expired_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> expired_{false};
};

// Continuous batching on one engine thread: requests join the running batch at step
// boundaries (up to max_batch_size) and leave it as soon as they finish, are cancelled or pass
// their deadline. Admission is a bounded FIFO queue; a full queue refuses at once.
class Scheduler {
 public:
  struct Options {
    int32_t max_batch_size = 64;
    int32_t max_queue = 256;
  };

  Scheduler(Engine* engine, WorkerMetrics* metrics, Clock* clock, Options options);
  ~Scheduler();

  void Start();
  // Later Submits get UNAVAILABLE; admitted work continues.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the engine thread to stop after the current step, without waiting.
  void RequestStop() ABSL_LOCKS_EXCLUDED(mu_);
  // RequestStop(), then joins the engine thread; admitted work ends with UNAVAILABLE.
  void Stop();

  // RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE when draining or stopped.
  absl::StatusOr<std::shared_ptr<Cancellation>> Submit(GenerationRequest request,
                                                       std::shared_ptr<GenerationSink> sink)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until nothing is queued or running, or until `deadline`; true when idle.
  bool WaitIdle(Clock::TimePoint deadline) ABSL_LOCKS_EXCLUDED(mu_);

  int32_t running() const { return running_count_.load(std::memory_order_relaxed); }
  int32_t waiting() const { return waiting_count_.load(std::memory_order_relaxed); }
  const Options& options() const { return options_; }

 private:
  struct Sequence;

  // The engine thread: each pass takes work, admits, steps the batch and retires what
  // finished; on stop, fails everything left.
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for queued or running work, then moves cancelled and expired queued requests to
  // `expired` and those that fit the batch and sequence memory to `admitted`, in queue order;
  // `now` is read after the wait. False once stopping.
  bool TakeWork(Clock::TimePoint* now, std::vector<std::unique_ptr<Sequence>>& expired,
                std::vector<std::unique_ptr<Sequence>>& admitted) ABSL_LOCKS_EXCLUDED(mu_);
  // One engine step over the live running sequences, delivering each its token (all fail
  // when the step does). `ids` and `outputs` are scratch reused across steps.
  void StepRunning(std::vector<uint64_t>& ids, std::vector<StepOutput>& outputs)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops finished sequences from the batch and publishes the batch and memory gauges.
  void Retire();
  // The engine's prefix-cache counters into the metrics (engine thread).
  void PublishPrefixStats();
  // Shutdown: everything still admitted ends with UNAVAILABLE so no caller waits forever.
  void FailAllOnShutdown() ABSL_LOCKS_EXCLUDED(mu_);
  void Admit(std::unique_ptr<Sequence> seq);
  void Finish(Sequence& seq, const absl::Status& status, tandem::v1::FinishReason reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnToken(Sequence& seq, const StepOutput& out, Clock::TimePoint now);
  // Drops cancelled and expired sequences; returns how many are left.
  void Reap(std::vector<std::unique_ptr<Sequence>>& seqs, Clock::TimePoint now);

  Engine* const engine_;
  WorkerMetrics* const metrics_;
  Clock* const clock_;
  const Options options_;

  absl::Mutex mu_;
  absl::CondVar work_cv_;
  absl::CondVar idle_cv_;
  std::deque<std::unique_ptr<Sequence>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t active_ ABSL_GUARDED_BY(mu_) = 0;  // queued + running
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;

  // Engine thread only.
  std::vector<std::unique_ptr<Sequence>> running_;

  std::atomic<int32_t> running_count_{0};
  PrefixCacheStats published_prefix_stats_;  // engine thread only
  std::atomic<int32_t> waiting_count_{0};
  std::thread thread_;
};

}  // namespace tandem::workers
