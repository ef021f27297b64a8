#include "workers/scheduler.h"

#include <atomic>
#include <chrono>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/steady_wait.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "workers/simulator/synthetic_tokenizer.h"

namespace tandem::workers {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// An engine whose steps run only when the test allows them, recording each batch.
class GatedEngine final : public Engine {
 public:
  GatedEngine() : tokenizer_(0) {
    info_.engine = "gated-test";
    info_.model_name = "qwen";
    info_.max_context_tokens = 1000;
    info_.max_output_tokens = 100;
  }
  const EngineInfo& Info() const override { return info_; }
  const Tokenizer& GetTokenizer() const override { return tokenizer_; }
  absl::Status AddSequence(const SequenceSpec& spec) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    live_.insert(spec.id);
    return absl::OkStatus();
  }
  void RemoveSequence(uint64_t id) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    live_.erase(id);
  }
  absl::Status Step(absl::Span<const uint64_t> ids, std::vector<StepOutput>* out) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    ++waiting_steps_;
    cv_.SignalAll();
    while (allowed_ <= 0 && !open_) cv_.Wait(&mu_);
    if (!open_) --allowed_;
    --waiting_steps_;
    batches_.emplace_back(ids.begin(), ids.end());
    for (uint64_t id : ids) out->push_back({id, static_cast<int32_t>(id % 10), false});
    cv_.SignalAll();
    return absl::OkStatus();
  }

  // Lets `n` more steps run and waits until the engine is blocked again (or idle).
  void RunSteps(int n) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    const size_t target = batches_.size() + n;
    allowed_ += n;
    cv_.SignalAll();
    while (batches_.size() < target) cv_.Wait(&mu_);
  }
  void WaitBlocked() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    while (waiting_steps_ <= 0) cv_.Wait(&mu_);
  }
  void Open() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    open_ = true;
    cv_.SignalAll();
  }
  std::vector<std::vector<uint64_t>> batches() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return batches_;
  }
  size_t live() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return live_.size();
  }
  // A memory budget: each sequence takes `per_sequence` bytes.
  void SetBudget(int64_t budget, int64_t per_sequence) {
    budget_ = budget;
    per_sequence_ = per_sequence;
  }
  int64_t SequenceBytes(int64_t, int32_t) const override { return per_sequence_; }
  int64_t MemoryBudgetBytes() const override { return budget_; }
  int64_t MemoryReservedBytes() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return static_cast<int64_t>(live_.size()) * per_sequence_;
  }

 private:
  EngineInfo info_;
  SyntheticTokenizer tokenizer_;
  // Atomic: the test changes the budget while the engine thread reads it (found by TSan).
  std::atomic<int64_t> budget_ = 0;
  std::atomic<int64_t> per_sequence_ = 0;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  int allowed_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_steps_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::vector<uint64_t>> batches_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> live_ ABSL_GUARDED_BY(mu_);
};

class RecordingSink final : public GenerationSink {
 public:
  void OnStarted(int32_t prompt_tokens, int32_t, double) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    prompt_tokens_ = prompt_tokens;
  }
  void OnText(std::string_view text, int32_t tokens) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    text_ += text;
    tokens_ += tokens;
  }
  void OnFinished(const absl::Status& status, tandem::v1::FinishReason reason,
                  int32_t completion_tokens) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    status_ = status;
    reason_ = reason;
    completion_tokens_ = completion_tokens;
    done_ = true;
    cv_.SignalAll();
  }
  void Wait() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done_ && WaitUntil(cv_, mu_, deadline)) {
    }
    ASSERT_TRUE(done_);
  }
  bool done() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return done_;
  }
  absl::Status status() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return status_;
  }
  tandem::v1::FinishReason reason() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return reason_;
  }
  std::string text() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return text_;
  }
  int32_t tokens() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return tokens_;
  }
  int32_t prompt_tokens() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return prompt_tokens_;
  }
  int32_t completion_tokens() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return completion_tokens_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  tandem::v1::FinishReason reason_ ABSL_GUARDED_BY(mu_) = tandem::v1::FINISH_REASON_UNSPECIFIED;
  std::string text_ ABSL_GUARDED_BY(mu_);
  int32_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t completion_tokens_ ABSL_GUARDED_BY(mu_) = 0;
};

GenerationRequest Request(int32_t max_tokens, std::vector<std::string> stop = {}) {
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = max_tokens;
  r.stop = std::move(stop);
  r.arrival = Clock::Real()->Now();
  return r;
}

class SchedulerTest : public ::testing::Test {
 protected:
  // `start` false leaves the engine thread unstarted, so that requests submitted before
  // scheduler_->Start() are all queued when it first looks.
  void Make(int32_t max_batch, int32_t max_queue, bool start = true) {
    metrics_ = std::make_unique<WorkerMetrics>(
        registry_, WorkerMetrics::Labels{"qwen", "id", "gated-test", "cpu", "cpu"});
    scheduler_ = std::make_unique<Scheduler>(&engine_, metrics_.get(), Clock::Real(),
                                             Scheduler::Options{max_batch, max_queue});
    if (start) scheduler_->Start();
  }
  void TearDown() override {
    engine_.Open();
    if (scheduler_) scheduler_->Stop();
  }

  prometheus::Registry registry_;
  GatedEngine engine_;
  std::unique_ptr<WorkerMetrics> metrics_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, GeneratesUpToMaxTokensThenFinishesWithLength) {
  Make(4, 4);
  engine_.Open();
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(Request(5), sink).ok());
  sink->Wait();
  EXPECT_TRUE(sink->status().ok());
  EXPECT_EQ(sink->reason(), tandem::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(sink->completion_tokens(), 5);
  EXPECT_EQ(sink->tokens(), 5);
  EXPECT_EQ(sink->prompt_tokens(), 3);
  EXPECT_EQ(metrics_->generation_tokens.Value(), 5);
  EXPECT_EQ(metrics_->finished_length.Value(), 1);
  EXPECT_TRUE(scheduler_->WaitIdle(Clock::Real()->Now() + std::chrono::seconds(5)));
  EXPECT_EQ(engine_.live(), 0u);
}

TEST_F(SchedulerTest, RequestsJoinAndLeaveTheBatchAtStepBoundaries) {
  Make(4, 4);
  auto a = std::make_shared<RecordingSink>();
  auto b = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(Request(3), a).ok());
  engine_.WaitBlocked();  // step 1 holds {a}
  ASSERT_TRUE(scheduler_->Submit(Request(3), b).ok());
  engine_.RunSteps(1);  // {a}
  engine_.RunSteps(1);  // {a, b}: b joined at the boundary
  engine_.RunSteps(1);  // {a, b}: a's third token
  engine_.RunSteps(1);  // {b}: a left, b's third token
  a->Wait();
  b->Wait();
  const auto batches = engine_.batches();
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0].size(), 1u);
  EXPECT_EQ(batches[1].size(), 2u);
  EXPECT_EQ(batches[2].size(), 2u);
  EXPECT_THAT(batches[3], ElementsAre(batches[1][1]));
  EXPECT_EQ(metrics_->batch_size.Collect().histogram.sample_sum, 6);
}

TEST_F(SchedulerTest, FullQueueIsResourceExhaustedImmediately) {
  Make(1, 1);
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(Request(50), running).ok());
  engine_.WaitBlocked();
  auto queued = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(Request(50), queued).ok());
  EXPECT_EQ(scheduler_->waiting(), 1);
  auto refused = scheduler_->Submit(Request(50), std::make_shared<RecordingSink>());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("--max_queue=1"));
  EXPECT_EQ(metrics_->rejected_queue_full.Value(), 1);
}

TEST_F(SchedulerTest, CancellationStopsWorkAtTheNextStep) {
  Make(4, 4);
  auto sink = std::make_shared<RecordingSink>();
  auto cancel = scheduler_->Submit(Request(100), sink);
  ASSERT_TRUE(cancel.ok());
  engine_.RunSteps(2);
  (*cancel)->Cancel();
  engine_.Open();
  sink->Wait();
  EXPECT_EQ(sink->status().code(), absl::StatusCode::kCancelled);
  EXPECT_LE(sink->completion_tokens(), 3);
  EXPECT_EQ(metrics_->finished_cancelled.Value(), 1);
  EXPECT_TRUE(scheduler_->WaitIdle(Clock::Real()->Now() + std::chrono::seconds(5)));
  EXPECT_EQ(engine_.live(), 0u);
}

TEST_F(SchedulerTest, QueuedRequestsPastTheirDeadlineNeverRun) {
  Make(1, 4);
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(Request(2), running).ok());
  engine_.WaitBlocked();
  auto late = std::make_shared<RecordingSink>();
  GenerationRequest r = Request(2);
  r.deadline = Clock::Real()->Now();  // already passed
  ASSERT_TRUE(scheduler_->Submit(std::move(r), late).ok());
  engine_.Open();
  late->Wait();
  EXPECT_EQ(late->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(late->completion_tokens(), 0);
  EXPECT_EQ(metrics_->finished_deadline.Value(), 1);
  running->Wait();
  EXPECT_TRUE(running->status().ok());
}

TEST_F(SchedulerTest, StopSequenceEndsWithStopAndIsExcluded) {
  Make(2, 2);
  engine_.Open();
  // GatedEngine emits id % 10 for sequence 1: token 1, decoded by the synthetic vocabulary as
  // "request", then " request", ...
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(Request(10, {" request"}), sink).ok());
  sink->Wait();
  EXPECT_EQ(sink->reason(), tandem::v1::FINISH_REASON_STOP);
  EXPECT_EQ(sink->text(), "request");
  EXPECT_EQ(sink->completion_tokens(), 2);
}

TEST_F(SchedulerTest, DrainRefusesNewWorkAndStopEndsAdmittedWork) {
  Make(1, 4);
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(Request(50), running).ok());
  engine_.WaitBlocked();
  auto queued = std::make_shared<RecordingSink>();
  ASSERT_TRUE(scheduler_->Submit(Request(50), queued).ok());
  scheduler_->Drain();
  auto refused = scheduler_->Submit(Request(1), std::make_shared<RecordingSink>());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(metrics_->rejected_draining.Value(), 1);
  scheduler_->RequestStop();
  engine_.Open();
  scheduler_->Stop();
  EXPECT_TRUE(running->done());
  EXPECT_EQ(running->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(queued->done());
  EXPECT_EQ(queued->status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, AdmissionWaitsForSequenceMemoryAndRefusesWhatCanNeverFit) {
  engine_.SetBudget(/*budget=*/2000, /*per_sequence=*/1000);
  // All three are queued before the engine thread starts: otherwise it may admit the first
  // before the others arrive (seen under ThreadSanitizer) and the first batch holds one.
  Make(/*max_batch=*/8, /*max_queue=*/8, /*start=*/false);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(scheduler_->Submit(Request(2), sinks.back()).ok());
  }
  scheduler_->Start();
  engine_.RunSteps(1);
  // Batch slots for all three, memory for two: the third waits.
  ASSERT_EQ(engine_.batches().size(), 1u);
  EXPECT_EQ(engine_.batches()[0].size(), 2u);
  engine_.Open();
  for (auto& s : sinks) s->Wait();
  for (auto& s : sinks) EXPECT_TRUE(s->status().ok()) << s->status();
  EXPECT_EQ(engine_.live(), 0u);
  // A sequence larger than the whole budget is refused at once.
  engine_.SetBudget(500, 1000);
  auto refused = scheduler_->Submit(Request(2), std::make_shared<RecordingSink>());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--memory_budget"));
}

}  // namespace
}  // namespace tandem::workers
