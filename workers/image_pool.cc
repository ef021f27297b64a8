#include "workers/image_pool.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::workers {
namespace {

// Image threads run at a lower priority (nice +10 on Linux, where it is per thread): on a
// machine with few cores, a decode then takes the CPU only when health checks, text requests
// and the engine leave it.
constexpr int kImageThreadNice = 10;

void LowerThisThreadsPriority() {
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  // Best effort: a refusal (a sandbox) leaves the thread at the process's priority.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(tid), kImageThreadNice);
}

}  // namespace

ImagePool::ImagePool(Options options, WorkerMetrics* metrics)
    : options_(options), metrics_(metrics) {
  if (metrics_ != nullptr) {
    metrics_->image_pool_threads.Set(options_.threads);
    metrics_->image_pool_queue_capacity.Set(options_.queue);
  }
  threads_.reserve(options_.threads);
  for (int32_t i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Run(); });
}

ImagePool::~ImagePool() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    work_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status ImagePool::Submit(absl::AnyInvocable<void() &&> job) {
  absl::MutexLock l(&mu_);
  // Room for one job a thread and options_.queue more waiting.
  const int64_t held = busy_ + static_cast<int64_t>(queue_.size());
  if (stopping_ || held >= int64_t{options_.threads} + options_.queue) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "image work is full (", options_.threads, " threads busy, ", options_.queue,
        " requests waiting); retry later"));
  }
  queue_.push_back(std::move(job));
  PublishLocked();
  work_.Signal();
  return absl::OkStatus();
}

void ImagePool::Run() {
  LowerThisThreadsPriority();
  for (;;) {
    absl::AnyInvocable<void() &&> job;
    {
      absl::MutexLock l(&mu_);
      while (queue_.empty() && !stopping_) work_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      PublishLocked();
    }
    std::move(job)();
    absl::MutexLock l(&mu_);
    --busy_;
    PublishLocked();
  }
}

void ImagePool::PublishLocked() {
  if (metrics_ == nullptr) return;
  metrics_->image_pool_busy.Set(busy_);
  metrics_->image_pool_queued.Set(static_cast<double>(queue_.size()));
}

}  // namespace tandem::workers
