// tandem-bench: load generator for the gateway (tandem.v1.Gateway Generate / GenerateStream) and
// for a worker directly (tandem.v1.Worker Generate), on gRPC's callback API: one process drives
// thousands of concurrent calls without a thread each.
//
//   tandem-bench --target=gateway --address=127.0.0.1:7000 --api=stream --concurrency=8
//   tandem-bench --target=worker --address=127.0.0.1:7101 --rate=1000 --arrival=poisson
//   tandem-bench ... --rates=100,1000,5000 --json=out.json --svg=out.svg
//   tandem-bench --preset=seeds --address=GATEWAY
//   tandem-bench --preset=overhead --worker_address=W --gateway_address=G --gateway_pid=PID
//
// Open loop (--rate, fixed or Poisson arrivals): latency counts from each request's scheduled
// start, so a client that falls behind shows up as latency instead of lowering the load.
// Closed loop (--concurrency): N calls in flight, each completion starts the next.
//
// --check_text (plain runs): requests are greedy (temperature 0), and the text of every OK answer
// is compared with a fault-free reference for the same request: the text of an OK answer the
// gateway neither retried nor failed over (Recovery). Against a deterministic engine (the
// synthetic one), a failed-over answer must read exactly as an uninterrupted one.

#include <grpcpp/grpcpp.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/client_tls_flags.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

ABSL_FLAG(std::string, preset, "", "'' (one run or one sweep), 'seeds' or 'overhead'");
ABSL_FLAG(std::string, target, "gateway",
          "gateway (tandem.v1.Gateway) or worker (tandem.v1.Worker)");
ABSL_FLAG(std::string, address, "127.0.0.1:7000", "HOST:PORT of the target");
ABSL_FLAG(std::string, api, "stream",
          "stream (GenerateStream; Worker.Generate) or unary (Gateway.Generate; on a worker the "
          "stream is read to its end and only end-to-end latency is reported)");
ABSL_FLAG(std::string, model, "", "pin the model (hints.model) on the gateway; '' lets it route");
ABSL_FLAG(std::string, prompt, "short",
          "prompt size: short (~16 tokens), medium (~128), long (~700)");
ABSL_FLAG(int, max_tokens, 64, "sampling.max_tokens of every request");
ABSL_FLAG(double, rate, 0, "open loop: requests per second (0: closed loop)");
ABSL_FLAG(std::string, arrival, "poisson", "open-loop arrivals: poisson or fixed");
ABSL_FLAG(int, concurrency, 1, "closed loop: calls in flight");
ABSL_FLAG(std::string, rates, "", "sweep of open-loop rates, e.g. 100,1000,5000");
ABSL_FLAG(std::string, concurrencies, "", "sweep of closed-loop concurrencies, e.g. 1,2,4,8");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(5), "length of each run (when --requests=0)");
ABSL_FLAG(int, requests, 0, "requests per run (0: run for --duration)");
ABSL_FLAG(int, warmup_requests, 50, "requests before each series, not measured");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(60), "deadline of each call");
ABSL_FLAG(int, max_inflight, 20000,
          "open loop: arrivals beyond this many in flight are dropped "
          "and counted as CLIENT_OVERLOAD");
ABSL_FLAG(int, channels, 1, "gRPC channels (TCP connections) to spread calls over");
ABSL_FLAG(uint64_t, seed, 1, "seed of Poisson arrivals");
ABSL_FLAG(std::string, json, "", "write results as JSON to this file");
ABSL_FLAG(bool, check_text, false,
          "plain runs: send greedy requests (sampling.temperature 0) and compare the text of "
          "every OK answer with a fault-free reference for the same request (an OK answer with "
          "no retry or failover in its Recovery); mismatches are counted in the output and in "
          "--json (text_check). For deterministic engines such as the synthetic one");
ABSL_FLAG(std::string, svg, "", "write a plot of latency percentiles against load to this file");
ABSL_FLAG(absl::Duration, ready_timeout, absl::Seconds(20),
          "wait this long for the target to be ready");
// Presets.
ABSL_FLAG(std::string, models, "qwen,nemotron",
          "seeds: models to pin (plus the gateway's routing)");
ABSL_FLAG(int, iterations, 5, "seeds: iterations per prompt size and per concurrency level");
ABSL_FLAG(std::string, worker_address, "", "overhead: the worker called directly");
ABSL_FLAG(std::string, gateway_address, "", "overhead: a gateway in front of that same worker");
ABSL_FLAG(int, gateway_pid, 0, "overhead: gateway process id, for its RSS (/proc/PID/status)");
ABSL_FLAG(int, streams, 512, "overhead: concurrent gateway streams checked for lost chunks");
ABSL_FLAG(bool, sweep_past_failure, false,
          "overhead: keep sweeping after the first rate that is not sustained (errors, drops or "
          "< 90% of the offered rate)");
ABSL_FLAG(double, overhead_p99_bound_ms, 1.0, "overhead: added p99 bound of the rate sweep");

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
using tandem::v1::Gateway;
using tandem::v1::GenerateRequest;
using tandem::v1::GenerateResponse;
using tandem::v1::GenerateStreamChunk;
using tandem::v1::Worker;
using tandem::v1::WorkerGenerateChunk;
using tandem::v1::WorkerGenerateRequest;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// ---------------------------------------------------------------------------------------------
// Configuration of one run.

enum class Target { kGateway, kWorker };
enum class Api { kUnary, kStream };

struct RunSpec {
  std::string label;  // series name in tables and plots, e.g. "gateway stream"
  Target target = Target::kGateway;
  std::string address;
  Api api = Api::kStream;
  std::string model;
  std::string prompt = "short";
  int max_tokens = 64;
  double rate = 0;  // > 0: open loop
  bool poisson = true;
  int concurrency = 1;
  absl::Duration duration = absl::Seconds(5);
  int requests = 0;
  uint64_t seed = 1;  // Poisson arrivals
};

std::string TargetName(Target t) { return t == Target::kGateway ? "gateway" : "worker"; }
std::string ApiName(Api a) { return a == Api::kUnary ? "unary" : "stream"; }

absl::StatusOr<int> PromptWords(const std::string& size) {
  if (size == "short") return 16;
  if (size == "medium") return 128;
  if (size == "long") return 700;
  return absl::InvalidArgumentError(
      absl::StrCat("--prompt=", size, ": expected short, medium or long"));
}

// About one token per word for BPE tokenizers, and about one for the gateway's estimate
// (4 ASCII bytes per token): short common words, each with its space.
std::string PromptText(int words) {
  static const char* kWords[] = {"the", "cat", "sat", "on", "a",   "mat", "and", "we",
                                 "ran", "to",  "see", "it", "now", "far", "but", "all"};
  std::string text = "Summarize:";
  for (int i = 0; i < words - 1; ++i) {
    text += ' ';
    text += kWords[(i * 7 + i / 16) % 16];
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// Samples and their summary.

struct Percentiles {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
};

Percentiles Summarize(std::vector<double> v) {
  Percentiles p;
  p.count = static_cast<int64_t>(v.size());
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / v.size();
  // Nearest rank.
  auto at = [&](double q) {
    size_t rank = static_cast<size_t>(std::ceil(q * v.size()));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  p.max = v.back();
  return p;
}

struct RunResult {
  RunSpec spec;
  double wall_seconds = 0;
  int64_t issued = 0;
  int64_t ok = 0;
  int64_t completion_tokens = 0;
  std::map<std::string, int64_t> codes;
  Percentiles e2e_ms, ttft_ms, tpot_ms, gap_ms;
  std::vector<std::string> errors;  // first few distinct messages
  struct Samples {
    std::vector<double> e2e, ttft, tpot, gaps;
  };
  std::shared_ptr<const Samples> samples;  // raw, for merging rounds
  // A timed open-loop run issues its last request before --duration ends and may finish early;
  // its rates are over the whole offered window.
  double Window() const {
    if (spec.rate > 0 && spec.requests == 0) {
      return std::max(wall_seconds, absl::ToDoubleSeconds(spec.duration));
    }
    return wall_seconds;
  }
  double RequestsPerSecond() const { return Window() > 0 ? ok / Window() : 0; }
  double TokensPerSecond() const { return Window() > 0 ? completion_tokens / Window() : 0; }
  double Load() const { return spec.rate > 0 ? spec.rate : spec.concurrency; }
};

// Collects per-call samples from gRPC's callback threads.
class Recorder {
 public:
  void Add(const grpc::Status& status, double e2e_ms, double ttft_ms, int tokens,
           const std::vector<double>& gaps) {
    absl::MutexLock lock(&mu_);
    codes_[GrpcCodeName(status.error_code())]++;
    if (!status.ok()) {
      if (errors_.size() < 5) {
        std::string m =
            absl::StrCat(GrpcCodeName(status.error_code()), ": ", status.error_message());
        if (std::find(errors_.begin(), errors_.end(), m) == errors_.end()) errors_.push_back(m);
      }
      return;
    }
    ++ok_;
    tokens_ += tokens;
    e2e_.push_back(e2e_ms);
    if (ttft_ms >= 0) {
      ttft_.push_back(ttft_ms);
      if (tokens > 1) tpot_.push_back((e2e_ms - ttft_ms) / (tokens - 1));
    }
    gaps_.insert(gaps_.end(), gaps.begin(), gaps.end());
  }
  void AddDropped() {
    absl::MutexLock lock(&mu_);
    codes_["CLIENT_OVERLOAD"]++;
  }
  void Fill(RunResult* r) {
    absl::MutexLock lock(&mu_);
    r->ok = ok_;
    r->completion_tokens = tokens_;
    r->codes = codes_;
    r->errors = errors_;
    r->e2e_ms = Summarize(e2e_);
    r->ttft_ms = Summarize(ttft_);
    r->tpot_ms = Summarize(tpot_);
    r->gap_ms = Summarize(gaps_);
    auto samples = std::make_shared<RunResult::Samples>();
    samples->e2e = std::move(e2e_);
    samples->ttft = std::move(ttft_);
    samples->tpot = std::move(tpot_);
    samples->gaps = std::move(gaps_);
    r->samples = std::move(samples);
  }

 private:
  absl::Mutex mu_;
  int64_t ok_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> codes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
  std::vector<double> e2e_ ABSL_GUARDED_BY(mu_), ttft_ ABSL_GUARDED_BY(mu_),
      tpot_ ABSL_GUARDED_BY(mu_), gaps_ ABSL_GUARDED_BY(mu_);
};

// Text of OK answers against a fault-free reference, per request (--check_text). Answers are
// kept as distinct texts with counts, and compared when the runs are over: a reference may come
// after the answers it judges.
class TextCheck {
 public:
  struct Summary {
    int64_t answers = 0;     // OK answers seen
    int64_t checked = 0;     // of them, compared with a reference
    int64_t failovers = 0;   // compared answers that were failed over mid-stream
    int64_t retries = 0;     // compared answers that were retried (and not failed over)
    int64_t mismatches = 0;  // compared answers whose text differs from the reference
    int64_t failover_mismatches = 0;
    int64_t unreferenced = 0;           // answers to a request that never had a fault-free answer
    std::vector<std::string> examples;  // a few mismatches, described
  };

  static TextCheck& Get() {
    static auto* check = new TextCheck;
    return *check;
  }

  // An OK answer to the request named `key`.
  void Add(const std::string& key, const std::string& text, const tandem::v1::Recovery& r) {
    absl::MutexLock lock(&mu_);
    Texts& t = texts_[key][text];
    if (r.failovers() > 0) {
      ++t.failovers;
    } else if (r.retries() > 0) {
      ++t.retries;
    } else {
      ++t.clean;
    }
    if (t.events.empty() && r.events_size() > 0) t.events = absl::StrJoin(r.events(), "; ");
  }

  Summary Summarize() const {
    absl::MutexLock lock(&mu_);
    Summary s;
    for (const auto& [key, texts] : texts_) {
      // The reference: the text most fault-free answers had.
      const std::string* reference = nullptr;
      int64_t best = 0;
      for (const auto& [text, t] : texts) {
        s.answers += t.clean + t.failovers + t.retries;
        if (t.clean > best) {
          best = t.clean;
          reference = &text;
        }
      }
      for (const auto& [text, t] : texts) {
        const int64_t n = t.clean + t.failovers + t.retries;
        if (reference == nullptr) {
          s.unreferenced += n;
          continue;
        }
        s.checked += n;
        s.failovers += t.failovers;
        s.retries += t.retries;
        if (text == *reference) continue;
        s.mismatches += n;
        s.failover_mismatches += t.failovers;
        if (s.examples.size() < 3) s.examples.push_back(Describe(key, *reference, text, t));
      }
    }
    return s;
  }

 private:
  struct Texts {
    int64_t clean = 0, failovers = 0, retries = 0;
    std::string events;  // the first recovered answer's Recovery.events
  };

  // Where two texts part, with some context on both sides (whole UTF-8 characters).
  static std::string Describe(const std::string& key, const std::string& want,
                              const std::string& got, const Texts& t) {
    size_t at = 0;
    while (at < want.size() && at < got.size() && want[at] == got[at]) ++at;
    const auto window = [at](const std::string& s) {
      size_t begin = at > 40 ? at - 40 : 0;
      size_t end = std::min(s.size(), at + 40);
      while (begin > 0 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
      while (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) ++end;
      return absl::StrCat(begin > 0 ? "..." : "", s.substr(begin, end - begin),
                          end < s.size() ? "..." : "");
    };
    return absl::StrCat(key, ": ", t.clean + t.failovers + t.retries, " answers (", t.failovers,
                        " failed over, ", t.retries, " retried) differ at byte ", at, ": want \"",
                        window(want), "\", got \"", window(got), "\"",
                        t.events.empty() ? "" : absl::StrCat("; recovery: ", t.events));
  }

  mutable absl::Mutex mu_;
  std::map<std::string, std::map<std::string, Texts>> texts_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------------------------
// Calls. Each object owns its context and deletes itself when gRPC reports the end.

class Driver;

// Tokens and text of either stream's chunks.
int ChunkTokens(const WorkerGenerateChunk& c) { return c.tokens(); }
int ChunkTokens(const GenerateStreamChunk&) { return 0; }
int FinalTokens(const WorkerGenerateChunk& c) { return c.completion_tokens(); }
int FinalTokens(const GenerateStreamChunk& c) { return c.usage().completion_tokens(); }
const tandem::v1::Recovery* ChunkRecovery(const WorkerGenerateChunk&) { return nullptr; }
const tandem::v1::Recovery* ChunkRecovery(const GenerateStreamChunk& c) {
  return c.has_recovery() ? &c.recovery() : nullptr;
}

class Driver {
 public:
  Driver(const RunSpec& spec, std::vector<std::shared_ptr<grpc::Channel>> channels,
         absl::Duration timeout)
      : spec_(spec), timeout_(timeout) {
    for (auto& ch : channels) {
      gateway_stubs_.push_back(Gateway::NewStub(ch));
      worker_stubs_.push_back(Worker::NewStub(ch));
    }
    const int words = PromptWords(spec.prompt).value_or(16);
    auto* m = gateway_request_.add_messages();
    m->set_role("user");
    m->add_content()->set_text(PromptText(words));
    gateway_request_.mutable_sampling()->set_max_tokens(spec.max_tokens);
    if (!spec.model.empty()) gateway_request_.mutable_hints()->set_model(spec.model);
    if (absl::GetFlag(FLAGS_check_text)) {
      gateway_request_.mutable_sampling()->set_temperature(0);
      // Names the request: the prompt follows from its size, and nothing else varies.
      text_key_ =
          absl::StrCat(TargetName(spec.target), ", ", spec.prompt, " prompt, max_tokens ",
                       spec.max_tokens, spec.model.empty() ? ", routed" : ", model ", spec.model);
    }
    *worker_request_.mutable_messages() = gateway_request_.messages();
    *worker_request_.mutable_sampling() = gateway_request_.sampling();
  }

  // Runs the spec to its end and returns the summary.
  RunResult Run() {
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
          +[](Driver* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu_) { return d->inflight_ == 0; },
          this));
      result.issued = issued_;
    }
    result.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    recorder_.Fill(&result);
    return result;
  }

  // Called by every finished call, on a gRPC thread.
  void Done(const grpc::Status& status, Clock::time_point scheduled, Clock::time_point first,
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

  const RunSpec& spec() const { return spec_; }
  absl::Duration timeout() const { return timeout_; }
  Gateway::Stub* gateway_stub(size_t i) { return gateway_stubs_[i % gateway_stubs_.size()].get(); }
  Worker::Stub* worker_stub(size_t i) { return worker_stubs_[i % worker_stubs_.size()].get(); }
  const GenerateRequest& gateway_request() const { return gateway_request_; }
  const WorkerGenerateRequest& worker_request() const { return worker_request_; }
  // --check_text: the request's name for TextCheck; empty when not checking.
  const std::string& text_key() const { return text_key_; }

 private:
  void RunOpenLoop(Clock::time_point start, Clock::time_point end);
  bool TryStartClosedLoopCall();
  bool MayStartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartCall(Clock::time_point scheduled, size_t n);

  const RunSpec spec_;
  const absl::Duration timeout_;
  std::vector<std::unique_ptr<Gateway::Stub>> gateway_stubs_;
  std::vector<std::unique_ptr<Worker::Stub>> worker_stubs_;
  GenerateRequest gateway_request_;
  WorkerGenerateRequest worker_request_;
  std::string text_key_;
  Recorder recorder_;
  Clock::time_point end_;

  absl::Mutex mu_;
  int64_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t remaining_ ABSL_GUARDED_BY(mu_) = -1;  // closed loop with --requests; -1: by time
  bool issuing_done_ ABSL_GUARDED_BY(mu_) = false;
};

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
    if (status.ok() && !driver_->text_key().empty()) {
      TextCheck::Get().Add(driver_->text_key(), text_, recovery_);
    }
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
  std::vector<double> gaps_;
  std::string text_;  // --check_text only
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
            TextCheck::Get().Add(driver_->text_key(), response_.text(), response_.recovery());
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

void Driver::StartCall(Clock::time_point scheduled, size_t n) {
  if (spec_.target == Target::kWorker) {
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
  const double fixed_gap = 1.0 / spec_.rate;
  const int64_t limit = spec_.requests > 0 ? spec_.requests : -1;
  const int max_inflight = absl::GetFlag(FLAGS_max_inflight);
  double t = 0;
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
      if (inflight_ >= max_inflight) {
        recorder_.AddDropped();
        continue;
      }
      ++inflight_;
      n = issued_++;
    }
    StartCall(at, n);
  }
}

// ---------------------------------------------------------------------------------------------
// Channels and readiness.

// Channels live until the process exits and are shared by every run to the same address. Besides
// reusing connections, this works around gRPC 1.51: when the last channel that used the callback
// API goes away, its shared "callback alternative" completion queue is shut down while a
// nexting thread may still poll it (seen here as a SIGSEGV in grpc_completion_queue_next when
// one run's channels were destroyed and the next run's created).
// Workers are called in plaintext (a bench worker runs with --plaintext); gateways as the
// --tls_ca/--tls_cert/--tls_key/--plaintext flags say.
// Made once: each set of TLS credentials watches its files with a thread of its own.
std::shared_ptr<grpc::ChannelCredentials> CredentialsFor(Target target) {
  if (target == Target::kWorker) return grpc::InsecureChannelCredentials();
  static const auto* gateway_creds = [] {
    auto creds = tandem::ChannelCredentialsFromFlags();
    if (!creds.ok()) {
      std::fprintf(stderr, "%s\n", std::string(creds.status().message()).c_str());
      std::exit(2);
    }
    return new std::shared_ptr<grpc::ChannelCredentials>(*std::move(creds));
  }();
  return *gateway_creds;
}

std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(Target target, const std::string& address,
                                                         int n) {
  static absl::Mutex mu;
  static auto* cache = new std::map<std::pair<std::string, int>, std::shared_ptr<grpc::Channel>>;
  absl::MutexLock lock(&mu);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < std::max(1, n); ++i) {
    if (auto it = cache->find({address, i}); it != cache->end()) {
      channels.push_back(it->second);
      continue;
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per channel
    args.SetInt("tandem.bench.channel", i);
    args.SetMaxReceiveMessageSize(64 << 20);
    channels.push_back(grpc::CreateCustomChannel(address, CredentialsFor(target), args));
    (*cache)[{address, i}] = channels.back();
  }
  return channels;
}

// Gateway: `model` (or, when empty, some model) has a ready worker (ListModels). Worker: state
// READY (GetInfo).
absl::Status WaitReady(Target target, const std::string& address, const std::string& model = "") {
  auto channel = grpc::CreateChannel(address, CredentialsFor(target));
  const absl::Time deadline = absl::Now() + absl::GetFlag(FLAGS_ready_timeout);
  std::string last = "no answer";
  while (absl::Now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (target == Target::kGateway) tandem::AddApiKey(&context);
    if (target == Target::kGateway) {
      tandem::v1::ListModelsResponse response;
      grpc::Status s = Gateway::NewStub(channel)->ListModels(&context, {}, &response);
      if (s.ok()) {
        for (const auto& m : response.models()) {
          if (m.ready_workers() > 0 && (model.empty() || m.name() == model)) {
            return absl::OkStatus();
          }
        }
        last = model.empty() ? "no model has a ready worker"
                             : absl::StrCat("model '", model, "' has no ready worker");
      } else {
        last = s.error_message();
      }
    } else {
      tandem::v1::WorkerInfo info;
      grpc::Status s = Worker::NewStub(channel)->GetInfo(&context, {}, &info);
      if (s.ok() && info.state() == tandem::v1::WorkerInfo::READY) return absl::OkStatus();
      last = s.ok() ? "not READY" : s.error_message();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::UnavailableError(
      absl::StrCat(TargetName(target), " at ", address, " not ready: ", last));
}

RunResult RunOnce(const RunSpec& spec) {
  Driver driver(spec, MakeChannels(spec.target, spec.address, absl::GetFlag(FLAGS_channels)),
                absl::GetFlag(FLAGS_timeout));
  return driver.Run();
}

// One result from rounds of the same spec (samples pooled, counts added, windows summed).
RunResult Merge(const std::vector<RunResult>& parts) {
  RunResult m;
  m.spec = parts.front().spec;
  m.spec.duration = absl::ZeroDuration();
  m.spec.requests = 0;
  auto samples = std::make_shared<RunResult::Samples>();
  for (const RunResult& p : parts) {
    m.spec.duration += p.spec.duration;
    m.spec.requests += p.spec.requests;
    m.wall_seconds += p.Window();
    m.issued += p.issued;
    m.ok += p.ok;
    m.completion_tokens += p.completion_tokens;
    for (const auto& [code, n] : p.codes) m.codes[code] += n;
    for (const auto& e : p.errors) {
      if (m.errors.size() < 5 && std::find(m.errors.begin(), m.errors.end(), e) == m.errors.end()) {
        m.errors.push_back(e);
      }
    }
    if (p.samples == nullptr) continue;
    auto append = [](std::vector<double>* to, const std::vector<double>& from) {
      to->insert(to->end(), from.begin(), from.end());
    };
    append(&samples->e2e, p.samples->e2e);
    append(&samples->ttft, p.samples->ttft);
    append(&samples->tpot, p.samples->tpot);
    append(&samples->gaps, p.samples->gaps);
  }
  m.e2e_ms = Summarize(samples->e2e);
  m.ttft_ms = Summarize(samples->ttft);
  m.tpot_ms = Summarize(samples->tpot);
  m.gap_ms = Summarize(samples->gaps);
  m.samples = std::move(samples);
  return m;
}

// Runs the specs in `rounds` alternating rounds of 1/rounds of their length each (so drift on a
// shared machine hits every spec alike) and returns one merged result per spec.
std::vector<RunResult> Interleaved(const std::vector<RunSpec>& specs, int rounds) {
  std::vector<std::vector<RunResult>> parts(specs.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < specs.size(); ++i) {
      RunSpec s = specs[i];
      s.duration = specs[i].duration / rounds;
      if (specs[i].requests > 0) s.requests = std::max(1, specs[i].requests / rounds);
      s.seed = specs[i].seed + round;
      parts[i].push_back(RunOnce(s));
    }
  }
  std::vector<RunResult> merged;
  for (const auto& p : parts) merged.push_back(Merge(p));
  return merged;
}

void Warmup(RunSpec spec) {
  const int n = absl::GetFlag(FLAGS_warmup_requests);
  if (n <= 0) return;
  spec.rate = 0;
  spec.concurrency = std::min(4, n);
  spec.requests = n;
  RunOnce(spec);
}

// ---------------------------------------------------------------------------------------------
// Output: Markdown, JSON, SVG.

std::string Fmt(double v) {
  if (v == 0) return "0";
  if (std::abs(v) >= 100) return absl::StrFormat("%.0f", v);
  if (std::abs(v) >= 10) return absl::StrFormat("%.1f", v);
  if (std::abs(v) >= 1) return absl::StrFormat("%.2f", v);
  return absl::StrFormat("%.3f", v);
}

std::string CodesText(const RunResult& r) {
  std::vector<std::string> parts;
  for (const auto& [code, n] : r.codes) parts.push_back(absl::StrCat(code, "=", n));
  return absl::StrJoin(parts, " ");
}

std::string LoadText(const RunSpec& s) {
  return s.rate > 0 ? absl::StrCat(Fmt(s.rate), "/s ", s.poisson ? "poisson" : "fixed")
                    : absl::StrCat("c=", s.concurrency);
}

std::string MarkdownTable(const std::vector<RunResult>& results) {
  std::string out =
      "| series | api | prompt | load | ok | req/s | tok/s | e2e p50 | p90 | p99 | p99.9 (ms) | "
      "TTFT p50 | p99 (ms) | TPOT p50 (ms) | gap p50 | p99 (ms) | codes |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const RunResult& r : results) {
    const bool stream = r.ttft_ms.count > 0;
    absl::StrAppend(&out, "| ", r.spec.label, " | ", ApiName(r.spec.api), " | ", r.spec.prompt,
                    " | ", LoadText(r.spec), " | ", r.ok, " | ", Fmt(r.RequestsPerSecond()), " | ",
                    Fmt(r.TokensPerSecond()), " | ", Fmt(r.e2e_ms.p50), " | ", Fmt(r.e2e_ms.p90),
                    " | ", Fmt(r.e2e_ms.p99), " | ", Fmt(r.e2e_ms.p999), " | ",
                    stream ? Fmt(r.ttft_ms.p50) : "-", " | ", stream ? Fmt(r.ttft_ms.p99) : "-",
                    " | ", r.tpot_ms.count ? Fmt(r.tpot_ms.p50) : "-", " | ",
                    r.gap_ms.count ? Fmt(r.gap_ms.p50) : "-", " | ",
                    r.gap_ms.count ? Fmt(r.gap_ms.p99) : "-", " | ", CodesText(r), " |\n");
  }
  return out;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

std::string JsonPercentiles(const Percentiles& p) {
  return absl::StrCat("{\"count\":", p.count, ",\"mean\":", JsonNumber(p.mean),
                      ",\"p50\":", JsonNumber(p.p50), ",\"p90\":", JsonNumber(p.p90),
                      ",\"p99\":", JsonNumber(p.p99), ",\"p99_9\":", JsonNumber(p.p999),
                      ",\"max\":", JsonNumber(p.max), "}");
}

std::string JsonResult(const RunResult& r) {
  std::vector<std::string> codes, errors;
  for (const auto& [code, n] : r.codes) codes.push_back(absl::StrCat(JsonString(code), ":", n));
  for (const auto& e : r.errors) errors.push_back(JsonString(e));
  const RunSpec& s = r.spec;
  return absl::StrCat(
      "{\"label\":", JsonString(s.label), ",\"target\":", JsonString(TargetName(s.target)),
      ",\"address\":", JsonString(s.address), ",\"api\":", JsonString(ApiName(s.api)),
      ",\"model\":", JsonString(s.model), ",\"prompt\":", JsonString(s.prompt),
      ",\"max_tokens\":", s.max_tokens, ",\"loop\":", JsonString(s.rate > 0 ? "open" : "closed"),
      ",\"rate\":", JsonNumber(s.rate),
      ",\"arrival\":", JsonString(s.rate > 0 ? (s.poisson ? "poisson" : "fixed") : ""),
      ",\"concurrency\":", s.rate > 0 ? 0 : s.concurrency,
      ",\"wall_seconds\":", JsonNumber(r.wall_seconds), ",\"issued\":", r.issued, ",\"ok\":", r.ok,
      ",\"completion_tokens\":", r.completion_tokens,
      ",\"requests_per_second\":", JsonNumber(r.RequestsPerSecond()),
      ",\"tokens_per_second\":", JsonNumber(r.TokensPerSecond()), ",\"codes\":{",
      absl::StrJoin(codes, ","), "},\"errors\":[", absl::StrJoin(errors, ","),
      "],\"e2e_ms\":", JsonPercentiles(r.e2e_ms), ",\"ttft_ms\":", JsonPercentiles(r.ttft_ms),
      ",\"tpot_ms\":", JsonPercentiles(r.tpot_ms), ",\"chunk_gap_ms\":", JsonPercentiles(r.gap_ms),
      "}");
}

std::string JsonRuns(const std::vector<RunResult>& results) {
  std::vector<std::string> runs;
  for (const auto& r : results) runs.push_back(JsonResult(r));
  return absl::StrCat("[", absl::StrJoin(runs, ",\n  "), "]");
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// Latency percentiles (log y) against offered load (log x when it spans 10x), one colour per
// percentile, one dash pattern per series.
std::string Svg(const std::vector<RunResult>& results, const std::string& title) {
  std::map<std::string, std::vector<const RunResult*>> series;
  std::vector<std::string> order;
  for (const auto& r : results) {
    if (r.ok == 0) continue;
    if (!series.count(r.spec.label)) order.push_back(r.spec.label);
    series[r.spec.label].push_back(&r);
  }
  double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
  for (const auto& [_, rs] : series) {
    for (const RunResult* r : rs) {
      xmin = std::min(xmin, r->Load());
      xmax = std::max(xmax, r->Load());
      ymin = std::min(ymin, std::max(1e-3, r->e2e_ms.p50));
      ymax = std::max(ymax, r->e2e_ms.p999);
    }
  }
  const int w = 800, h = 500, left = 70, right = 200, top = 40, bottom = 50;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n<text x=\"%d\" y=\"20\" font-size=\"14\">%s</text>\n",
      w, h, left, title);
  if (series.empty()) return svg + "<text x=\"100\" y=\"100\">no successful runs</text></svg>\n";
  if (xmax <= xmin) xmax = xmin * 2 + 1;
  ymin = std::pow(10, std::floor(std::log10(ymin)));
  ymax = std::pow(10, std::ceil(std::log10(std::max(ymax, ymin * 10))));
  const bool logx = xmax / std::max(xmin, 1e-9) >= 10 && xmin > 0;
  auto X = [&](double x) {
    const double f =
        logx ? (std::log10(x) - std::log10(xmin)) / (std::log10(xmax) - std::log10(xmin))
             : (x - xmin) / (xmax - xmin);
    return left + f * (w - left - right);
  };
  auto Y = [&](double y) {
    const double f =
        (std::log10(std::max(y, ymin)) - std::log10(ymin)) / (std::log10(ymax) - std::log10(ymin));
    return h - bottom - f * (h - top - bottom);
  };
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n"
                        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n",
                        left, h - bottom, w - right, h - bottom, left, top, left, h - bottom);
  for (double y = ymin; y <= ymax * 1.0001; y *= 10) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s ms</text>\n",
                          left, Y(y), w - right, Y(y), left - 5, Y(y) + 4, Fmt(y));
  }
  std::vector<double> xs;
  for (const auto& [_, rs] : series) {
    for (const RunResult* r : rs) xs.push_back(r->Load());
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  for (double x : xs) {
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                          X(x), h - bottom + 16, Fmt(x));
  }
  const bool open = results.front().spec.rate > 0;
  absl::StrAppendFormat(&svg, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                        (left + w - right) / 2, h - 10,
                        open ? "offered load (requests/s)" : "concurrency (calls in flight)");
  const char* colours[] = {"#1f77b4", "#2ca02c", "#ff7f0e", "#d62728"};
  const char* names[] = {"p50", "p90", "p99", "p99.9"};
  const char* dashes[] = {"", "6,4", "2,3", "10,3,2,3"};
  int legend_y = top;
  for (size_t si = 0; si < order.size(); ++si) {
    auto rs = series[order[si]];
    std::sort(rs.begin(), rs.end(),
              [](const RunResult* a, const RunResult* b) { return a->Load() < b->Load(); });
    for (int pi = 0; pi < 4; ++pi) {
      std::string points;
      for (const RunResult* r : rs) {
        const double v[] = {r->e2e_ms.p50, r->e2e_ms.p90, r->e2e_ms.p99, r->e2e_ms.p999};
        absl::StrAppendFormat(&points, "%.1f,%.1f ", X(r->Load()), Y(v[pi]));
      }
      absl::StrAppendFormat(&svg,
                            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                            "stroke-dasharray=\"%s\" points=\"%s\"/>\n",
                            colours[pi], dashes[si % 4], points);
      absl::StrAppendFormat(&svg,
                            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                            "stroke-width=\"2\" stroke-dasharray=\"%s\"/><text x=\"%d\" "
                            "y=\"%d\">%s %s</text>\n",
                            w - right + 10, legend_y, w - right + 40, legend_y, colours[pi],
                            dashes[si % 4], w - right + 45, legend_y + 4, order[si], names[pi]);
      legend_y += 16;
    }
  }
  return svg + "</svg>\n";
}

// Writes --json (with `extra` members) and --svg; prints the Markdown table.
absl::Status Emit(const std::vector<RunResult>& results, const std::string& extra_json,
                  const std::string& title) {
  std::cout << MarkdownTable(results) << std::flush;
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    RETURN_IF_ERROR(WriteFile(
        path, absl::StrCat(
                  "{\"tool\":\"tandem-bench\",\"preset\":", JsonString(absl::GetFlag(FLAGS_preset)),
                  extra_json, ",\n\"runs\":", JsonRuns(results), "}\n")));
  }
  if (const std::string path = absl::GetFlag(FLAGS_svg); !path.empty()) {
    RETURN_IF_ERROR(WriteFile(path, Svg(results, title)));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Flag parsing helpers.

absl::StatusOr<std::vector<double>> ParseList(const std::string& flag, const std::string& value) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, "=", value, ": expected positive numbers separated by commas"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<RunSpec> BaseSpec() {
  RunSpec s;
  const std::string target = absl::GetFlag(FLAGS_target);
  if (target == "gateway") {
    s.target = Target::kGateway;
  } else if (target == "worker") {
    s.target = Target::kWorker;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--target=", target, ": gateway or worker"));
  }
  const std::string api = absl::GetFlag(FLAGS_api);
  if (api == "stream") {
    s.api = Api::kStream;
  } else if (api == "unary") {
    s.api = Api::kUnary;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--api=", api, ": stream or unary"));
  }
  const std::string arrival = absl::GetFlag(FLAGS_arrival);
  if (arrival != "poisson" && arrival != "fixed") {
    return absl::InvalidArgumentError(absl::StrCat("--arrival=", arrival, ": poisson or fixed"));
  }
  s.poisson = arrival == "poisson";
  s.address = absl::GetFlag(FLAGS_address);
  s.model = absl::GetFlag(FLAGS_model);
  s.prompt = absl::GetFlag(FLAGS_prompt);
  RETURN_IF_ERROR(PromptWords(s.prompt).status());
  s.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (s.max_tokens <= 0) return absl::InvalidArgumentError("--max_tokens must be positive");
  s.rate = absl::GetFlag(FLAGS_rate);
  s.concurrency = absl::GetFlag(FLAGS_concurrency);
  if (s.concurrency <= 0) return absl::InvalidArgumentError("--concurrency must be positive");
  s.duration = absl::GetFlag(FLAGS_duration);
  s.requests = absl::GetFlag(FLAGS_requests);
  s.seed = absl::GetFlag(FLAGS_seed);
  s.label = absl::StrCat(TargetName(s.target), " ", ApiName(s.api));
  return s;
}

// ---------------------------------------------------------------------------------------------
// Plain runs and sweeps.

absl::Status RunPlain() {
  ASSIGN_OR_RETURN(RunSpec base, BaseSpec());
  RETURN_IF_ERROR(WaitReady(base.target, base.address, base.model));
  std::vector<RunSpec> specs;
  const std::string rates = absl::GetFlag(FLAGS_rates);
  const std::string concurrencies = absl::GetFlag(FLAGS_concurrencies);
  if (!rates.empty() && !concurrencies.empty()) {
    return absl::InvalidArgumentError("--rates and --concurrencies are exclusive");
  }
  if (!rates.empty()) {
    ASSIGN_OR_RETURN(std::vector<double> list, ParseList("rates", rates));
    for (double r : list) {
      RunSpec s = base;
      s.rate = r;
      specs.push_back(s);
    }
  } else if (!concurrencies.empty()) {
    ASSIGN_OR_RETURN(std::vector<double> list, ParseList("concurrencies", concurrencies));
    for (double c : list) {
      RunSpec s = base;
      s.rate = 0;
      s.concurrency = static_cast<int>(c);
      specs.push_back(s);
    }
  } else {
    specs.push_back(base);
  }
  Warmup(base);
  std::vector<RunResult> results;
  for (const RunSpec& s : specs) {
    results.push_back(RunOnce(s));
    std::cerr << "done " << s.label << " " << LoadText(s) << ": " << results.back().ok << " ok, "
              << CodesText(results.back()) << "\n";
  }
  std::string extra;
  std::string text_report;
  if (absl::GetFlag(FLAGS_check_text)) {
    const TextCheck::Summary t = TextCheck::Get().Summarize();
    std::vector<std::string> examples;
    for (const auto& e : t.examples) examples.push_back(JsonString(e));
    extra =
        absl::StrCat(",\n\"text_check\":{\"text_answers\":", t.answers,
                     ",\"text_checked\":", t.checked, ",\"text_failovers_checked\":", t.failovers,
                     ",\"text_retries_checked\":", t.retries, ",\"text_mismatches\":", t.mismatches,
                     ",\"text_failover_mismatches\":", t.failover_mismatches,
                     ",\"text_unreferenced\":", t.unreferenced, ",\"text_mismatch_examples\":[",
                     absl::StrJoin(examples, ","), "]}");
    text_report = absl::StrCat("text check: ", t.checked, " of ", t.answers,
                               " OK answers compared with a fault-free reference (", t.failovers,
                               " failed over, ", t.retries, " retried): ", t.mismatches,
                               " mismatches (", t.failover_mismatches, " failed over); ",
                               t.unreferenced, " without a reference\n");
    for (const auto& e : t.examples) absl::StrAppend(&text_report, "  mismatch: ", e, "\n");
  }
  RETURN_IF_ERROR(Emit(results, extra,
                       absl::StrCat("tandem-bench: ", base.label, " ", base.prompt, " prompt")));
  std::cout << text_report << std::flush;
  if (!text_report.empty()) std::cerr << text_report;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// --preset=seeds: the second seed's methodology.

absl::Status RunSeeds() {
  ASSIGN_OR_RETURN(RunSpec base, BaseSpec());
  base.target = Target::kGateway;
  RETURN_IF_ERROR(WaitReady(Target::kGateway, base.address));
  const int iterations = std::max(1, absl::GetFlag(FLAGS_iterations));
  std::vector<std::string> models =
      absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty());
  for (const std::string& m : models) RETURN_IF_ERROR(WaitReady(Target::kGateway, base.address, m));
  models.push_back("");  // the gateway's routing
  const std::vector<std::string> prompts = {"short", "medium", "long"};
  const std::vector<int> levels = {1, 2, 4, 8, 16};
  std::vector<RunResult> all;
  std::string single = absl::StrCat(
      "\n### Single request (", iterations,
      " iterations each, streaming)\n\n| model | prompt | e2e p50 (ms) | mean (ms) | TTFT p50 (ms) "
      "| TPOT p50 (ms) | tokens/s per request | codes |\n|---|---|---|---|---|---|---|---|\n");
  std::string scaling = absl::StrCat(
      "\n### Concurrency (", base.prompt, " prompt, ", iterations,
      " rounds each)\n\n| model | concurrency | aggregate tokens/s | scaling efficiency | e2e p50 "
      "(ms) | p99 (ms) | TTFT p50 (ms) | codes |\n|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> json_single, json_scaling;
  for (const std::string& model : models) {
    const std::string name = model.empty() ? "routed" : model;
    RunSpec m = base;
    m.model = model;
    m.api = Api::kStream;
    m.rate = 0;
    Warmup(m);
    for (const std::string& prompt : prompts) {
      RunSpec s = m;
      s.label = absl::StrCat(name, " single");
      s.prompt = prompt;
      s.concurrency = 1;
      s.requests = iterations;
      RunResult r = RunOnce(s);
      const double per_request_tps =
          r.e2e_ms.mean > 0 && r.ok > 0
              ? (r.completion_tokens / double(r.ok)) / (r.e2e_ms.mean / 1e3)
              : 0;
      absl::StrAppend(&single, "| ", name, " | ", prompt, " | ", Fmt(r.e2e_ms.p50), " | ",
                      Fmt(r.e2e_ms.mean), " | ", Fmt(r.ttft_ms.p50), " | ", Fmt(r.tpot_ms.p50),
                      " | ", Fmt(per_request_tps), " | ", CodesText(r), " |\n");
      json_single.push_back(
          absl::StrCat("{\"model\":", JsonString(name), ",\"prompt\":", JsonString(prompt),
                       ",\"e2e_ms_p50\":", JsonNumber(r.e2e_ms.p50), ",\"e2e_ms_mean\":",
                       JsonNumber(r.e2e_ms.mean), ",\"ttft_ms_p50\":", JsonNumber(r.ttft_ms.p50),
                       ",\"tpot_ms_p50\":", JsonNumber(r.tpot_ms.p50),
                       ",\"tokens_per_second_per_request\":", JsonNumber(per_request_tps), "}"));
      all.push_back(std::move(r));
    }
    double base_tps = 0;
    for (int c : levels) {
      RunSpec s = m;
      s.label = absl::StrCat(name, " concurrency");
      s.concurrency = c;
      s.requests = c * iterations;
      RunResult r = RunOnce(s);
      const double tps = r.TokensPerSecond();
      if (c == 1) base_tps = tps;
      const double efficiency = base_tps > 0 ? tps / (c * base_tps) : 0;
      absl::StrAppend(&scaling, "| ", name, " | ", c, " | ", Fmt(tps), " | ",
                      absl::StrFormat("%.0f%%", efficiency * 100), " | ", Fmt(r.e2e_ms.p50), " | ",
                      Fmt(r.e2e_ms.p99), " | ", Fmt(r.ttft_ms.p50), " | ", CodesText(r), " |\n");
      json_scaling.push_back(absl::StrCat("{\"model\":", JsonString(name), ",\"concurrency\":", c,
                                          ",\"aggregate_tokens_per_second\":", JsonNumber(tps),
                                          ",\"scaling_efficiency\":", JsonNumber(efficiency),
                                          ",\"e2e_ms_p50\":", JsonNumber(r.e2e_ms.p50),
                                          ",\"e2e_ms_p99\":", JsonNumber(r.e2e_ms.p99), "}"));
      all.push_back(std::move(r));
    }
    std::cerr << "done " << name << "\n";
  }
  std::cout << single << scaling << "\n### All runs\n\n";
  std::vector<RunResult> concurrency_runs;
  for (const auto& r : all) {
    if (r.spec.label.find("concurrency") != std::string::npos) concurrency_runs.push_back(r);
  }
  const std::string extra =
      absl::StrCat(",\n\"single_request\":[", absl::StrJoin(json_single, ","),
                   "],\n\"concurrency\":[", absl::StrJoin(json_scaling, ","), "]");
  std::cout << MarkdownTable(all) << std::flush;
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    RETURN_IF_ERROR(WriteFile(path, absl::StrCat("{\"tool\":\"tandem-bench\",\"preset\":\"seeds\"",
                                                 extra, ",\n\"runs\":", JsonRuns(all), "}\n")));
  }
  if (const std::string path = absl::GetFlag(FLAGS_svg); !path.empty()) {
    RETURN_IF_ERROR(
        WriteFile(path, Svg(concurrency_runs, "tandem-bench seeds: latency against concurrency")));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// --preset=overhead: the same worker directly and through the gateway.

absl::StatusOr<int64_t> RssKb(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kb = 0;
      std::istringstream(line.substr(6)) >> kb;
      return kb;
    }
  }
  return absl::NotFoundError(absl::StrCat("no VmRSS in /proc/", pid, "/status"));
}

// Samples the gateway's RSS every 20 ms while alive; keeps the maximum.
class RssSampler {
 public:
  explicit RssSampler(int pid) : pid_(pid) {
    if (pid_ > 0) thread_ = std::thread([this] { Loop(); });
  }
  ~RssSampler() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int64_t max_kb() const { return max_kb_; }

 private:
  void Loop() {
    while (!stop_) {
      if (auto kb = RssKb(pid_); kb.ok()) max_kb_ = std::max<int64_t>(max_kb_, *kb);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const int pid_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> max_kb_{0};
  std::thread thread_;
};

bool Clean(const RunResult& r) {
  return r.ok > 0 && r.codes.size() == 1 && r.codes.count("OK") == 1;
}

absl::Status RunOverhead() {
  ASSIGN_OR_RETURN(RunSpec base, BaseSpec());
  const std::string worker = absl::GetFlag(FLAGS_worker_address);
  const std::string gateway = absl::GetFlag(FLAGS_gateway_address);
  if (worker.empty() || gateway.empty()) {
    return absl::InvalidArgumentError(
        "--preset=overhead needs --worker_address and --gateway_address");
  }
  const int pid = absl::GetFlag(FLAGS_gateway_pid);
  RETURN_IF_ERROR(WaitReady(Target::kWorker, worker));
  // The gateway routes with the built-in rules, so pin the model the worker serves.
  tandem::v1::WorkerInfo info;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status s =
        Worker::NewStub(grpc::CreateChannel(worker, grpc::InsecureChannelCredentials()))
            ->GetInfo(&context, {}, &info);
    if (!s.ok()) return FromGrpcStatus(s);
  }
  RETURN_IF_ERROR(WaitReady(Target::kGateway, gateway, info.model_name()));
  absl::SleepFor(absl::Milliseconds(300));  // let the gateway's first probes and scrapes settle
  int64_t rss_idle_kb = 0;
  if (pid > 0) {
    ASSIGN_OR_RETURN(rss_idle_kb, RssKb(pid));
  }
  base.rate = 0;
  base.concurrency = 1;
  RunSpec direct = base, gw_unary = base, gw_stream = base;
  direct.target = Target::kWorker;
  direct.address = worker;
  direct.api = Api::kStream;
  direct.label = "direct";
  gw_unary.target = Target::kGateway;
  gw_unary.address = gateway;
  gw_unary.api = Api::kUnary;
  gw_unary.model = info.model_name();
  gw_unary.label = "gateway unary";
  gw_stream = gw_unary;
  gw_stream.api = Api::kStream;
  gw_stream.label = "gateway stream";

  RssSampler sampler(pid);
  Warmup(direct);
  Warmup(gw_unary);
  Warmup(gw_stream);
  // Concurrency 1, interleaved in three rounds so drift hits every series alike.
  const std::vector<RunResult> c1 = Interleaved({direct, gw_unary, gw_stream}, 3);
  const RunResult& d = c1[0];
  const RunResult& gu = c1[1];
  const RunResult& gs = c1[2];

  // Concurrent streams through the gateway: every one must end OK with all its tokens.
  RunResult streams;
  {
    RunSpec s = gw_stream;
    s.label = "gateway streams";
    s.concurrency = std::max(1, absl::GetFlag(FLAGS_streams));
    s.requests = s.concurrency;
    streams = RunOnce(s);
  }
  // Every stream must deliver the same number of completion tokens (fixed-length synthetic
  // answers): tokens / ok is checked against the concurrency-1 streams.
  const double tokens_per_stream = gs.ok > 0 ? double(gs.completion_tokens) / gs.ok : 0;
  const bool streams_clean =
      Clean(streams) && streams.ok == streams.spec.concurrency &&
      std::abs(double(streams.completion_tokens) - tokens_per_stream * streams.ok) < 0.5;
  // RSS under sustainable load (warm-ups, concurrency 1, the concurrent streams), before the
  // sweep pushes the gateway past what it sustains.
  const int64_t rss_load_kb = sampler.max_kb();

  // Rate sweep: direct and gateway (unary) at each rate, open loop, Poisson.
  std::vector<double> rates = {500, 1000, 2000, 5000, 10000, 20000};
  if (const std::string r = absl::GetFlag(FLAGS_rates); !r.empty()) {
    ASSIGN_OR_RETURN(rates, ParseList("rates", r));
  }
  std::vector<RunResult> sweep;
  double best_rate = 0;
  const double bound = absl::GetFlag(FLAGS_overhead_p99_bound_ms);
  std::string sweep_table =
      "\n### Rate sweep (open loop, Poisson; gateway unary vs direct)\n\n| offered (req/s) | "
      "direct "
      "achieved | gateway achieved | direct p99 (ms) | gateway p99 (ms) | added p99 (ms) | gateway "
      "codes | within bound |\n|---|---|---|---|---|---|---|---|\n";
  std::vector<std::string> json_sweep;
  for (double rate : rates) {
    RunSpec sd = direct, sg = gw_unary;
    sd.rate = sg.rate = rate;
    sd.poisson = sg.poisson = true;
    sd.requests = sg.requests = 0;
    sd.label = "direct";
    sg.label = "gateway unary";
    std::vector<RunResult> pair = Interleaved({sd, sg}, 3);
    RunResult rd = std::move(pair[0]);
    RunResult rg = std::move(pair[1]);
    const double added = rg.e2e_ms.p99 - rd.e2e_ms.p99;
    // Sustained: every request answered OK (none dropped by the client) at >= 90% of the
    // offered rate (Poisson counts vary by a few percent over a short run).
    const bool sustained = Clean(rd) && Clean(rg) && rg.ok == rg.issued && rd.ok == rd.issued &&
                           rg.RequestsPerSecond() >= 0.9 * rate &&
                           rd.RequestsPerSecond() >= 0.9 * rate;
    const bool within = sustained && added < bound;
    if (within) best_rate = std::max(best_rate, rate);
    absl::StrAppend(&sweep_table, "| ", Fmt(rate), " | ", Fmt(rd.RequestsPerSecond()), " | ",
                    Fmt(rg.RequestsPerSecond()), " | ", Fmt(rd.e2e_ms.p99), " | ",
                    Fmt(rg.e2e_ms.p99), " | ", Fmt(added), " | ", CodesText(rg), " | ",
                    within ? "yes" : "no", " |\n");
    json_sweep.push_back(absl::StrCat("{\"rate\":", JsonNumber(rate),
                                      ",\"added_p99_ms\":", JsonNumber(added),
                                      ",\"sustained\":", sustained ? "true" : "false",
                                      ",\"within_bound\":", within ? "true" : "false", "}"));
    std::cerr << "done rate " << rate << (sustained ? "" : " (not sustained)") << "\n";
    sweep.push_back(std::move(rd));
    sweep.push_back(std::move(rg));
    if (!sustained && !absl::GetFlag(FLAGS_sweep_past_failure)) break;
    // An overloaded gateway may have marked the worker not ready; let it recover.
    RETURN_IF_ERROR(WaitReady(Target::kGateway, gateway, info.model_name()));
  }

  sampler.Stop();
  const int64_t rss_sweep_kb = sampler.max_kb();
  absl::SleepFor(absl::Seconds(1));
  int64_t rss_after_kb = 0;
  if (pid > 0) {
    ASSIGN_OR_RETURN(rss_after_kb, RssKb(pid));
  }

  const double add_p50_u = gu.e2e_ms.p50 - d.e2e_ms.p50;
  const double add_p99_u = gu.e2e_ms.p99 - d.e2e_ms.p99;
  const double add_p50_s = gs.e2e_ms.p50 - d.e2e_ms.p50;
  const double add_p99_s = gs.e2e_ms.p99 - d.e2e_ms.p99;
  const double add_ttft_p50 = gs.ttft_ms.p50 - d.ttft_ms.p50;
  const double add_ttft_p99 = gs.ttft_ms.p99 - d.ttft_ms.p99;
  const double add_gap_p50 = gs.gap_ms.p50 - d.gap_ms.p50;
  const double add_gap_p99 = gs.gap_ms.p99 - d.gap_ms.p99;
  auto us = [](double ms) { return absl::StrFormat("%.1f us", ms * 1000); };
  std::string summary = absl::StrCat(
      "\n### Gateway overhead (concurrency 1, ", base.prompt, " prompt, max_tokens ",
      base.max_tokens,
      "; direct = Worker.Generate on the same worker)\n\n| measure | value | "
      "target |\n|---|---|---|\n| added p50, unary | ",
      us(add_p50_u), " | <= 50 us |\n| added p99, unary | ", us(add_p99_u),
      " | <= 200 us |\n| added p50, stream | ", us(add_p50_s),
      " | <= 50 us |\n| added p99, stream | ", us(add_p99_s),
      " | <= 200 us |\n| added TTFT p50 / p99 | ", us(add_ttft_p50), " / ", us(add_ttft_p99),
      " | |\n| added per-chunk gap p50 / p99 | ", us(add_gap_p50), " / ", us(add_gap_p99),
      " | p99 <= 10 us |\n| highest rate with added p99 < ", Fmt(bound), " ms | ",
      best_rate > 0 ? absl::StrCat(Fmt(best_rate), " req/s") : "none of the rates",
      " | >= 10,000 req/s |\n| ", streams.spec.concurrency, " concurrent streams | ", streams.ok,
      " OK, ", streams.completion_tokens, " tokens (", CodesText(streams), ")",
      streams_clean ? ", none lost" : ", LOST OR FAILED", " | >= 512, no lost chunk |\n",
      "| gateway RSS idle / max under sustained load (c=1, streams) / max in the sweep / 1 s after "
      "| ",
      pid > 0 ? absl::StrFormat("%.1f MB / %.1f MB / %.1f MB / %.1f MB", rss_idle_kb / 1024.0,
                                rss_load_kb / 1024.0, rss_sweep_kb / 1024.0, rss_after_kb / 1024.0)
              : "no --gateway_pid",
      " | <= 64 MB idle |\n");
  std::cout << summary << sweep_table << "\n### Concurrency 1 runs\n\n"
            << MarkdownTable(c1) << "\n### Sweep and stream runs\n\n";
  std::vector<RunResult> rest = sweep;
  rest.push_back(streams);
  std::cout << MarkdownTable(rest) << std::flush;

  const std::string extra = absl::StrCat(
      ",\n\"overhead\":{\"worker_address\":", JsonString(worker),
      ",\"gateway_address\":", JsonString(gateway), ",\"model\":", JsonString(info.model_name()),
      ",\"added_p50_ms_unary\":", JsonNumber(add_p50_u),
      ",\"added_p99_ms_unary\":", JsonNumber(add_p99_u),
      ",\"added_p50_ms_stream\":", JsonNumber(add_p50_s),
      ",\"added_p99_ms_stream\":", JsonNumber(add_p99_s),
      ",\"added_ttft_ms_p50\":", JsonNumber(add_ttft_p50),
      ",\"added_ttft_ms_p99\":", JsonNumber(add_ttft_p99),
      ",\"added_chunk_gap_ms_p50\":", JsonNumber(add_gap_p50),
      ",\"added_chunk_gap_ms_p99\":", JsonNumber(add_gap_p99),
      ",\"p99_bound_ms\":", JsonNumber(bound),
      ",\"highest_rate_within_bound\":", JsonNumber(best_rate), ",\"sweep\":[",
      absl::StrJoin(json_sweep, ","), "]",
      ",\"streams\":{\"concurrency\":", streams.spec.concurrency, ",\"ok\":", streams.ok,
      ",\"completion_tokens\":", streams.completion_tokens,
      ",\"none_lost\":", streams_clean ? "true" : "false", "}",
      ",\"gateway_rss_kb_idle\":", rss_idle_kb, ",\"gateway_rss_kb_load_max\":", rss_load_kb,
      ",\"gateway_rss_kb_after\":", rss_after_kb, ",\"gateway_rss_kb_sweep_max\":", rss_sweep_kb,
      "}");
  std::vector<RunResult> all = c1;
  all.insert(all.end(), rest.begin(), rest.end());
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    RETURN_IF_ERROR(
        WriteFile(path, absl::StrCat("{\"tool\":\"tandem-bench\",\"preset\":\"overhead\"", extra,
                                     ",\n\"runs\":", JsonRuns(all), "}\n")));
  }
  if (const std::string path = absl::GetFlag(FLAGS_svg); !path.empty()) {
    RETURN_IF_ERROR(WriteFile(
        path,
        Svg(sweep, "tandem-bench overhead: direct vs gateway, latency against offered load")));
  }
  return absl::OkStatus();
}

absl::Status Main() {
  const std::string preset = absl::GetFlag(FLAGS_preset);
  if (preset.empty()) return RunPlain();
  if (absl::GetFlag(FLAGS_check_text)) {
    return absl::InvalidArgumentError("--check_text is for plain runs (no --preset)");
  }
  if (preset == "seeds") return RunSeeds();
  if (preset == "overhead") return RunOverhead();
  return absl::InvalidArgumentError(absl::StrCat("--preset=", preset, ": seeds or overhead"));
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "load generator for tandem-gateway and tandem-worker (see the comment at the top of "
      "tools/bench/tandem_bench.cc)");
  absl::ParseCommandLine(argc, argv);
  prctl(PR_SET_TIMERSLACK, 1UL);  // precise open-loop arrivals without spinning
  const absl::Status status = tandem::bench::Main();
  if (!status.ok()) {
    std::cerr << "tandem-bench: " << status << "\n";
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
