#include "workers/upstream/upstream_engine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/http_client.h"
#include "common/prometheus_text.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "workers/upstream/chat_request.h"
#include "workers/upstream/chat_stream_decoder.h"
#include "workers/upstream/engine_signals.h"
#include "workers/upstream/sse_parser.h"
#include "workers/upstream/streaming_post.h"

namespace tandem::workers::upstream {

struct UpstreamEngine::Job {
  std::string request_id;
  std::string body;
  bool thinking = false;
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point deadline;
  std::shared_ptr<GenerationSink> sink;
  std::shared_ptr<Cancellation> cancellation;
};

namespace {

// The caller-facing status of an engine's non-200 answer. The engine's faults are UNAVAILABLE
// (the gateway fails over); what describes the request keeps its meaning.
absl::Status HttpError(long code, const std::string& body) {
  std::string message = body;
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      message = e["message"].get<std::string>();
    } else if (e.is_string()) {
      message = e.get<std::string>();
    }
  }
  message = absl::StrCat("engine answered HTTP ", code, ": ", message.substr(0, 512));
  if (code == 400 || code == 422) return absl::InvalidArgumentError(message);
  if (code == 429) return absl::ResourceExhaustedError(message);
  return absl::UnavailableError(message);
}

// The outcome of one engine call as the caller sees it: the transfer's status, an HTTP error,
// or a cancellation told apart by who asked for it (the caller, its deadline, or the worker).
absl::Status CallStatus(const StreamingPost::Result& r, const Cancellation& cancellation) {
  absl::Status status = r.status;
  if (status.ok() && r.http_status != 200) status = HttpError(r.http_status, r.error_body);
  if (status.code() == absl::StatusCode::kCancelled && cancellation.IsExpired()) {
    status = absl::DeadlineExceededError("the deadline passed while the engine answered");
  } else if (status.code() == absl::StatusCode::kCancelled && !cancellation.IsCancelled()) {
    // Stopped by the worker, not by the caller: another worker can take it over.
    status = absl::UnavailableError("the worker is stopping");
  }
  return status;
}

tandem::v1::FinishReason ErrorReason(const absl::Status& s) {
  return s.code() == absl::StatusCode::kCancelled || s.code() == absl::StatusCode::kDeadlineExceeded
             ? tandem::v1::FINISH_REASON_CANCELLED
             : tandem::v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UpstreamEngine>> UpstreamEngine::Create(UpstreamOptions options,
                                                                       EngineInfo info) {
  if (absl::Status s = ValidateUpstreamOptions(options); !s.ok()) return s;
  while (!options.url.empty() && options.url.back() == '/') options.url.pop_back();
  return std::unique_ptr<UpstreamEngine>(new UpstreamEngine(std::move(options), std::move(info)));
}

UpstreamEngine::UpstreamEngine(UpstreamOptions options, EngineInfo info)
    : options_(std::move(options)),
      info_(std::move(info)),
      mirror_(std::make_shared<EngineMetricsMirror>(options_.profile.name,
                                                    static_cast<size_t>(options_.engine_series))) {}

UpstreamEngine::~UpstreamEngine() { Stop(); }

void UpstreamEngine::Start(WorkerMetrics* metrics, std::function<void(bool)> on_ready,
                           std::function<void(std::string)> on_fatal) {
  metrics_ = metrics;
  if (!options_.command.empty()) {
    process_ = std::make_unique<EngineProcess>(
        EngineProcess::Options{options_.command, options_.device, absl::Seconds(1),
                               absl::Seconds(30), options_.stop_timeout});
    process_->Start();
  }
  for (int i = 0; i < options_.max_in_flight; ++i)
    threads_.emplace_back([this] { DispatchLoop(); });
  threads_.emplace_back([this, on_ready = std::move(on_ready), on_fatal = std::move(on_fatal)] {
    HealthLoop(on_ready, on_fatal);
  });
  if (!options_.profile.metrics_path.empty()) threads_.emplace_back([this] { MetricsLoop(); });
}

void UpstreamEngine::Drain() {
  absl::MutexLock l(&mu_);
  draining_ = true;
}

bool UpstreamEngine::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  absl::MutexLock l(&mu_);
  while (!queue_.empty() || in_flight_.load() > 0) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return false;
    idle_cv_.WaitWithTimeout(&mu_, absl::FromChrono(left));
  }
  return true;
}

void UpstreamEngine::Stop() {
  std::deque<std::unique_ptr<Job>> left;
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
    draining_ = true;
    left.swap(queue_);
    queued_.store(0);
    work_cv_.SignalAll();
  }
  stop_.store(true);
  for (auto& job : left) {
    job->sink->OnFinished(absl::UnavailableError("the worker is stopping"),
                          tandem::v1::FINISH_REASON_UNSPECIFIED, 0);
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  if (process_ != nullptr) process_->Stop();
}

bool UpstreamEngine::Sleep(absl::Duration d) {
  absl::MutexLock l(&mu_);
  return !mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
}

absl::StatusOr<std::shared_ptr<Cancellation>> UpstreamEngine::Submit(
    const tandem::v1::WorkerGenerateRequest& request, const std::string& request_id,
    std::chrono::steady_clock::time_point arrival, std::chrono::steady_clock::time_point deadline,
    std::shared_ptr<GenerationSink> sink) {
  ChatRequestOptions o{"", options_.vision, /*stream=*/true};
  {
    absl::MutexLock l(&mu_);
    o.served_model = served_model_;
  }
  absl::StatusOr<std::string> body = BuildChatRequest(request, options_.profile, o);
  if (!body.ok()) {
    metrics_->rejected_invalid.Increment();
    return body.status();
  }
  auto job = std::make_unique<Job>();
  job->request_id = request_id;
  job->body = *std::move(body);
  job->thinking = info_.reasoning && request.reasoning().mode() != tandem::v1::REASONING_MODE_OFF;
  job->arrival = arrival;
  job->deadline = deadline;
  job->sink = std::move(sink);
  job->cancellation = std::make_shared<Cancellation>();
  std::shared_ptr<Cancellation> cancellation = job->cancellation;
  {
    absl::MutexLock l(&mu_);
    if (draining_) {
      metrics_->rejected_draining.Increment();
      return absl::UnavailableError("worker is draining and accepts no new requests");
    }
    if (health_.load() != Health::kReady) {
      metrics_->rejected_loading.Increment();
      return absl::UnavailableError(NotReadyReason());
    }
    const int32_t free_slots = options_.max_in_flight - in_flight_.load();
    if (static_cast<int32_t>(queue_.size()) >= options_.max_queue + std::max(0, free_slots)) {
      metrics_->rejected_queue_full.Increment();
      return absl::ResourceExhaustedError(
          absl::StrCat("worker queue is full (", options_.max_queue, " waiting, --max_queue)"));
    }
    queue_.push_back(std::move(job));
    queued_.store(static_cast<int32_t>(queue_.size()));
    work_cv_.Signal();
  }
  PublishLoad(engine_waiting_.load(), engine_running_.load());
  return cancellation;
}

std::string UpstreamEngine::NotReadyReason() const {
  return absl::StrCat(
      "the engine at ", options_.url, " is ",
      health_.load() == Health::kStarting ? "starting" : "failing its health checks",
      "; this worker accepts no requests until it is ready");
}

void UpstreamEngine::DispatchLoop() {
  StreamingPost post(StreamingPost::Options{options_.tls, options_.api_key,
                                            options_.connect_timeout, options_.idle_timeout});
  for (;;) {
    std::unique_ptr<Job> job;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      while (!ready()) work_cv_.Wait(&mu_);
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(static_cast<int32_t>(queue_.size()));
      in_flight_.fetch_add(1);  // credited at dispatch: the engine's gauges lag
    }
    PublishLoad(engine_waiting_.load(), engine_running_.load());
    Run(*job, post);
    job.reset();
    {
      absl::MutexLock l(&mu_);
      in_flight_.fetch_sub(1);
      idle_cv_.SignalAll();
    }
    PublishLoad(engine_waiting_.load(), engine_running_.load());
  }
}

// One engine call's stream as Run relays it: the SSE framing, the decoder of the engine's
// chunks, and what has been passed on to the sink so far.
struct UpstreamEngine::Stream {
  Stream(const UpstreamOptions& options, const Job& job, double queue_seconds)
      : sse(options.max_event_bytes),
        decoder(options.profile, job.thinking),
        queue_seconds(queue_seconds) {}

  SseParser sse;
  ChatStreamDecoder decoder;
  std::vector<SseParser::Event> events;  // scratch, reused across reads
  const double queue_seconds;            // arrival to dispatch
  bool started = false;                  // OnStarted was called
  std::chrono::steady_clock::time_point last_token;
  int32_t tokens_seen = 0;  // tokens passed to the sink so far
};

bool UpstreamEngine::EndedWhileQueued(Job& job, std::chrono::steady_clock::time_point dispatched) {
  if (!job.cancellation->IsCancelled() && dispatched < job.deadline) return false;
  const bool expired = job.cancellation->IsExpired() || dispatched >= job.deadline;
  (expired ? metrics_->finished_deadline : metrics_->finished_cancelled).Increment();
  job.sink->OnFinished(expired ? absl::DeadlineExceededError(
                                     "the deadline passed while the request waited in the worker")
                               : absl::CancelledError("cancelled while waiting in the worker"),
                       tandem::v1::FINISH_REASON_CANCELLED, 0);
  return true;
}

absl::Status UpstreamEngine::Relay(Job& job, Stream& stream, absl::string_view bytes) {
  if (!stream.started) {
    stream.started = true;
    job.sink->OnStarted(0, 0, stream.queue_seconds);  // the prompt's size comes with the usage, last
  }
  stream.events.clear();
  if (absl::Status s = stream.sse.Feed(bytes, &stream.events); !s.ok()) {
    return absl::DataLossError(s.message());
  }
  for (const SseParser::Event& e : stream.events) {
    if (stream.decoder.done()) break;
    ChatStreamDecoder::Piece piece;
    absl::Status s = stream.decoder.Feed(e.data, &piece);
    if (!s.ok()) return absl::DataLossError(s.message());
    if (piece.tokens == 0 && piece.text.empty()) continue;
    const auto now = std::chrono::steady_clock::now();
    if (stream.tokens_seen == 0) {
      metrics_->time_to_first_token.Observe(Seconds(now - job.arrival));
    } else if (piece.tokens > 0) {
      metrics_->time_per_output_token.Observe(Seconds(now - stream.last_token) / piece.tokens);
    }
    stream.last_token = now;
    stream.tokens_seen += piece.tokens;
    job.sink->OnText(piece.text, piece.tokens);
  }
  return absl::OkStatus();
}

void UpstreamEngine::Complete(Job& job, Stream& stream, absl::Status status) {
  ChatStreamDecoder& decoder = stream.decoder;
  ChatStreamDecoder::Piece tail;
  if (status.ok()) {
    absl::Status s = decoder.Finish(&tail);
    if (!s.ok()) status = absl::DataLossError(s.message());
  }
  stream.tokens_seen += tail.tokens;
  // The gateway counts the tokens of the chunks: those the engine generated without text (a
  // partial UTF-8 character, a special token) are added from its usage at the end.
  const int32_t untold =
      status.ok() ? std::max(0, decoder.completion_tokens() - stream.tokens_seen) : 0;
  if (!tail.text.empty() || untold > 0) job.sink->OnText(tail.text, tail.tokens + untold);
  const auto end = std::chrono::steady_clock::now();
  metrics_->e2e_latency.Observe(Seconds(end - job.arrival));
  if (!status.ok()) {
    (status.code() == absl::StatusCode::kCancelled          ? metrics_->finished_cancelled
     : status.code() == absl::StatusCode::kDeadlineExceeded ? metrics_->finished_deadline
                                                            : metrics_->finished_error)
        .Increment();
    spdlog::info("request_id={} engine call failed: {}", job.request_id, status.ToString());
    job.sink->OnFinished(status, ErrorReason(status), decoder.completion_tokens());
    return;
  }
  metrics_->prompt_tokens.Increment(decoder.prompt_tokens());
  metrics_->generation_tokens.Increment(decoder.completion_tokens());
  (decoder.finish_reason() == tandem::v1::FINISH_REASON_LENGTH ? metrics_->finished_length
                                                               : metrics_->finished_stop)
      .Increment();
  if (decoder.prompt_tokens() > 0) {
    job.sink->OnStarted(decoder.prompt_tokens(), 0, stream.queue_seconds);
  }
  job.sink->OnFinished(absl::OkStatus(), decoder.finish_reason(), decoder.completion_tokens());
}

void UpstreamEngine::Run(Job& job, StreamingPost& post) {
  const auto dispatched = std::chrono::steady_clock::now();
  // Ended while it waited here: the engine never hears of it.
  if (EndedWhileQueued(job, dispatched)) return;
  Stream stream(options_, job, Seconds(dispatched - job.arrival));
  metrics_->queue_time.Observe(stream.queue_seconds);
  auto on_body = [&](absl::string_view bytes) { return Relay(job, stream, bytes); };
  auto should_stop = [&] { return job.cancellation->IsCancelled() || stop_.load(); };
  const std::string url = options_.url + options_.profile.chat_path;
  const StreamingPost::Result r = post.Post(url, job.body, job.deadline, on_body, should_stop);
  Complete(job, stream, CallStatus(r, *job.cancellation));
}

absl::Status UpstreamEngine::CheckServedModel() {
  CurlHttpClient http(options_.tls, "", AuthHeaders());
  absl::StatusOr<std::string> body =
      http.Get(options_.url + options_.profile.models_path, options_.health_timeout);
  if (!body.ok()) return body.status();
  nlohmann::json j = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  std::vector<std::string> ids;
  if (j.is_object() && j.contains("data") && j["data"].is_array()) {
    for (const auto& m : j["data"]) {
      if (m.is_object() && m.contains("id") && m["id"].is_string()) ids.push_back(m["id"]);
    }
  }
  if (ids.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the engine at ", options_.url, options_.profile.models_path, " lists no model"));
  }
  if (options_.served_model.empty()) {
    if (ids.size() == 1) {
      spdlog::info("engine at {} serves {}", options_.url, ids[0]);
      absl::MutexLock l(&mu_);
      served_model_ = ids[0];
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(
        absl::StrCat("the engine at ", options_.url, " serves several models (",
                     absl::StrJoin(ids, ", "), "): name one with --upstream_model"));
  }
  if (std::find(ids.begin(), ids.end(), options_.served_model) == ids.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--upstream_model is '", options_.served_model, "' but the engine at ",
                     options_.url, " serves ", absl::StrJoin(ids, ", ")));
  }
  absl::MutexLock l(&mu_);
  served_model_ = options_.served_model;
  return absl::OkStatus();
}

bool UpstreamEngine::ProbeDue(std::chrono::steady_clock::time_point last_probe) const {
  return options_.probe_interval > absl::ZeroDuration() && in_flight_.load() == 0 &&
         std::chrono::steady_clock::now() - last_probe >=
             absl::ToChronoNanoseconds(options_.probe_interval);
}

absl::Status UpstreamEngine::Probe(CurlHttpClient& http) {
  std::string model;
  {
    absl::MutexLock l(&mu_);
    model = served_model_;
  }
  const nlohmann::json request = {
      {"model", model},
      {"messages", nlohmann::json::array({{{"role", "user"}, {"content", "Say OK."}}})},
      {"max_tokens", 1},
      {"stream", false}};
  absl::StatusOr<std::string> body = http.PostJson(options_.url + options_.profile.chat_path,
                                                   request.dump(), options_.health_timeout);
  if (!body.ok())
    return absl::UnavailableError(absl::StrCat("one-token probe: ", body.status().message()));
  const nlohmann::json answer = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  auto choices = answer.is_object() ? answer.find("choices") : answer.end();
  if (!answer.is_object() || choices == answer.end() || !choices->is_array() || choices->empty()) {
    return absl::UnavailableError(
        absl::StrCat("one-token probe: the answer has no choices: ", body->substr(0, 200)));
  }
  return absl::OkStatus();
}

std::vector<std::string> UpstreamEngine::AuthHeaders() const {
  if (options_.api_key.empty()) return {};
  return {absl::StrCat("Authorization: Bearer ", options_.api_key)};
}

void UpstreamEngine::HealthLoop(std::function<void(bool)> on_ready,
                                std::function<void(std::string)> on_fatal) {
  CurlHttpClient http(options_.tls, "", AuthHeaders());
  const std::string url = options_.url + options_.profile.health_path;
  bool ever_ready = false;
  std::string last_start_warning;
  int good = 0;
  int bad = 0;
  auto last_probe = std::chrono::steady_clock::time_point();
  do {
    absl::Status r = http.Get(url, options_.health_timeout).status();
    if (r.ok() && ever_ready && ProbeDue(last_probe)) {
      r = Probe(http);
      // A failed probe is repeated at every check until one passes: failures count in a row.
      last_probe =
          r.ok() ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    }
    const Health before = health_.load();
    Health now = before;
    if (r.ok()) {
      bad = 0;
      if (before != Health::kReady && ++good >= (ever_ready ? options_.health_successes : 1)) {
        if (!ever_ready) {
          if (absl::Status s = CheckServedModel(); !s.ok()) {
            if (s.code() == absl::StatusCode::kFailedPrecondition) {
              on_fatal(std::string(s.message()));
              return;
            }
            // The models list not answering yet: still starting (said once per reason).
            if (s.message() != last_start_warning) {
              last_start_warning = std::string(s.message());
              spdlog::warn("engine at {}: its models list does not answer yet: {}", options_.url,
                           last_start_warning);
            }
            continue;
          }
          if (options_.probe_interval > absl::ZeroDuration()) {
            last_probe = std::chrono::steady_clock::now();
            if (absl::Status p = Probe(http); !p.ok()) {
              if (p.message() != last_start_warning) {
                last_start_warning = std::string(p.message());
                spdlog::warn("engine at {}: {}", options_.url, last_start_warning);
              }
              continue;
            }
          }
        }
        ever_ready = true;
        now = Health::kReady;
      }
    } else {
      good = 0;
      // Before the first ready, a refused connection or a loading status is "starting".
      if (ever_ready && ++bad >= options_.health_failures) now = Health::kDead;
    }
    if (now != before) {
      health_.store(now);
      spdlog::info("engine at {} is {} ({})", options_.url,
                   now == Health::kReady  ? "ready"
                   : now == Health::kDead ? "dead"
                                          : "starting",
                   r.ok() ? std::string("health check passed") : std::string(r.message()));
      on_ready(now == Health::kReady);
    }
  } while (Sleep(options_.health_interval));
}

void UpstreamEngine::PublishLoad(double engine_waiting, double engine_running) const {
  const double own = in_flight_.load();
  metrics_->waiting.Set(queued_.load() + engine_waiting);
  metrics_->running.Set(std::max({own - engine_waiting, engine_running, 0.0}));
}

void UpstreamEngine::MetricsLoop() {
  CurlHttpClient http(options_.tls, "", AuthHeaders());
  const std::string url = options_.url + options_.profile.metrics_path;
  auto last_good = std::chrono::steady_clock::time_point();
  const auto stale_after = absl::ToChronoNanoseconds(options_.metrics_stale);
  do {
    absl::StatusOr<std::string> body = http.Get(url, options_.metrics_timeout);
    absl::StatusOr<std::vector<Sample>> samples =
        body.ok() ? ParsePrometheusText(*body) : absl::StatusOr<std::vector<Sample>>(body.status());
    const auto now = std::chrono::steady_clock::now();
    if (samples.ok()) {
      last_good = now;
      const EngineSignals s = ReadEngineSignals(*samples, options_.profile);
      engine_waiting_.store(s.waiting.value_or(0));
      engine_running_.store(s.running.value_or(0));
      if (s.kv_cache_usage) metrics_->kv_cache_usage.Set(*s.kv_cache_usage);
      metrics_->engine_metrics_stale.Set(0);
      mirror_->Update(std::move(*samples));
    } else if (now - last_good > stale_after) {
      // Stale: the worker's own counts stand alone, and the gauge tells the policies.
      engine_waiting_.store(0);
      engine_running_.store(0);
      metrics_->engine_metrics_stale.Set(1);
      mirror_->Clear();
    }
    if (last_good != std::chrono::steady_clock::time_point()) {
      metrics_->engine_metrics_age.Set(Seconds(now - last_good));
    }
    PublishLoad(engine_waiting_.load(), engine_running_.load());
  } while (Sleep(options_.metrics_interval));
}

}  // namespace tandem::workers::upstream
