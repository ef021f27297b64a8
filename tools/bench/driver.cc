#include "tools/bench/driver.h"

#include <random>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/client_tls_flags.h"
#include "nlohmann/json.hpp"
#include "tools/bench/http_stream_call.h"

namespace tandem::bench {
namespace {

using tandem::v1::GenerateResponse;
using tandem::v1::GenerateStreamChunk;
using tandem::v1::WorkerGenerateChunk;

// Tokens and recovery of either stream's chunks.
int ChunkTokens(const WorkerGenerateChunk& c) { return c.tokens(); }
int ChunkTokens(const GenerateStreamChunk&) { return 0; }
int FinalTokens(const WorkerGenerateChunk& c) { return c.completion_tokens(); }
int FinalTokens(const GenerateStreamChunk& c) { return c.usage().completion_tokens(); }
const tandem::v1::Recovery* ChunkRecovery(const WorkerGenerateChunk&) { return nullptr; }
const tandem::v1::Recovery* ChunkRecovery(const GenerateStreamChunk& c) {
  return c.has_recovery() ? &c.recovery() : nullptr;
}

// Calls. Each object owns its context and deletes itself when gRPC reports the end.

// A server-streaming call (Gateway.GenerateStream or Worker.Generate).
template <typename Chunk>
class StreamCall final : public grpc::ClientReadReactor<Chunk> {
 public:
  StreamCall(Driver* driver, Clock::time_point scheduled) : driver_(driver), scheduled_(scheduled) {
    tandem::AddApiKey(&context_);
    context_.set_deadline(std::chrono::system_clock::now() +
                          absl::ToChronoNanoseconds(driver->timeout()));
  }
  void Start(size_t n) {
    if constexpr (std::is_same_v<Chunk, WorkerGenerateChunk>) {
      driver_->worker_stub(n)->async()->Generate(&context_, &driver_->worker_request(), this);
    } else {
      driver_->gateway_stub(n)->async()->GenerateStream(&context_, &driver_->gateway_request(),
                                                        this);
    }
    this->StartRead(&chunk_);
    this->StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    const Clock::time_point now = Clock::now();
    if (!chunk_.text().empty()) {
      if (first_ == Clock::time_point{}) {
        first_ = now;
      } else {
        gaps_.push_back(Ms(now - last_text_));
      }
      last_text_ = now;
    }
    tokens_ += ChunkTokens(chunk_);
    if (FinalTokens(chunk_) > 0) final_tokens_ = FinalTokens(chunk_);
    if (!driver_->text_key().empty()) {
      text_ += chunk_.text();
      if (const tandem::v1::Recovery* r = ChunkRecovery(chunk_)) recovery_ = *r;
    }
    this->StartRead(&chunk_);
  }
  void OnDone(const grpc::Status& status) override {
    const int tokens = final_tokens_ > 0 ? final_tokens_ : tokens_;
    if (status.ok() && !driver_->text_key().empty()) driver_->AddText(text_, recovery_);
    driver_->Done(status, scheduled_, first_, Clock::now(), tokens, &gaps_);
    delete this;
  }

 private:
  Driver* const driver_;
  const Clock::time_point scheduled_;
  grpc::ClientContext context_;
  Chunk chunk_;
  Clock::time_point first_{}, last_text_{};
  int tokens_ = 0, final_tokens_ = 0;
  std::vector<double> gaps_;  // ms between text chunks
  std::string text_;          // --check_text only
  tandem::v1::Recovery recovery_;
};

// Gateway.Generate.
class UnaryCall {
 public:
  UnaryCall(Driver* driver, Clock::time_point scheduled) : driver_(driver), scheduled_(scheduled) {
    tandem::AddApiKey(&context_);
    context_.set_deadline(std::chrono::system_clock::now() +
                          absl::ToChronoNanoseconds(driver->timeout()));
  }
  void Start(size_t n) {
    driver_->gateway_stub(n)->async()->Generate(
        &context_, &driver_->gateway_request(), &response_, [this](grpc::Status status) {
          if (status.ok() && !driver_->text_key().empty()) {
            driver_->AddText(response_.text(), response_.recovery());
          }
          std::vector<double> none;
          driver_->Done(status, scheduled_, Clock::time_point{}, Clock::now(),
                        response_.usage().completion_tokens(), &none);
          delete this;
        });
  }

 private:
  Driver* const driver_;
  const Clock::time_point scheduled_;
  grpc::ClientContext context_;
  GenerateResponse response_;
};

}  // namespace

Driver::Driver(const RunSpec& spec, std::vector<std::shared_ptr<grpc::Channel>> channels,
               const DriverOptions& options)
    : spec_(spec), options_(options) {
  for (auto& ch : channels) {
    gateway_stubs_.push_back(tandem::v1::Gateway::NewStub(ch));
    worker_stubs_.push_back(tandem::v1::Worker::NewStub(ch));
  }
  const int words = PromptWords(spec.prompt).value_or(16);
  auto* m = gateway_request_.add_messages();
  m->set_role("user");
  m->add_content()->set_text(PromptText(words));
  gateway_request_.mutable_sampling()->set_max_tokens(spec.max_tokens);
  if (!spec.model.empty()) gateway_request_.mutable_hints()->set_model(spec.model);
  if (options_.text_check != nullptr) {
    gateway_request_.mutable_sampling()->set_temperature(0);
    // Names the request: the prompt follows from its size, and nothing else varies.
    text_key_ =
        absl::StrCat(TargetName(spec.target), ", ", spec.prompt, " prompt, max_tokens ",
                     spec.max_tokens, spec.model.empty() ? ", routed" : ", model ", spec.model);
  }
  *worker_request_.mutable_messages() = gateway_request_.messages();
  *worker_request_.mutable_sampling() = gateway_request_.sampling();
  nlohmann::json body = {{"model", spec.model.empty() ? "auto" : spec.model},
                         {"messages", {{{"role", "user"}, {"content", PromptText(words)}}}},
                         {"max_tokens", spec.max_tokens},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}},
                         {"reasoning_effort", "none"}};
  if (options_.text_check != nullptr) body["temperature"] = 0;
  openai_body_ = body.dump();
}

RunResult Driver::Run() {
  RunResult result;
  result.spec = spec_;
  const Clock::time_point start = Clock::now();
  const Clock::time_point end =
      start + std::chrono::nanoseconds(absl::ToInt64Nanoseconds(spec_.duration));
  end_ = end;
  if (spec_.rate > 0) {
    RunOpenLoop(start, end);
  } else {
    {
      absl::MutexLock lock(&mu_);
      remaining_ = spec_.requests > 0 ? spec_.requests : -1;
    }
    for (int i = 0; i < spec_.concurrency; ++i) {
      if (!TryStartClosedLoopCall()) break;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    issuing_done_ = true;
    mu_.Await(absl::Condition(
        +[](Driver* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu_) { return d->inflight_ == 0; }, this));
    result.issued = issued_;
  }
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  recorder_.Fill(&result);
  return result;
}

void Driver::Done(const grpc::Status& status, Clock::time_point scheduled, Clock::time_point first,
                  Clock::time_point last, int tokens, std::vector<double>* gaps) {
  const double e2e = Ms(last - scheduled);
  const double ttft =
      (spec_.api == Api::kStream && first != Clock::time_point{}) ? Ms(first - scheduled) : -1;
  recorder_.Add(status, e2e, ttft, tokens, *gaps);
  // A closed loop hands this call's slot to the next one without releasing it, so the count
  // in flight reaches zero only when nothing will touch the driver again.
  size_t n = 0;
  {
    absl::MutexLock lock(&mu_);
    if (spec_.rate > 0 || !MayStartLocked()) {
      --inflight_;
      return;
    }
    if (remaining_ > 0) --remaining_;
    n = issued_++;
  }
  StartCall(Clock::now(), n);
}

void Driver::StartCall(Clock::time_point scheduled, size_t n) {
  if (spec_.target == Target::kOpenAi) {
    StartHttpStreamCall(this, scheduled);
  } else if (spec_.target == Target::kWorker) {
    (new StreamCall<WorkerGenerateChunk>(this, scheduled))->Start(n);
  } else if (spec_.api == Api::kStream) {
    (new StreamCall<GenerateStreamChunk>(this, scheduled))->Start(n);
  } else {
    (new UnaryCall(this, scheduled))->Start(n);
  }
}

bool Driver::MayStartLocked() {
  if (remaining_ == 0) return false;
  return remaining_ > 0 || Clock::now() < end_;
}

bool Driver::TryStartClosedLoopCall() {
  size_t n = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!MayStartLocked()) return false;
    if (remaining_ > 0) --remaining_;
    ++inflight_;
    n = issued_++;
  }
  StartCall(Clock::now(), n);
  return true;
}

void Driver::RunOpenLoop(Clock::time_point start, Clock::time_point end) {
  std::mt19937_64 rng(spec_.seed);
  std::exponential_distribution<double> exp(spec_.rate);
  const double fixed_gap = 1.0 / spec_.rate;  // seconds
  const int64_t limit = spec_.requests > 0 ? spec_.requests : -1;
  double t = 0;  // seconds from start
  for (int64_t i = 0; limit < 0 || i < limit; ++i) {
    t += spec_.poisson ? exp(rng) : fixed_gap;
    const Clock::time_point at = start + std::chrono::nanoseconds(static_cast<int64_t>(t * 1e9));
    if (limit < 0 && at >= end) break;
    // Sleep, never spin: on a 2-core machine a spinning client would take a core from the
    // processes it measures. The timer slack is set to 1 ns (main), so a sleep ends within a
    // few microseconds of its time; arrivals already due are issued at once.
    if (const Clock::time_point now = Clock::now(); now < at) std::this_thread::sleep_for(at - now);
    size_t n = 0;
    {
      absl::MutexLock lock(&mu_);
      if (inflight_ >= options_.max_inflight) {
        recorder_.AddDropped();
        continue;
      }
      ++inflight_;
      n = issued_++;
    }
    StartCall(at, n);
  }
}

}  // namespace tandem::bench
