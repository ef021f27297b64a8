#include "gateway/http_front/openai_call.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/log_text.h"
#include "gateway/intake/sessions.h"

namespace tandem::gateway {

using tandem::v1::WorkerGenerateChunk;

// The link from the connection's OnClientGone back to the call, cut when the call lets go of
// the connection: the callback may come after that, when the call may be gone.
struct OpenAiCall::Link {
  absl::Mutex mu;
  OpenAiCall* call ABSL_GUARDED_BY(mu) = nullptr;
};

void OpenAiCall::Start(Dispatcher* dispatcher, std::shared_ptr<HttpExchange> exchange,
                       absl::StatusOr<openai::ChatRequest> decoded,
                       std::chrono::system_clock::time_point deadline) {
  auto caller = std::make_unique<HttpCallerContext>(exchange->request(), deadline);
  HttpCallerContext* view = caller.get();
  auto* call = new OpenAiCall(dispatcher, std::move(exchange), std::move(caller), view);
  absl::Status parsed = decoded.status();
  if (decoded.ok()) {
    call->stream_ = decoded->stream;
    call->include_usage_ = decoded->include_usage;
    call->request() = std::move(decoded->request);
    // The session: the x-session-id header, else OpenAI's `user` (one conversation per user
    // unless the client names them).
    // A `user` that cannot be a session id (OpenAI's is free text) names no session.
    if (view->SessionIdHeader().empty()) {
      auto user = call->request().labels().find("user");
      if (user != call->request().labels().end() &&
          IsPlainToken(user->second, Sessions::kMaxIdBytes)) {
        call->request().set_session_id(user->second);
      }
    }
  }
  // Linked before Begin, so that FinishOnce (which may run on a worker's thread before Begin
  // returns) always cuts the link after it was made.
  {
    absl::MutexLock l(&call->link_->mu);
    call->link_->call = call;
  }
  // Held through Start: the answer may complete, and drop the front's reference, on another
  // thread while Begin is still running here.
  call->Ref();
  const absl::Status s = call->Begin(parsed);
  if (!s.ok()) {
    const grpc::Status status = ToGrpcStatus(s);
    call->Record(status);
    {
      absl::MutexLock l(&call->link_->mu);
      call->link_->call = nullptr;
    }
    call->RespondError(status);
    call->Unref();
    call->Unref();
    return;
  }
  call->exchange_->OnClientGone([link = call->link_] {
    OpenAiCall* c = nullptr;
    {
      absl::MutexLock l(&link->mu);
      c = link->call;
      if (c == nullptr) return;
      c->Ref();
    }
    c->http_->Cancel();
    c->CancelAll();
    c->Unref();
  });
  call->Unref();
}

OpenAiCall::OpenAiCall(Dispatcher* dispatcher, std::shared_ptr<HttpExchange> exchange,
                       std::unique_ptr<HttpCallerContext> caller, HttpCallerContext* caller_view)
    : GenerationCall(dispatcher, std::move(caller), "chat.completions"),
      exchange_(std::move(exchange)),
      http_(caller_view),
      link_(std::make_shared<Link>()),
      created_(absl::ToUnixSeconds(absl::Now())) {}

const openai::AnswerMeta& OpenAiCall::Meta() {
  // Built once, at the first chunk (the decision is final by then), not per streamed chunk.
  if (!meta_.has_value()) {
    meta_ = openai::AnswerMeta{.id = absl::StrCat("chatcmpl-", admission().request_id),
                               .created = created_,
                               .model = admission().decision.model};
  }
  return *meta_;
}

HttpResponse OpenAiCall::Head(int status, const char* content_type) const {
  HttpResponse r;
  r.status = status;
  r.headers.emplace_back("content-type", content_type);
  const Admission& a = admission();
  if (!a.request_id.empty()) r.headers.emplace_back("x-tandem-request-id", a.request_id);
  if (!a.decision.model.empty()) {
    r.headers.emplace_back("x-tandem-model", a.decision.model);
    r.headers.emplace_back("x-tandem-class", a.decision.request_class);
    r.headers.emplace_back("x-tandem-rule", a.decision.rule);
    r.headers.emplace_back("x-tandem-reasoning", router::ReasoningModeName(a.decision.reasoning));
  }
  if (!a.session.token().empty()) {
    r.headers.emplace_back("x-tandem-session-token", a.session.token());
  }
  return r;
}

void OpenAiCall::Split(const WorkerGenerateChunk& chunk, bool last) {
  reasoning_.clear();
  content_.clear();
  piece_calls_.clear();
  if (!parser_checked_) {
    parser_checked_ = true;
    if (request().tools_size() > 0) parser_.emplace(request().tools(), admission().request_id);
    // The answer opens inside a thinking block unless the decision (the caller's, a rule's)
    // turned thinking off.
    splitter_ = ThinkSplitter(admission().decision.reasoning != router::ReasoningMode::kOff);
  }
  std::string* content = parser_.has_value() ? &unparsed_ : &content_;
  unparsed_.clear();
  splitter_.Feed(chunk.text(), &reasoning_, content);
  if (last) splitter_.Flush(&reasoning_, content);
  if (chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
    finish_ = chunk.finish_reason();
  }
  if (!parser_.has_value()) return;
  // Tool calls are looked for in the answer, after the thinking.
  parser_->Feed(unparsed_, &content_, &piece_calls_);
  if (last) finish_ = parser_->Finish(finish_, &content_);
}

void OpenAiCall::Relay(const WorkerGenerateChunk& chunk) {
  const bool last = chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED;
  Split(chunk, last);
  if (!stream_) {
    answer_reasoning_ += reasoning_;
    answer_content_ += content_;
    for (auto& c : piece_calls_) answer_calls_.push_back(std::move(c));
    Resume();
    return;
  }
  const bool first = !started_stream_;
  if (first) {
    HttpResponse head = Head(200, "text/event-stream");
    head.headers.emplace_back("cache-control", "no-cache");
    exchange_->StartStream(std::move(head));
    started_stream_ = true;
  }
  out_.clear();
  if (first || last || !reasoning_.empty() || !content_.empty() || !piece_calls_.empty()) {
    openai::AppendChunkEvent(Meta(), first, reasoning_, content_, piece_calls_, calls_sent_,
                             last ? finish_ : tandem::v1::FINISH_REASON_UNSPECIFIED, &out_);
    calls_sent_ += static_cast<int>(piece_calls_.size());
  }
  if (last && include_usage_) {
    tandem::v1::Usage usage;
    tandem::v1::Timings timings;
    tandem::v1::Recovery recovery;
    FillFinal(&usage, &timings, &recovery);
    openai::AppendUsageEvent(Meta(), usage, &out_);
  }
  if (out_.empty()) {
    Resume();
    return;
  }
  writes_.WriteStarted();
  exchange_->Write(out_, [this](bool ok) { OnWriteDone(ok); });
}

void OpenAiCall::OnWriteDone(bool ok) {
  switch (writes_.WriteDone(ok)) {
    case RelayWrites::Next::kFinish:
      FinishOnce();
      return;
    case RelayWrites::Next::kClientGone:
      // The workers stop; the reads then end and release the holds.
      http_->Cancel();
      CancelAll();
      break;
    case RelayWrites::Next::kResume:
      break;
  }
  Resume();
}

void OpenAiCall::Complete(const grpc::Status& status) {
  if (writes_.UpstreamDone(status)) FinishOnce();
}

void OpenAiCall::FinishOnce() {
  const std::optional<grpc::Status> finish = writes_.TakeFinish();
  if (!finish.has_value()) return;
  const grpc::Status& status = *finish;
  Record(status);
  {
    absl::MutexLock l(&link_->mu);
    link_->call = nullptr;
  }
  if (!started_stream_) {
    if (status.ok()) {
      tandem::v1::Usage usage;
      tandem::v1::Timings timings;
      tandem::v1::Recovery recovery;
      FillFinal(&usage, &timings, &recovery);
      HttpResponse r = Head(200, "application/json");
      r.body = openai::CompletionJson(Meta(), answer_reasoning_, answer_content_, answer_calls_,
                                      finish_, usage);
      exchange_->Respond(std::move(r));
    } else {
      RespondError(status);
    }
  } else {
    // The status line went out with the first chunk: an error now is an event in the stream.
    out_.clear();
    if (status.ok()) {
      openai::AppendDoneEvent(&out_);
    } else {
      openai::AppendErrorEvent(openai::ForOpenAi(FromGrpcStatus(status)), &out_);
    }
    exchange_->EndStream(out_);
  }
  ReleaseSlot();
  Unref();
}

void OpenAiCall::RespondError(const grpc::Status& grpc_status) {
  const absl::Status status = openai::ForOpenAi(FromGrpcStatus(grpc_status));
  HttpResponse r = Head(openai::HttpStatusFor(status.code()), "application/json");
  if (r.status == 401) r.headers.emplace_back("www-authenticate", "Bearer");
  if (retry_after() > absl::ZeroDuration()) {
    // Retry-After in whole seconds (HTTP's), and retry-after-ms, which OpenAI's SDKs read first.
    r.headers.emplace_back(
        "retry-after",
        absl::StrCat(static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(retry_after())))));
    r.headers.emplace_back("retry-after-ms", absl::StrCat(http_->retry_after_ms()));
  }
  r.body = openai::ErrorJson(status);
  exchange_->Respond(std::move(r));
}

}  // namespace tandem::gateway
