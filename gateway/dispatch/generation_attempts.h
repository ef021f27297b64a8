#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tandem/v1/gateway.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

struct Target;  // gateway/intake/intake.h

// A worker that an attempt of a request may go to.
struct AttemptTarget {
  std::string model;
  std::string address;
  // The model's max_output_tokens as its workers report it; 0 when unknown.
  int32_t max_output_tokens = 0;
  // Where the environment starts the attempt (GenerationCall: Intake's pick); opaque here, and
  // null in tests.
  std::shared_ptr<const Target> target;
};

// Whether a request's recovery is worth reporting: it retried, failed over or hedged.
bool HasRecovery(const tandem::v1::Recovery& recovery);
// " retries=R failovers=F hedged=yes|no final_worker=W" for a request's end line; empty without
// a recovery.
std::string RecoveryForLog(const tandem::v1::Recovery& recovery);

// The decisions over one generation's worker attempts, free of gRPC: which attempt's chunks
// reach the caller, and what happens when one ends, stalls, or is slow to start. GenerationCall
// turns its calls' and timers' events into the calls below and carries out the answers.
//
// - The first chunk commits its attempt; any other copy still racing is cancelled and "lost":
//   its chunks and its end decide nothing.
// - An attempt ending with the call undecided: the answer is complete; or whole "by length" (the
//   worker died after max_tokens, before its end of stream); or a hedge copy still races and
//   carries on; or the call recovers.
// - Recovery: a retry before anything was relayed (spends the retry budget); a mid-stream
//   failover after (the new worker continues the relayed text as the assistant's own, for what
//   is left of max_tokens; not budgeted: --max_attempts bounds it); or giving up, with the
//   outcome the caller sees and an event saying why.
// - Hedging: no first token after the rule's delay with one attempt live races a second copy
//   on another worker, when the retry budget has a hedge unit for it.
// - The stall watch: a committed attempt whose worker keeps a read waiting past the stall
//   timeout is given up and failed over like a dead worker.
//
// Every event and recovery line is what the caller sees in Recovery, word for word.
//
// Not thread-safe: the owner serializes all calls (GenerationCall holds its mutex), and the
// environment is called from inside them.
class GenerationAttempts {
 public:
  using Clock = std::chrono::steady_clock;
  using AttemptId = int;

  // What the decisions need from the gateway; GenerationCall implements it, tests fake it.
  class Environment {
   public:
    virtual ~Environment() = default;
    virtual Clock::time_point Now() const = 0;
    // Another worker for the request, skipping `exclude`'s workers (Intake::PickTarget: the
    // decided model first, then its fallbacks, never a model outside the tenant's `models`); the
    // error as the caller may see it.
    virtual absl::StatusOr<AttemptTarget> PickTarget(
        const std::vector<const AttemptTarget*>& exclude) = 0;
    // The retry budget (RetryBudget): a retry spends one; a hedge holds one until released.
    virtual bool TryRetry() = 0;
    virtual bool TryHedge() = 0;
    virtual void ReleaseHedge() = 0;
    // The caller cancelled, or the deadline that workers are held to passed.
    virtual bool CallerGone() const = 0;
    // The worker is known to be silent (Endpoint::unresponsive).
    virtual bool Unresponsive(const AttemptTarget& target) const = 0;
    // A worker of the target's model other than the target's may take a request now.
    virtual bool AnotherUsable(const AttemptTarget& target) const = 0;
    // GatewayMetrics' counters of the same names.
    virtual void CountRetry(const std::string& model, const char* reason) = 0;
    virtual void CountFailover(const std::string& from_model, const std::string& to_model) = 0;
    virtual void CountHedge(const std::string& model, bool won) = 0;
    virtual void CountRetryBudgetExhausted() = 0;
    virtual void CountStall(const std::string& model) = 0;
  };

  struct Options {
    // For log lines.
    std::string request_id;
    // The request as admitted; every attempt's starts from it. Not owned: it outlives this
    // object and stays unchanged from Start on.
    const tandem::v1::WorkerGenerateRequest* request = nullptr;
    // Attempts in all, the first included (--max_attempts).
    int max_attempts = 3;
    // The rule's hedge delay, as events name it.
    double hedge_after_seconds = 0;
    // Worker addresses in events and messages (Disclosure::workers); "a worker" otherwise.
    bool show_workers = false;
    // The stall timeout: stall_timeout_multiple x the answer's mean time per token so far, at
    // least stall_timeout_min (--stall_timeout_min, --stall_timeout_multiple).
    Clock::duration stall_timeout_min{};
    double stall_timeout_multiple = 20;
    // When the caller's request arrived: the answer's time to first token counts from here.
    Clock::time_point arrival;
  };

  // An attempt to start now.
  struct NewAttempt {
    AttemptId id = 0;
    AttemptTarget target;
    // The admitted request (Options::request), sent as it is unless this attempt changes it
    // (a retry's or hedge's max_tokens, a failover's partial answer): then `changed`. The first
    // attempt never copies it.
    const tandem::v1::WorkerGenerateRequest* admitted = nullptr;
    std::optional<tandem::v1::WorkerGenerateRequest> changed;
    bool hedge = false;

    const tandem::v1::WorkerGenerateRequest& request() const {
      return changed.has_value() ? *changed : *admitted;
    }
  };

  struct ChunkActions {
    // Relay the chunk to the caller. Otherwise the copy lost the race (or the call is over):
    // read it on to its end and relay nothing.
    bool relay = false;
    // The chunk committed its attempt: no hedge is needed any more, and the stall watch starts.
    bool committed_now = false;
    // The copies that lost the race, to cancel.
    std::vector<AttemptId> cancel;
  };

  // How an attempt's call ended, as its reactor classified it.
  struct AttemptEnd {
    absl::Status status;
    // The worker failed, not the request: safe to repeat elsewhere (a full queue is too).
    bool worker_fault = false;
    // The stall watch cancelled it (CancelledForStall) and the caller is still there: recovered
    // as a dead worker's call would be.
    bool stalled = false;
  };

  struct EndActions {
    // A recovery attempt.
    std::optional<NewAttempt> start;
    // The call's outcome, once the call is over: stop the timers and complete it.
    std::optional<absl::Status> complete;
    // Before completing, relay a last chunk that ends the answer by length.
    bool by_length = false;
  };

  struct StallCheck {
    // False once the call is over or cancelled: no more checks.
    bool watch_on = true;
    // The attempt found stalled, to cancel; its end then fails it over.
    std::optional<AttemptId> cancel;
    // When to check again, from now.
    Clock::duration next{};
  };

  explicit GenerationAttempts(Environment* env) : env_(env) {}

  // The request's first attempt, to `first`.
  NewAttempt Start(Options options, AttemptTarget first);

  // A chunk of attempt `id` arrived.
  ChunkActions OnChunk(AttemptId id, const tandem::v1::WorkerGenerateChunk& chunk);
  // The committed attempt's next read starts now (the stall watch measures it); nullopt when
  // none is committed.
  std::optional<AttemptId> ReadCommitted();
  // Attempt `id`'s stream ended: no read is outstanding until its end.
  void ReadEnded(AttemptId id);
  // Whether the stall watch cancelled attempt `id` while the caller stayed.
  bool CancelledForStall(AttemptId id) const;
  // Attempt `id` ended; it is no longer live.
  EndActions OnEnd(AttemptId id, AttemptEnd end);

  // The hedge delay passed since the first attempt started: a hedge copy to start, if one is
  // due and allowed.
  std::optional<NewAttempt> OnHedgeDue();
  // The stall watch's timer fired.
  StallCheck CheckStalls();
  // The stall timeout now (the watch's first check); see Options.
  Clock::duration StallTimeout() const;

  // The caller went away: the live attempts, to cancel. Their ends then decide nothing new.
  std::vector<AttemptId> Cancel();

  const tandem::v1::Recovery& recovery() const { return recovery_; }

 private:
  struct Attempt {
    AttemptId id = 0;
    AttemptTarget target;
    bool hedge = false;
    // A mid-stream failover's: it continues the relayed answer.
    bool continuation = false;
    Clock::time_point created;
    // Cancelled because another copy committed first.
    bool lost = false;
    // Holds a hedge unit of the retry budget.
    bool holds_hedge_unit = false;
    // Cancelled by the stall watch.
    bool stalled = false;
    // When the committed attempt's outstanding read after a chunk started; the first read waits
    // on prefill instead, and is not measured.
    std::optional<Clock::time_point> reading_since;
  };

  Attempt* Find(AttemptId id);
  const Attempt* Find(AttemptId id) const;
  // `changed`: the attempt's own request, when it is not the admitted one.
  NewAttempt Add(AttemptTarget target, std::optional<tandem::v1::WorkerGenerateRequest> changed,
                 bool hedge);
  void Commit(const Attempt& winner, std::vector<AttemptId>* losers);
  void CountRelayed(const tandem::v1::WorkerGenerateChunk& chunk);
  void ReleaseHedgeUnit(Attempt* attempt);
  // After the last live attempt failed: another attempt, or nullopt with the call's outcome in
  // `outcome`.
  std::optional<NewAttempt> Recover(const Attempt& failed, const AttemptEnd& end,
                                    absl::Status* outcome);
  // The retry or failover request, with its event and counter; `failure` says what failed.
  tandem::v1::WorkerGenerateRequest RecoveryRequest(const Attempt& failed,
                                                    const AttemptTarget& target,
                                                    absl::StatusCode code,
                                                    const std::string& failure);
  // Before the committed attempt's first token: an attempt to give up, or null; lowers `next`
  // to when one may be.
  Attempt* StalledBeforeFirstToken(Clock::time_point now, Clock::duration* next);
  // A continuation's first-token timeout: the stall multiple of the answer's own first-token
  // time (the new worker re-prefills what the first did), at least the floor.
  Clock::duration FirstTokenTimeout() const;
  std::vector<const AttemptTarget*> Failed() const;
  std::string Shown(const AttemptTarget& target) const;
  std::string WorkerError(const absl::Status& status) const;
  void AddEvent(std::string event, bool log);

  Environment* const env_;
  Options options_;
  std::vector<Attempt> live_;
  std::optional<AttemptId> committed_;
  // Workers that failed this request: not picked again.
  std::vector<AttemptTarget> failed_;
  std::string relayed_text_;
  int32_t relayed_tokens_ = 0;
  int attempts_ = 0;
  bool done_ = false;
  bool hedge_decided_ = false;
  bool cancelled_ = false;
  tandem::v1::Recovery recovery_;
  // The answer's first token: when, and how long after arrival (zero before it).
  Clock::time_point first_token_;
  Clock::duration first_token_delay_{};
  // The answer's mean time per token so far (zero before its second token).
  Clock::duration time_per_token_{};
};

}  // namespace tandem::gateway
