#include "gateway/dispatch/generation_attempts.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Clock = GenerationAttempts::Clock;
using Id = GenerationAttempts::AttemptId;
using std::chrono::milliseconds;
using std::chrono::seconds;

AttemptTarget Worker(const std::string& model, const std::string& address,
                     int32_t max_output_tokens = 0) {
  return AttemptTarget{.model = model,
                       .address = address,
                       .max_output_tokens = max_output_tokens,
                       .target = nullptr};
}

// The gateway as the decisions see it: a clock the test moves, workers picked in order (the
// excluded ones skipped), a retry budget of counts, and the counters as lines.
class FakeEnvironment : public GenerationAttempts::Environment {
 public:
  Clock::time_point Now() const override { return now; }
  absl::StatusOr<AttemptTarget> PickTarget(
      const std::vector<const AttemptTarget*>& exclude) override {
    std::vector<std::string> addresses;
    for (const AttemptTarget* t : exclude) addresses.push_back(t->address);
    picks.push_back(addresses);
    for (const AttemptTarget& w : workers) {
      if (std::find(addresses.begin(), addresses.end(), w.address) == addresses.end()) return w;
    }
    return absl::UnavailableError("model 'qwen' has no usable worker; retry later");
  }
  bool TryRetry() override {
    if (retries_left == 0) return false;
    --retries_left;
    return true;
  }
  bool TryHedge() override {
    if (hedges_left == 0) return false;
    --hedges_left;
    ++hedges_held;
    return true;
  }
  void ReleaseHedge() override { --hedges_held; }
  bool CallerGone() const override { return caller_gone; }
  bool Unresponsive(const AttemptTarget& target) const override {
    return std::find(unresponsive.begin(), unresponsive.end(), target.address) !=
           unresponsive.end();
  }
  bool AnotherUsable(const AttemptTarget&) const override { return another_usable; }
  void CountRetry(const std::string& model, const char* reason) override {
    counters.push_back(absl::StrCat("retry ", model, " ", reason));
  }
  void CountFailover(const std::string& from_model, const std::string& to_model) override {
    counters.push_back(absl::StrCat("failover ", from_model, "->", to_model));
  }
  void CountHedge(const std::string& model, bool won) override {
    counters.push_back(absl::StrCat("hedge ", model, won ? " won" : " lost"));
  }
  void CountRetryBudgetExhausted() override { counters.push_back("retry budget exhausted"); }
  void CountStall(const std::string& model) override {
    counters.push_back(absl::StrCat("stall ", model));
  }

  Clock::time_point now = Clock::time_point() + seconds(1000);
  std::vector<AttemptTarget> workers;
  std::vector<std::string> unresponsive;
  bool another_usable = true;
  int retries_left = 100;
  int hedges_left = 100;
  int hedges_held = 0;
  bool caller_gone = false;
  // Each PickTarget's excluded addresses.
  std::vector<std::vector<std::string>> picks;
  std::vector<std::string> counters;
};

class GenerationAttemptsTest : public ::testing::Test {
 protected:
  GenerationAttemptsTest() : attempts_(&env_) {
    request_.set_request_id("r1");
    auto* m = request_.add_messages();
    m->set_role("user");
    m->add_content()->set_text("Say hello");
    request_.mutable_sampling()->set_max_tokens(10);
    env_.workers = {Worker("qwen", "10.0.0.1:7101"), Worker("qwen", "10.0.0.2:7101"),
                    Worker("nemotron", "10.0.0.3:7101", 6)};
  }

  // Starts the first attempt on the first worker; returns its id.
  Id Start(int max_attempts = 3, bool show_workers = true) {
    GenerationAttempts::Options options{.request_id = "r1",
                                        .request = &request_,
                                        .max_attempts = max_attempts,
                                        .hedge_after_seconds = 0.5,
                                        .show_workers = show_workers,
                                        .stall_timeout_min = seconds(5),
                                        .stall_timeout_multiple = 20,
                                        .arrival = env_.now};
    GenerationAttempts::NewAttempt first = attempts_.Start(options, env_.workers[0]);
    EXPECT_EQ(first.target.address, "10.0.0.1:7101");
    EXPECT_FALSE(first.hedge);
    EXPECT_FALSE(first.changed.has_value());  // the admitted request itself, not a copy
    EXPECT_EQ(&first.request(), &request_);
    return first.id;
  }

  GenerationAttempts::ChunkActions Chunk(Id id, const std::string& text, int32_t tokens) {
    tandem::v1::WorkerGenerateChunk chunk;
    chunk.set_text(text);
    chunk.set_tokens(tokens);
    return attempts_.OnChunk(id, chunk);
  }

  GenerationAttempts::EndActions Fail(Id id, absl::Status status, bool worker_fault = true) {
    return attempts_.OnEnd(
        id, {.status = std::move(status), .worker_fault = worker_fault, .stalled = false});
  }

  const tandem::v1::Recovery& recovery() const { return attempts_.recovery(); }

  FakeEnvironment env_;
  tandem::v1::WorkerGenerateRequest request_;
  GenerationAttempts attempts_;
};

// ---- Commit and complete ----

TEST_F(GenerationAttemptsTest, TheFirstChunkCommitsItsAttempt) {
  const Id first = Start();
  GenerationAttempts::ChunkActions a = Chunk(first, "Hel", 1);
  EXPECT_TRUE(a.relay);
  EXPECT_TRUE(a.committed_now);
  EXPECT_THAT(a.cancel, IsEmpty());
  a = Chunk(first, "lo", 1);
  EXPECT_TRUE(a.relay);
  EXPECT_FALSE(a.committed_now);
  EXPECT_EQ(recovery().final_worker(), "10.0.0.1:7101");
  EXPECT_EQ(recovery().final_model(), "qwen");
  EXPECT_FALSE(HasRecovery(recovery()));

  GenerationAttempts::EndActions end =
      attempts_.OnEnd(first, {.status = absl::OkStatus(), .worker_fault = false, .stalled = false});
  ASSERT_TRUE(end.complete.has_value());
  EXPECT_TRUE(end.complete->ok());
  EXPECT_FALSE(end.by_length);
  EXPECT_FALSE(end.start.has_value());
}

TEST_F(GenerationAttemptsTest, AnAnswerWholeByLengthCompletesWhenTheWorkerDiesAfterIt) {
  request_.mutable_sampling()->set_max_tokens(3);
  const Id first = Start();
  Chunk(first, "one two three", 3);
  GenerationAttempts::EndActions end = Fail(first, absl::UnavailableError("connection reset"));
  ASSERT_TRUE(end.complete.has_value());
  EXPECT_TRUE(end.complete->ok());
  EXPECT_TRUE(end.by_length);
  EXPECT_FALSE(end.start.has_value());
  EXPECT_THAT(recovery().events(), IsEmpty());
}

TEST_F(GenerationAttemptsTest, AnEndWithNothingLeftToDecideDoesNothing) {
  const Id first = Start();
  Chunk(first, "x", 1);
  ASSERT_TRUE(
      attempts_.OnEnd(first, {.status = absl::OkStatus(), .worker_fault = false, .stalled = false})
          .complete.has_value());
  // Unknown (already ended) attempts are ignored.
  GenerationAttempts::EndActions end = Fail(first, absl::UnavailableError("late"));
  EXPECT_FALSE(end.complete.has_value());
  EXPECT_FALSE(end.start.has_value());
  EXPECT_FALSE(attempts_.ReadCommitted().has_value());
}

// ---- Retries and failovers ----

TEST_F(GenerationAttemptsTest, AFailureBeforeAnythingWasRelayedIsRetriedElsewhere) {
  const Id first = Start();
  GenerationAttempts::EndActions end = Fail(first, absl::UnavailableError("connection refused"));
  EXPECT_FALSE(end.complete.has_value());
  ASSERT_TRUE(end.start.has_value());
  EXPECT_NE(end.start->id, first);
  EXPECT_EQ(end.start->target.address, "10.0.0.2:7101");
  EXPECT_FALSE(end.start->hedge);
  EXPECT_EQ(end.start->request().SerializeAsString(), request_.SerializeAsString());
  EXPECT_EQ(env_.retries_left, 99);
  EXPECT_THAT(env_.picks, ElementsAre(ElementsAre("10.0.0.1:7101")));
  EXPECT_THAT(env_.counters, ElementsAre("retry qwen worker_error"));
  EXPECT_EQ(recovery().retries(), 1);
  EXPECT_THAT(recovery().events(),
              ElementsAre("retry: 10.0.0.1:7101 UNAVAILABLE: connection refused -> qwen at "
                          "10.0.0.2:7101"));
  EXPECT_TRUE(HasRecovery(recovery()));

  // The retry answers: it is committed and completes the call.
  EXPECT_TRUE(Chunk(end.start->id, "hi", 1).committed_now);
  EXPECT_EQ(recovery().final_worker(), "10.0.0.2:7101");
  EXPECT_TRUE(attempts_
                  .OnEnd(end.start->id,
                         {.status = absl::OkStatus(), .worker_fault = false, .stalled = false})
                  .complete->ok());
}

TEST_F(GenerationAttemptsTest, AFullQueueIsRetriedAndCappedAtTheNewModelsLimit) {
  env_.workers.erase(env_.workers.begin() + 1);  // only nemotron (max_output_tokens 6) left
  const Id first = Start();
  GenerationAttempts::EndActions end =
      Fail(first, absl::ResourceExhaustedError("queue full"), /*worker_fault=*/false);
  ASSERT_TRUE(end.start.has_value());
  EXPECT_EQ(end.start->target.model, "nemotron");
  EXPECT_EQ(end.start->request().sampling().max_tokens(), 6);
  EXPECT_THAT(env_.counters, ElementsAre("retry nemotron resource_exhausted"));
  EXPECT_THAT(recovery().events(),
              ElementsAre("retry: 10.0.0.1:7101 RESOURCE_EXHAUSTED: queue full -> nemotron at "
                          "10.0.0.3:7101"));
}

TEST_F(GenerationAttemptsTest, AMidStreamFailoverContinuesTheRelayedText) {
  env_.retries_left = 0;  // failovers are not budgeted
  const Id first = Start();
  Chunk(first, "Hello", 2);
  Chunk(first, ", wor", 2);
  GenerationAttempts::EndActions end = Fail(first, absl::UnavailableError("worker died"));
  ASSERT_TRUE(end.start.has_value());
  const tandem::v1::WorkerGenerateRequest& r = end.start->request();
  EXPECT_TRUE(r.continue_final_message());
  ASSERT_EQ(r.messages_size(), 2);
  EXPECT_EQ(r.messages(1).role(), "assistant");
  ASSERT_EQ(r.messages(1).content_size(), 1);
  EXPECT_EQ(r.messages(1).content(0).text(), "Hello, wor");
  EXPECT_EQ(r.sampling().max_tokens(), 6);  // 10 less the 4 relayed
  EXPECT_EQ(recovery().failovers(), 1);
  EXPECT_EQ(recovery().retries(), 0);
  EXPECT_THAT(env_.counters, ElementsAre("failover qwen->qwen"));
  EXPECT_THAT(recovery().events(),
              ElementsAre("failover after 4 tokens: 10.0.0.1:7101 UNAVAILABLE: worker died -> "
                          "qwen at 10.0.0.2:7101"));

  // The continuation's chunks are relayed after the first's; a second failover excludes both.
  EXPECT_TRUE(Chunk(end.start->id, "ld", 1).committed_now);
  GenerationAttempts::EndActions again = Fail(end.start->id, absl::UnavailableError("again"));
  ASSERT_TRUE(again.start.has_value());
  EXPECT_EQ(again.start->target.model, "nemotron");
  EXPECT_EQ(again.start->request().messages(1).content(0).text(), "Hello, world");
  EXPECT_EQ(again.start->request().sampling().max_tokens(), 5);
  EXPECT_THAT(env_.picks.back(), ElementsAre("10.0.0.1:7101", "10.0.0.2:7101"));
}

TEST_F(GenerationAttemptsTest, HiddenWorkersAreNotNamed) {
  const Id first = Start(/*max_attempts=*/3, /*show_workers=*/false);
  GenerationAttempts::EndActions end = Fail(first, absl::UnavailableError("ipv4:10.0.0.1 reset"));
  ASSERT_TRUE(end.start.has_value());
  EXPECT_THAT(recovery().events(),
              ElementsAre("retry: a worker UNAVAILABLE: the worker failed -> qwen at a worker"));
}

// ---- Giving up ----

TEST_F(GenerationAttemptsTest, GivesUpWhenTheCallerIsGone) {
  env_.caller_gone = true;
  const Id first = Start();
  GenerationAttempts::EndActions end = Fail(first, absl::UnavailableError("reset"));
  EXPECT_FALSE(end.start.has_value());
  ASSERT_TRUE(end.complete.has_value());
  EXPECT_EQ(*end.complete, absl::UnavailableError("reset"));
  EXPECT_THAT(recovery().events(), IsEmpty());
  EXPECT_THAT(env_.picks, IsEmpty());
}

TEST_F(GenerationAttemptsTest, GivesUpOnAnErrorThatIsNotRetryable) {
  const Id first = Start();
  GenerationAttempts::EndActions end =
      Fail(first, absl::InvalidArgumentError("bad prompt"), /*worker_fault=*/false);
  ASSERT_TRUE(end.complete.has_value());
  EXPECT_EQ(*end.complete, absl::InvalidArgumentError("bad prompt"));
  EXPECT_THAT(recovery().events(), IsEmpty());
}

TEST_F(GenerationAttemptsTest, AnAttemptEndingWellWithoutAChunkIsTheEmptyAnswer) {
  const Id first = Start();
  GenerationAttempts::EndActions end =
      attempts_.OnEnd(first, {.status = absl::OkStatus(), .worker_fault = false, .stalled = false});
  ASSERT_TRUE(end.complete.has_value());
  EXPECT_TRUE(end.complete->ok());
  EXPECT_FALSE(end.start.has_value());
}

TEST_F(GenerationAttemptsTest, GivesUpAtMaxAttempts) {
  const Id first = Start(/*max_attempts=*/2);
  GenerationAttempts::EndActions retry = Fail(first, absl::UnavailableError("reset"));
  ASSERT_TRUE(retry.start.has_value());
  GenerationAttempts::EndActions end = Fail(retry.start->id, absl::UnavailableError("reset again"));
  EXPECT_FALSE(end.start.has_value());
  ASSERT_TRUE(end.complete.has_value());
  EXPECT_EQ(*end.complete, absl::UnavailableError("reset again (after 2 attempts)"));
  EXPECT_EQ(recovery().events(1),
            "10.0.0.2:7101 UNAVAILABLE: reset again; no attempts left (--max_attempts)");
}

TEST_F(GenerationAttemptsTest, GivesUpWithNoOtherWorker) {
  env_.workers.resize(1);
  const Id first = Start();
  GenerationAttempts::EndActions end = Fail(first, absl::UnavailableError("reset"));
  ASSERT_TRUE(end.complete.has_value());
  EXPECT_EQ(*end.complete,
            absl::UnavailableError(
                "reset; no other worker: model 'qwen' has no usable worker; retry later"));
  EXPECT_THAT(recovery().events(),
              ElementsAre("10.0.0.1:7101 UNAVAILABLE: reset; nowhere else to go"));
}

TEST_F(GenerationAttemptsTest, GivesUpWhenTheRetryBudgetIsSpent) {
  env_.retries_left = 0;
  const Id first = Start();
  GenerationAttempts::EndActions end = Fail(first, absl::UnavailableError("reset"));
  ASSERT_TRUE(end.complete.has_value());
  EXPECT_EQ(*end.complete, absl::UnavailableError("reset (retry budget exhausted; not retried)"));
  EXPECT_THAT(recovery().events(),
              ElementsAre("10.0.0.1:7101 UNAVAILABLE: reset; retry budget exhausted"));
  EXPECT_THAT(env_.counters, ElementsAre("retry budget exhausted"));
  EXPECT_EQ(recovery().retries(), 0);
}

TEST_F(GenerationAttemptsTest, ACancelledCallCancelsItsAttemptsAndRecoversNothing) {
  const Id first = Start();
  EXPECT_THAT(attempts_.Cancel(), ElementsAre(first));
  EXPECT_FALSE(attempts_.OnHedgeDue().has_value());
  EXPECT_FALSE(attempts_.CheckStalls().watch_on);
  GenerationAttempts::EndActions end =
      Fail(first, absl::CancelledError("cancelled"), /*worker_fault=*/false);
  ASSERT_TRUE(end.complete.has_value());
  EXPECT_EQ(end.complete->code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(end.start.has_value());
}

// ---- Hedging ----

TEST_F(GenerationAttemptsTest, AHedgeRacesTheFirstAttemptAndTheFirstChunkWins) {
  const Id first = Start();
  std::optional<GenerationAttempts::NewAttempt> hedge = attempts_.OnHedgeDue();
  ASSERT_TRUE(hedge.has_value());
  EXPECT_TRUE(hedge->hedge);
  EXPECT_EQ(hedge->target.address, "10.0.0.2:7101");
  EXPECT_THAT(env_.picks, ElementsAre(ElementsAre("10.0.0.1:7101")));
  EXPECT_EQ(env_.hedges_held, 1);
  EXPECT_TRUE(recovery().hedged());
  EXPECT_THAT(recovery().events(),
              ElementsAre("hedge: no first token after 0.5s -> qwen at 10.0.0.2:7101"));
  // Two attempts live: no second hedge.
  EXPECT_FALSE(attempts_.OnHedgeDue().has_value());

  GenerationAttempts::ChunkActions won = Chunk(hedge->id, "Hi", 1);
  EXPECT_TRUE(won.relay);
  EXPECT_TRUE(won.committed_now);
  EXPECT_THAT(won.cancel, ElementsAre(first));
  EXPECT_EQ(env_.hedges_held, 0);  // the race is decided: its unit is free
  EXPECT_TRUE(recovery().hedge_won());
  EXPECT_EQ(recovery().events(1), "hedge answered first: 10.0.0.2:7101");
  EXPECT_THAT(env_.counters, ElementsAre("hedge qwen won"));

  // The lost copy's chunks and end decide nothing.
  GenerationAttempts::ChunkActions late = Chunk(first, "Hello", 1);
  EXPECT_FALSE(late.relay);
  EXPECT_FALSE(late.committed_now);
  GenerationAttempts::EndActions lost = Fail(first, absl::CancelledError("cancelled"));
  EXPECT_FALSE(lost.complete.has_value());
  EXPECT_FALSE(lost.start.has_value());
  EXPECT_TRUE(
      attempts_
          .OnEnd(hedge->id, {.status = absl::OkStatus(), .worker_fault = false, .stalled = false})
          .complete->ok());
  EXPECT_EQ(recovery().final_worker(), "10.0.0.2:7101");
}

TEST_F(GenerationAttemptsTest, TheFirstAttemptCanWinTheRace) {
  const Id first = Start();
  std::optional<GenerationAttempts::NewAttempt> hedge = attempts_.OnHedgeDue();
  ASSERT_TRUE(hedge.has_value());
  GenerationAttempts::ChunkActions won = Chunk(first, "Hi", 1);
  EXPECT_THAT(won.cancel, ElementsAre(hedge->id));
  EXPECT_FALSE(recovery().hedge_won());
  EXPECT_EQ(recovery().events(1), "first attempt answered first: 10.0.0.1:7101");
  EXPECT_THAT(env_.counters, ElementsAre("hedge qwen lost"));
  // The hedge's unit went back when the race was decided, not twice when it ends.
  EXPECT_EQ(env_.hedges_held, 0);
  Fail(hedge->id, absl::CancelledError("cancelled"));
  EXPECT_EQ(env_.hedges_held, 0);
}

TEST_F(GenerationAttemptsTest, AHedgeCopyFailingLeavesTheRaceToTheOther) {
  const Id first = Start();
  std::optional<GenerationAttempts::NewAttempt> hedge = attempts_.OnHedgeDue();
  ASSERT_TRUE(hedge.has_value());
  GenerationAttempts::EndActions end = Fail(hedge->id, absl::UnavailableError("reset"));
  EXPECT_FALSE(end.complete.has_value());
  EXPECT_FALSE(end.start.has_value());
  EXPECT_EQ(env_.hedges_held, 0);
  // The first then fails too: recovered, away from both workers.
  GenerationAttempts::EndActions retry = Fail(first, absl::UnavailableError("reset"));
  ASSERT_TRUE(retry.start.has_value());
  EXPECT_EQ(retry.start->target.address, "10.0.0.3:7101");
  EXPECT_THAT(env_.picks.back(), ElementsAre("10.0.0.2:7101", "10.0.0.1:7101"));
}

TEST_F(GenerationAttemptsTest, AHedgeWithoutABudgetUnitIsRefused) {
  env_.hedges_left = 0;
  Start();
  EXPECT_FALSE(attempts_.OnHedgeDue().has_value());
  EXPECT_TRUE(recovery().hedge_refused());
  EXPECT_FALSE(recovery().hedged());
  EXPECT_THAT(env_.counters, ElementsAre("retry budget exhausted"));
  EXPECT_THAT(recovery().events(),
              ElementsAre("hedge refused: no first token after 0.5s, but the retry budget's "
                          "hedges are all in flight (--retry_budget_ratio)"));
}

TEST_F(GenerationAttemptsTest, AHedgeWithNowhereToGoIsSkipped) {
  env_.workers.resize(1);
  Start();
  EXPECT_FALSE(attempts_.OnHedgeDue().has_value());
  EXPECT_FALSE(recovery().hedge_refused());
  EXPECT_EQ(env_.hedges_left, 100);
  EXPECT_THAT(recovery().events(),
              ElementsAre("hedge skipped: no first token after 0.5s, but no other worker can "
                          "take the request"));
}

TEST_F(GenerationAttemptsTest, NoHedgeAfterTheFirstToken) {
  const Id first = Start();
  Chunk(first, "Hi", 1);
  EXPECT_FALSE(attempts_.OnHedgeDue().has_value());
  EXPECT_THAT(env_.picks, IsEmpty());
  EXPECT_THAT(recovery().events(), IsEmpty());
}

TEST_F(GenerationAttemptsTest, NoHedgeWithoutAnAttemptLeft) {
  Start(/*max_attempts=*/1);
  EXPECT_FALSE(attempts_.OnHedgeDue().has_value());
  EXPECT_THAT(env_.picks, IsEmpty());
  EXPECT_THAT(recovery().events(), IsEmpty());
}

TEST_F(GenerationAttemptsTest, AHedgeIsCappedAtItsModelsLimit) {
  env_.workers = {env_.workers[0], env_.workers[2]};  // nemotron: max_output_tokens 6
  Start();
  std::optional<GenerationAttempts::NewAttempt> hedge = attempts_.OnHedgeDue();
  ASSERT_TRUE(hedge.has_value());
  EXPECT_EQ(hedge->request().sampling().max_tokens(), 6);
}

// ---- The stall watch ----

TEST_F(GenerationAttemptsTest, ACommittedReadWaitingPastTheStallTimeoutIsGivenUp) {
  const Id first = Start();
  Chunk(first, "Hi", 1);
  EXPECT_EQ(attempts_.StallTimeout(), seconds(5));  // one token: the floor
  ASSERT_EQ(attempts_.ReadCommitted(), first);
  env_.now += seconds(4);
  GenerationAttempts::StallCheck check = attempts_.CheckStalls();
  EXPECT_TRUE(check.watch_on);
  EXPECT_FALSE(check.cancel.has_value());
  EXPECT_EQ(check.next, seconds(1));
  EXPECT_FALSE(attempts_.CancelledForStall(first));

  env_.now += seconds(1);
  check = attempts_.CheckStalls();
  EXPECT_TRUE(check.watch_on);
  EXPECT_EQ(check.cancel, first);
  EXPECT_EQ(check.next, seconds(5));
  EXPECT_THAT(env_.counters, ElementsAre("stall qwen"));
  EXPECT_TRUE(attempts_.CancelledForStall(first));
  // Found once: the next check waits for the failover.
  EXPECT_FALSE(attempts_.CheckStalls().cancel.has_value());

  // Its end (CANCELLED by us) is failed over as a dead worker's.
  GenerationAttempts::EndActions end = attempts_.OnEnd(
      first, {.status = absl::CancelledError("cancelled"), .worker_fault = false, .stalled = true});
  ASSERT_TRUE(end.start.has_value());
  EXPECT_TRUE(end.start->request().continue_final_message());
  EXPECT_THAT(recovery().events(),
              ElementsAre("failover after 1 tokens: 10.0.0.1:7101 UNAVAILABLE: stalled: no "
                          "token within the stall timeout (--stall_timeout_min, "
                          "--stall_timeout_multiple) -> qwen at 10.0.0.2:7101"));
}

TEST_F(GenerationAttemptsTest, OnlyAnOutstandingReadIsMeasured) {
  const Id first = Start();
  Chunk(first, "Hi", 1);
  // Relaying: no read outstanding.
  env_.now += seconds(60);
  GenerationAttempts::StallCheck check = attempts_.CheckStalls();
  EXPECT_FALSE(check.cancel.has_value());
  EXPECT_EQ(check.next, seconds(5));
  // A read that ended (end of stream) is not waiting either.
  attempts_.ReadCommitted();
  attempts_.ReadEnded(first);
  env_.now += seconds(60);
  EXPECT_FALSE(attempts_.CheckStalls().cancel.has_value());
  // A chunk ends the wait.
  attempts_.ReadCommitted();
  env_.now += seconds(3);
  Chunk(first, "!", 1);
  env_.now += seconds(60);
  EXPECT_FALSE(attempts_.CheckStalls().cancel.has_value());
}

TEST_F(GenerationAttemptsTest, TheStallTimeoutFollowsTheTimePerToken) {
  const Id first = Start();
  env_.now += seconds(1);
  Chunk(first, "a", 1);
  env_.now += seconds(2);
  Chunk(first, "bc", 2);  // 2 s for 2 more tokens: 1 s per token after the first
  EXPECT_EQ(attempts_.StallTimeout(), seconds(20));
  attempts_.ReadCommitted();
  env_.now += seconds(19);
  EXPECT_EQ(attempts_.CheckStalls().next, seconds(1));
  env_.now += seconds(1);
  EXPECT_EQ(attempts_.CheckStalls().cancel, first);
}

TEST_F(GenerationAttemptsTest, BeforeTheFirstTokenOnlyAnUnresponsiveWorkerIsGivenUp) {
  const Id first = Start();
  // A long prefill is no stall.
  env_.now += seconds(600);
  GenerationAttempts::StallCheck check = attempts_.CheckStalls();
  EXPECT_FALSE(check.cancel.has_value());
  EXPECT_EQ(check.next, seconds(5));
  // Silent, but no other worker of the model could take it: waiting is the better bet.
  env_.unresponsive = {"10.0.0.1:7101"};
  env_.another_usable = false;
  EXPECT_FALSE(attempts_.CheckStalls().cancel.has_value());
  // Silent with another worker usable: given up, and retried there.
  env_.another_usable = true;
  check = attempts_.CheckStalls();
  EXPECT_EQ(check.cancel, first);
  EXPECT_THAT(env_.counters, ElementsAre("stall qwen"));
  GenerationAttempts::EndActions end = attempts_.OnEnd(
      first, {.status = absl::CancelledError("cancelled"), .worker_fault = false, .stalled = true});
  ASSERT_TRUE(end.start.has_value());
  EXPECT_FALSE(end.start->request().continue_final_message());
  EXPECT_EQ(recovery().retries(), 1);
}

TEST_F(GenerationAttemptsTest, AContinuationGetsTheFirstTokenTimeout) {
  const Id first = Start();
  env_.now += seconds(1);  // the answer's first token after 1 s: the timeout is 20 s
  Chunk(first, "a", 1);
  GenerationAttempts::EndActions end = Fail(first, absl::UnavailableError("died"));
  ASSERT_TRUE(end.start.has_value());
  const Id next = end.start->id;
  env_.now += seconds(15);
  GenerationAttempts::StallCheck check = attempts_.CheckStalls();
  EXPECT_FALSE(check.cancel.has_value());
  EXPECT_EQ(check.next, seconds(5));  // the stall timeout is the lower
  env_.now += seconds(4);
  EXPECT_EQ(attempts_.CheckStalls().next, seconds(1));
  env_.now += milliseconds(1000);
  EXPECT_EQ(attempts_.CheckStalls().cancel, next);
}

TEST_F(GenerationAttemptsTest, TheCallerCancellingIsNotAStall) {
  const Id first = Start();
  Chunk(first, "Hi", 1);
  attempts_.ReadCommitted();
  env_.now += seconds(5);
  ASSERT_EQ(attempts_.CheckStalls().cancel, first);
  attempts_.Cancel();
  EXPECT_FALSE(attempts_.CancelledForStall(first));
}

}  // namespace
}  // namespace tandem::gateway
