#include "workers/scheduler.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/steady_wait.h"
#include "spdlog/spdlog.h"
#include "workers/stop_matcher.h"

namespace tandem::workers {

struct Scheduler::Sequence {
  uint64_t id = 0;
  GenerationRequest request;
  std::shared_ptr<GenerationSink> sink;
  std::shared_ptr<Cancellation> cancellation = std::make_shared<Cancellation>();
  std::unique_ptr<StreamDecoder> decoder;
  StopMatcher stop{{}};
  int32_t generated = 0;
  Clock::TimePoint first_token;
  Clock::TimePoint last_token;
  // AddSequence succeeded: the engine holds state for it until Finish.
  bool admitted = false;
  bool done = false;
};

Scheduler::Scheduler(Engine* engine, WorkerMetrics* metrics, Clock* clock, Options options)
    : engine_(engine), metrics_(metrics), clock_(clock), options_(options) {}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Scheduler::Drain() {
  absl::MutexLock l(&mu_);
  draining_ = true;
}

void Scheduler::RequestStop() {
  {
    absl::MutexLock l(&mu_);
    draining_ = true;
    stopping_ = true;
  }
  work_cv_.SignalAll();
}

void Scheduler::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<std::shared_ptr<Cancellation>> Scheduler::Submit(
    GenerationRequest request, std::shared_ptr<GenerationSink> sink) {
  auto seq = std::make_unique<Sequence>();
  seq->request = std::move(request);
  seq->sink = std::move(sink);
  auto cancellation = seq->cancellation;
  {
    absl::MutexLock l(&mu_);
    if (draining_) {
      metrics_->rejected_draining.Increment();
      return absl::UnavailableError("worker is draining and accepts no new requests");
    }
    const int64_t budget = engine_->MemoryBudgetBytes();
    const int64_t need = engine_->SequenceBytes(static_cast<int64_t>(seq->request.prompt.size()),
                                                seq->request.max_tokens);
    if (budget > 0 && need > budget) {
      metrics_->rejected_invalid.Increment();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the sequence needs %d bytes of KV cache and state (prompt %d + max_tokens %d tokens), "
          "more than this worker's whole budget of %d bytes (--memory_budget); send fewer tokens",
          need, seq->request.prompt.size(), seq->request.max_tokens, budget));
    }
    if (static_cast<int32_t>(queue_.size()) >= options_.max_queue) {
      metrics_->rejected_queue_full.Increment();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "worker admission queue is full (%d waiting, --max_queue=%d); retry later", queue_.size(),
          options_.max_queue));
    }
    seq->id = next_id_++;
    queue_.push_back(std::move(seq));
    ++active_;
    waiting_count_.store(static_cast<int32_t>(queue_.size()), std::memory_order_relaxed);
    metrics_->waiting.Set(static_cast<double>(queue_.size()));
  }
  work_cv_.Signal();
  return cancellation;
}

bool Scheduler::WaitIdle(Clock::TimePoint deadline) {
  absl::MutexLock l(&mu_);
  // WaitUntil waits on the steady clock, which Clock::Real() also reads.
  while (active_ != 0 && WaitUntil(idle_cv_, mu_, deadline)) {
  }
  return active_ == 0;
}

void Scheduler::Finish(Sequence& seq, const absl::Status& status, tandem::v1::FinishReason reason) {
  if (seq.done) return;
  seq.done = true;
  if (status.ok()) {
    std::string rest = seq.decoder ? seq.decoder->Flush() : "";
    bool stopped = false;
    std::string text = seq.stop.Push(rest, &stopped);
    if (!stopped) text += seq.stop.Flush();
    if (!text.empty()) seq.sink->OnText(text, 0);
  }
  const Clock::TimePoint now = clock_->Now();
  switch (status.code()) {
    case absl::StatusCode::kOk:
      (reason == tandem::v1::FINISH_REASON_LENGTH ? metrics_->finished_length
                                                  : metrics_->finished_stop)
          .Increment();
      metrics_->e2e_latency.Observe(Seconds(now - seq.request.arrival));
      if (seq.generated > 1) {
        metrics_->time_per_output_token.Observe(Seconds(seq.last_token - seq.first_token) /
                                                (seq.generated - 1));
      }
      break;
    case absl::StatusCode::kCancelled:
      metrics_->finished_cancelled.Increment();
      break;
    case absl::StatusCode::kDeadlineExceeded:
      metrics_->finished_deadline.Increment();
      break;
    default:
      metrics_->finished_error.Increment();
      break;
  }
  if (seq.admitted) engine_->RemoveSequence(seq.id);
  seq.sink->OnFinished(status, reason, seq.generated);
  seq.sink.reset();
  absl::MutexLock l(&mu_);
  if (--active_ == 0) idle_cv_.SignalAll();
}

void Scheduler::Admit(std::unique_ptr<Sequence> seq) {
  const Clock::TimePoint now = clock_->Now();
  SequenceSpec spec;
  spec.id = seq->id;
  spec.prompt = seq->request.prompt;
  spec.sampling = seq->request.sampling;
  spec.max_tokens = seq->request.max_tokens;
  spec.thinking_budget = seq->request.thinking_budget;
  spec.images = std::move(seq->request.images);
  spec.cache_partition = seq->request.cache_partition;
  if (absl::Status s = engine_->AddSequence(spec); !s.ok()) {
    Finish(*seq, s, tandem::v1::FINISH_REASON_UNSPECIFIED);
    return;
  }
  seq->admitted = true;
  seq->decoder = engine_->GetTokenizer().NewStreamDecoderAfter(seq->request.prompt);
  seq->stop = StopMatcher(seq->request.stop);
  const double queue_seconds = Seconds(now - seq->request.arrival);
  metrics_->queue_time.Observe(queue_seconds);
  metrics_->prompt_tokens.Increment(static_cast<double>(seq->request.prompt.size()));
  const int64_t cached = engine_->CachedPromptTokens(seq->id);
  seq->sink->OnStarted(static_cast<int32_t>(seq->request.prompt.size()),
                       static_cast<int32_t>(cached), queue_seconds);
  running_.push_back(std::move(seq));
}

void Scheduler::Reap(std::vector<std::unique_ptr<Sequence>>& seqs, Clock::TimePoint now) {
  for (auto& seq : seqs) {
    if (seq->cancellation->IsExpired() || now >= seq->request.deadline) {
      Finish(*seq, absl::DeadlineExceededError("deadline passed"),
             tandem::v1::FINISH_REASON_CANCELLED);
    } else if (seq->cancellation->IsCancelled()) {
      Finish(*seq, absl::CancelledError("cancelled by the client"),
             tandem::v1::FINISH_REASON_CANCELLED);
    }
  }
}

void Scheduler::OnToken(Sequence& seq, const StepOutput& out, Clock::TimePoint now) {
  if (out.end_of_sequence) {
    Finish(seq, absl::OkStatus(), tandem::v1::FINISH_REASON_STOP);
    return;
  }
  if (seq.generated == 0) {
    seq.first_token = now;
    metrics_->time_to_first_token.Observe(Seconds(now - seq.request.arrival));
  }
  seq.last_token = now;
  ++seq.generated;
  metrics_->generation_tokens.Increment();
  bool stopped = false;
  const std::string text = seq.stop.Push(seq.decoder->Next(out.token), &stopped);
  seq.sink->OnText(text, 1);
  const int64_t context = static_cast<int64_t>(seq.request.prompt.size()) + seq.generated;
  if (stopped) {
    Finish(seq, absl::OkStatus(), tandem::v1::FINISH_REASON_STOP);
  } else if (seq.generated >= seq.request.max_tokens ||
             context >= engine_->Info().max_context_tokens) {
    Finish(seq, absl::OkStatus(), tandem::v1::FINISH_REASON_LENGTH);
  }
}

bool Scheduler::TakeWork(Clock::TimePoint* now, std::vector<std::unique_ptr<Sequence>>& expired,
                         std::vector<std::unique_ptr<Sequence>>& admitted) {
  absl::MutexLock l(&mu_);
  while (!stopping_ && queue_.empty() && running_.empty()) work_cv_.Wait(&mu_);
  if (stopping_) return false;
  *now = clock_->Now();  // after the wait, which may have been long
  // Queued requests that were cancelled or expired leave without taking a batch slot.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->cancellation->IsCancelled() || *now >= (*it)->request.deadline) {
      expired.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  // Admission in order while batch slots and sequence memory last (a request that does not
  // fit waits for memory to free; one that can never fit was refused at Submit).
  const int64_t budget = engine_->MemoryBudgetBytes();
  int64_t free_bytes = budget - engine_->MemoryReservedBytes();
  while (static_cast<int32_t>(running_.size() + admitted.size()) < options_.max_batch_size &&
         !queue_.empty()) {
    const auto& next = queue_.front()->request;
    const int64_t need =
        engine_->SequenceBytes(static_cast<int64_t>(next.prompt.size()), next.max_tokens);
    if (budget > 0 && need > free_bytes) break;
    free_bytes -= need;
    admitted.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  waiting_count_.store(static_cast<int32_t>(queue_.size()), std::memory_order_relaxed);
  metrics_->waiting.Set(static_cast<double>(queue_.size()));
  return true;
}

void Scheduler::StepRunning(std::vector<uint64_t>& ids, std::vector<StepOutput>& outputs) {
  ids.clear();
  for (const auto& seq : running_) {
    if (!seq->done) ids.push_back(seq->id);
  }
  running_count_.store(static_cast<int32_t>(ids.size()), std::memory_order_relaxed);
  metrics_->running.Set(static_cast<double>(ids.size()));
  if (ids.empty()) return;
  outputs.clear();
  const Clock::TimePoint step_start = clock_->Now();
  absl::Status status = engine_->Step(ids, &outputs);
  const Clock::TimePoint step_end = clock_->Now();
  metrics_->step_duration.Observe(Seconds(step_end - step_start));
  metrics_->batch_size.Observe(static_cast<double>(ids.size()));
  if (!status.ok()) {
    spdlog::error("engine step failed for a batch of {}: {}", ids.size(), status.ToString());
    for (auto& seq : running_) Finish(*seq, status, tandem::v1::FINISH_REASON_UNSPECIFIED);
    return;
  }
  // Outputs are in `ids` order, which is running_ order restricted to live sequences.
  size_t k = 0;
  for (auto& seq : running_) {
    if (seq->done) continue;
    OnToken(*seq, outputs[k++], step_end);
  }
}

void Scheduler::Retire() {
  std::erase_if(running_, [](const std::unique_ptr<Sequence>& s) { return s->done; });
  const int64_t reserved = engine_->MemoryReservedBytes();
  const int64_t budget = engine_->MemoryBudgetBytes();
  metrics_->sequence_memory_reserved.Set(static_cast<double>(reserved));
  metrics_->kv_cache_usage.Set(budget > 0 ? static_cast<double>(reserved) / budget : 0.0);
  PublishPrefixStats();
  running_count_.store(static_cast<int32_t>(running_.size()), std::memory_order_relaxed);
  metrics_->running.Set(static_cast<double>(running_.size()));
}

void Scheduler::PublishPrefixStats() {
  const PrefixCacheStats now = engine_->PrefixStats();
  PrefixCacheStats& was = published_prefix_stats_;
  const auto add = [](prometheus::Counter& c, int64_t to, int64_t from) {
    if (to > from) c.Increment(static_cast<double>(to - from));
  };
  add(metrics_->prefix_cache_hits, now.hits, was.hits);
  add(metrics_->prefix_cache_misses, now.misses, was.misses);
  add(metrics_->prefix_cache_tokens_saved, now.tokens_saved, was.tokens_saved);
  add(metrics_->prefix_cache_inserts, now.inserts, was.inserts);
  add(metrics_->prefix_cache_evictions, now.evictions, was.evictions);
  metrics_->prefix_cache_bytes.Set(static_cast<double>(now.bytes));
  metrics_->prefix_cache_entries.Set(static_cast<double>(now.entries));
  was = now;
}

void Scheduler::FailAllOnShutdown() {
  std::deque<std::unique_ptr<Sequence>> left;
  {
    absl::MutexLock l(&mu_);
    left.swap(queue_);
  }
  const absl::Status shutdown = absl::UnavailableError("worker shut down");
  for (auto& seq : left) Finish(*seq, shutdown, tandem::v1::FINISH_REASON_UNSPECIFIED);
  for (auto& seq : running_) {
    Finish(*seq, shutdown, tandem::v1::FINISH_REASON_UNSPECIFIED);
  }
  running_.clear();
  running_count_.store(0);
  waiting_count_.store(0);
}

void Scheduler::Loop() {
  // Reused across steps, so that a steady batch allocates nothing per step.
  std::vector<uint64_t> ids;
  std::vector<StepOutput> outputs;
  std::vector<std::unique_ptr<Sequence>> expired;
  std::vector<std::unique_ptr<Sequence>> admitted;
  Clock::TimePoint now;
  while (TakeWork(&now, expired, admitted)) {
    Reap(expired, now);
    expired.clear();
    for (auto& seq : admitted) Admit(std::move(seq));
    admitted.clear();
    Reap(running_, now);
    StepRunning(ids, outputs);
    Retire();
  }
  FailAllOnShutdown();
}

}  // namespace tandem::workers
