#include "gateway/dispatch/generation_attempts.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log_text.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {
namespace {

constexpr char kStalledMessage[] =
    "stalled: no token within the stall timeout (--stall_timeout_min, "
    "--stall_timeout_multiple)";

}  // namespace

bool HasRecovery(const tandem::v1::Recovery& r) {
  return r.retries() > 0 || r.failovers() > 0 || r.hedged() || r.events_size() > 0;
}

std::string RecoveryForLog(const tandem::v1::Recovery& r) {
  if (!HasRecovery(r)) return "";
  return absl::StrCat(" retries=", r.retries(), " failovers=", r.failovers(),
                      " hedged=", r.hedged() ? "yes" : "no", " final_worker=", r.final_worker());
}

GenerationAttempts::NewAttempt GenerationAttempts::Start(Options options, AttemptTarget first) {
  options_ = std::move(options);
  return Add(std::move(first), std::nullopt, /*hedge=*/false);
}

GenerationAttempts::ChunkActions GenerationAttempts::OnChunk(
    AttemptId id, const tandem::v1::WorkerGenerateChunk& chunk) {
  ChunkActions actions;
  Attempt* a = Find(id);
  if (a == nullptr) return actions;
  a->reading_since.reset();
  if (committed_ != id) {
    // A copy that lost the race (already cancelled): drained to its end. Lost stays lost when
    // the winner then fails: a failover continues the answer, not this copy.
    if (a->lost || committed_.has_value() || done_) return actions;
    Commit(*a, &actions.cancel);
    actions.committed_now = true;
  }
  actions.relay = true;
  CountRelayed(chunk);
  return actions;
}

void GenerationAttempts::Commit(const Attempt& winner, std::vector<AttemptId>* losers) {
  committed_ = winner.id;
  recovery_.set_final_worker(winner.target.address);
  recovery_.set_final_model(winner.target.model);
  for (Attempt& o : live_) {
    if (o.id == winner.id) continue;
    o.lost = true;
    losers->push_back(o.id);
  }
  if (recovery_.hedged() && !hedge_decided_) {
    // The race's first token; a failover committing later is not a hedge outcome.
    hedge_decided_ = true;
    // The race is decided: the winner is an ordinary attempt now, and its unit of the hedge
    // budget is free for another request's rescue.
    for (Attempt& o : live_) ReleaseHedgeUnit(&o);
    recovery_.set_hedge_won(winner.hedge);
    env_->CountHedge(winner.target.model, winner.hedge);
    recovery_.add_events(absl::StrCat(winner.hedge ? "hedge" : "first attempt",
                                      " answered first: ", Shown(winner.target)));
  }
}

void GenerationAttempts::CountRelayed(const tandem::v1::WorkerGenerateChunk& chunk) {
  absl::StrAppend(&relayed_text_, chunk.text());
  if (chunk.tokens() > 0) {
    const Clock::time_point now = env_->Now();
    if (relayed_tokens_ == 0) {
      first_token_ = now;
      first_token_delay_ = now - options_.arrival;
    } else {
      time_per_token_ = (now - first_token_) / (relayed_tokens_ + chunk.tokens() - 1);
    }
  }
  relayed_tokens_ += chunk.tokens();
}

std::optional<GenerationAttempts::AttemptId> GenerationAttempts::ReadCommitted() {
  if (!committed_.has_value()) return std::nullopt;
  // From here until the next chunk, the worker is the one keeping the stream waiting.
  if (Attempt* a = Find(*committed_)) a->reading_since = env_->Now();
  return committed_;
}

void GenerationAttempts::ReadEnded(AttemptId id) {
  if (Attempt* a = Find(id)) a->reading_since.reset();
}

bool GenerationAttempts::CancelledForStall(AttemptId id) const {
  const Attempt* a = Find(id);
  // The caller's own cancel is not the worker's fault.
  return a != nullptr && a->stalled && !cancelled_;
}

GenerationAttempts::EndActions GenerationAttempts::OnEnd(AttemptId id, AttemptEnd end) {
  EndActions actions;
  auto it = std::find_if(live_.begin(), live_.end(), [id](const Attempt& a) { return a.id == id; });
  if (it == live_.end()) return actions;
  ReleaseHedgeUnit(&*it);
  const Attempt a = std::move(*it);
  live_.erase(it);
  const bool was_committed = committed_ == id;
  if (was_committed) committed_.reset();
  if (end.stalled) {
    // A stalled stream is recovered as a dead worker's would be.
    end.status = absl::UnavailableError(kStalledMessage);
    end.worker_fault = true;
  }
  if (done_ || a.lost || (!was_committed && committed_.has_value())) {
    // The call is over, or this copy lost the race: nothing to decide.
  } else if (end.status.ok() && was_committed) {
    done_ = true;
    actions.complete = end.status;
  } else if (std::any_of(live_.begin(), live_.end(), [](const Attempt& o) { return !o.lost; })) {
    // Failed before its first chunk while a hedge copy still races: that one carries on.
    // (A committed attempt failing with only lost copies left recovers below.)
    failed_.push_back(a.target);
  } else if (relayed_tokens_ > 0 && relayed_tokens_ >= options_.request->sampling().max_tokens()) {
    // The worker died after its last token but before its end of stream: the answer is whole,
    // ended by length. Another attempt would add a token beyond max_tokens.
    done_ = true;
    actions.by_length = true;
    actions.complete = absl::OkStatus();
  } else {
    failed_.push_back(a.target);
    absl::Status outcome = end.status;
    actions.start = Recover(a, end, &outcome);
    if (!actions.start.has_value()) {
      done_ = true;
      actions.complete = std::move(outcome);
    }
  }
  return actions;
}

std::optional<GenerationAttempts::NewAttempt> GenerationAttempts::Recover(const Attempt& failed,
                                                                          const AttemptEnd& end,
                                                                          absl::Status* outcome) {
  const absl::StatusCode code = end.status.code();
  const bool caller_gone = cancelled_ || env_->CallerGone();
  // Safe to repeat: the worker failed (not the request), or its queue was full.
  const bool retryable =
      !caller_gone && (end.worker_fault || code == absl::StatusCode::kResourceExhausted);
  if (!retryable) return std::nullopt;
  const std::string failure = absl::StrCat(
      Shown(failed.target), " ", absl::StatusCodeToString(code), ": ", WorkerError(end.status));
  if (attempts_ >= options_.max_attempts) {
    AddEvent(absl::StrCat(failure, "; no attempts left (--max_attempts)"), /*log=*/false);
    *outcome = absl::Status(
        code, absl::StrCat(WorkerError(end.status), " (after ", attempts_, " attempts)"));
    return std::nullopt;
  }
  absl::StatusOr<AttemptTarget> target = env_->PickTarget(Failed());
  if (!target.ok()) {
    AddEvent(absl::StrCat(failure, "; nowhere else to go"), /*log=*/false);
    *outcome = absl::Status(code, absl::StrCat(WorkerError(end.status),
                                               "; no other worker: ", target.status().message()));
    return std::nullopt;
  }
  // A mid-stream failover is not budgeted: its attempt continues only what is left of the
  // answer, so it adds a re-prefill, not a second decode, and --max_attempts bounds it. A retry
  // (nothing streamed yet) redoes everything, and a fleet failing fast makes many.
  if (relayed_tokens_ == 0 && !env_->TryRetry()) {
    env_->CountRetryBudgetExhausted();
    AddEvent(absl::StrCat(failure, "; retry budget exhausted"), /*log=*/false);
    *outcome = absl::Status(
        code, absl::StrCat(WorkerError(end.status), " (retry budget exhausted; not retried)"));
    return std::nullopt;
  }
  tandem::v1::WorkerGenerateRequest request = RecoveryRequest(failed, *target, code, failure);
  return Add(std::move(*target), std::move(request), /*hedge=*/false);
}

tandem::v1::WorkerGenerateRequest GenerationAttempts::RecoveryRequest(const Attempt& failed,
                                                                      const AttemptTarget& target,
                                                                      absl::StatusCode code,
                                                                      const std::string& failure) {
  tandem::v1::WorkerGenerateRequest request = *options_.request;
  int32_t max_tokens = request.sampling().max_tokens();
  if (relayed_tokens_ > 0) {
    // Mid-stream: the new worker continues the partial answer as the assistant's own text.
    auto* prefix = request.add_messages();
    prefix->set_role("assistant");
    prefix->add_content()->set_text(relayed_text_);
    request.set_continue_final_message(true);
    max_tokens = std::max(1, max_tokens - relayed_tokens_);
    recovery_.set_failovers(recovery_.failovers() + 1);
    env_->CountFailover(failed.target.model, target.model);
    AddEvent(absl::StrCat("failover after ", relayed_tokens_, " tokens: ", failure, " -> ",
                          target.model, " at ", Shown(target)),
             /*log=*/true);
  } else {
    recovery_.set_retries(recovery_.retries() + 1);
    env_->CountRetry(target.model, code == absl::StatusCode::kResourceExhausted
                                       ? "resource_exhausted"
                                       : "worker_error");
    AddEvent(absl::StrCat("retry: ", failure, " -> ", target.model, " at ", Shown(target)),
             /*log=*/true);
  }
  if (target.max_output_tokens > 0) max_tokens = std::min(max_tokens, target.max_output_tokens);
  request.mutable_sampling()->set_max_tokens(max_tokens);
  return request;
}

std::optional<GenerationAttempts::NewAttempt> GenerationAttempts::OnHedgeDue() {
  if (done_ || cancelled_ || committed_.has_value() || live_.size() != 1 ||
      attempts_ >= options_.max_attempts) {
    return std::nullopt;
  }
  std::vector<const AttemptTarget*> exclude = Failed();
  exclude.insert(exclude.begin(), &live_[0].target);
  absl::StatusOr<AttemptTarget> target = env_->PickTarget(exclude);
  if (!target.ok()) {
    AddEvent(absl::StrCat("hedge skipped: no first token after ", options_.hedge_after_seconds,
                          "s, but no other worker can take the request"),
             /*log=*/false);
    return std::nullopt;
  }
  if (!env_->TryHedge()) {
    env_->CountRetryBudgetExhausted();
    recovery_.set_hedge_refused(true);
    AddEvent(absl::StrCat("hedge refused: no first token after ", options_.hedge_after_seconds,
                          "s, but the retry budget's hedges are all in flight "
                          "(--retry_budget_ratio)"),
             /*log=*/true);
    return std::nullopt;
  }
  recovery_.set_hedged(true);
  recovery_.add_events(absl::StrCat("hedge: no first token after ", options_.hedge_after_seconds,
                                    "s -> ", target->model, " at ", Shown(*target)));
  std::optional<tandem::v1::WorkerGenerateRequest> changed;
  if (target->max_output_tokens > 0 &&
      options_.request->sampling().max_tokens() > target->max_output_tokens) {
    changed = *options_.request;
    changed->mutable_sampling()->set_max_tokens(target->max_output_tokens);
  }
  return Add(std::move(*target), std::move(changed), /*hedge=*/true);
}

GenerationAttempts::StallCheck GenerationAttempts::CheckStalls() {
  StallCheck check;
  if (done_ || cancelled_) {
    check.watch_on = false;
    return check;
  }
  const Clock::time_point now = env_->Now();
  const Clock::duration timeout = StallTimeout();
  check.next = timeout;
  Attempt* stalled = nullptr;
  if (!committed_.has_value()) {
    stalled = StalledBeforeFirstToken(now, &check.next);
  } else if (Attempt* c = Find(*committed_); c != nullptr && !c->stalled && c->reading_since) {
    const Clock::duration waited = now - *c->reading_since;
    if (waited >= timeout) {
      stalled = c;
    } else {
      check.next = timeout - waited;
    }
  }
  if (stalled != nullptr) {
    stalled->stalled = true;
    check.cancel = stalled->id;
    env_->CountStall(stalled->target.model);
    spdlog::warn(
        "request_id={} stalled: no token from {} within the stall timeout; failing "
        "over",
        options_.request_id, stalled->target.address);
  }
  return check;
}

GenerationAttempts::Attempt* GenerationAttempts::StalledBeforeFirstToken(Clock::time_point now,
                                                                         Clock::duration* next) {
  // Between a failover and its first token: the new worker re-prefills what the first one did,
  // so it gets the stall multiple of the answer's first-token time (at least the floor); a
  // worker that hangs before answering must not hold the stream to its deadline.
  const Clock::duration first = FirstTokenTimeout();
  for (Attempt& a : live_) {
    if (a.lost || a.stalled) continue;
    if (!a.continuation) {
      // Before the answer's first token a long prefill is no stall: only a worker known to be
      // silent (probes timing out, streams stalling) is given up, and only while another worker
      // of the model can take the request, instead of waiting for it until the deadline. With
      // none, waiting is the better bet: a worker that resumes answers.
      if (env_->Unresponsive(a.target) && env_->AnotherUsable(a.target)) return &a;
      *next = std::min(*next, options_.stall_timeout_min);
      continue;
    }
    const Clock::duration waited = now - a.created;
    if (waited >= first) return &a;
    *next = std::min(*next, first - waited);
  }
  return nullptr;
}

GenerationAttempts::Clock::duration GenerationAttempts::StallTimeout() const {
  return std::max<Clock::duration>(options_.stall_timeout_min,
                                   std::chrono::duration_cast<Clock::duration>(
                                       time_per_token_ * options_.stall_timeout_multiple));
}

GenerationAttempts::Clock::duration GenerationAttempts::FirstTokenTimeout() const {
  return std::max<Clock::duration>(options_.stall_timeout_min,
                                   std::chrono::duration_cast<Clock::duration>(
                                       first_token_delay_ * options_.stall_timeout_multiple));
}

std::vector<GenerationAttempts::AttemptId> GenerationAttempts::Cancel() {
  cancelled_ = true;
  std::vector<AttemptId> ids;
  for (const Attempt& a : live_) ids.push_back(a.id);
  return ids;
}

GenerationAttempts::Attempt* GenerationAttempts::Find(AttemptId id) {
  return const_cast<Attempt*>(std::as_const(*this).Find(id));
}

const GenerationAttempts::Attempt* GenerationAttempts::Find(AttemptId id) const {
  for (const Attempt& a : live_) {
    if (a.id == id) return &a;
  }
  return nullptr;
}

GenerationAttempts::NewAttempt GenerationAttempts::Add(
    AttemptTarget target, std::optional<tandem::v1::WorkerGenerateRequest> changed, bool hedge) {
  Attempt a;
  a.id = attempts_++;
  a.target = target;
  a.hedge = hedge;
  a.holds_hedge_unit = hedge;
  a.created = env_->Now();
  NewAttempt start{.id = a.id,
                   .target = std::move(target),
                   .admitted = options_.request,
                   .changed = std::move(changed),
                   .hedge = hedge};
  a.continuation = start.request().continue_final_message();
  live_.push_back(std::move(a));
  return start;
}

void GenerationAttempts::ReleaseHedgeUnit(Attempt* a) {
  if (!a->holds_hedge_unit) return;
  a->holds_hedge_unit = false;
  env_->ReleaseHedge();
}

std::vector<const AttemptTarget*> GenerationAttempts::Failed() const {
  std::vector<const AttemptTarget*> targets;
  for (const AttemptTarget& t : failed_) targets.push_back(&t);
  return targets;
}

std::string GenerationAttempts::Shown(const AttemptTarget& target) const {
  return options_.show_workers ? target.address : std::string("a worker");
}

std::string GenerationAttempts::WorkerError(const absl::Status& status) const {
  // Transport errors name the peer's address.
  return options_.show_workers ? std::string(status.message()) : "the worker failed";
}

void GenerationAttempts::AddEvent(std::string event, bool log) {
  if (log) {
    spdlog::warn("request_id={} {}", options_.request_id,
                 QuoteForLog(event, kMaxLoggedMessageBytes));
  }
  recovery_.add_events(std::move(event));
}

}  // namespace tandem::gateway
