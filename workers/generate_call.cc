#include "workers/generate_call.h"

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/call_metadata.h"
#include "common/grpc_status.h"
#include "common/log_text.h"
#include "spdlog/spdlog.h"
#include "workers/request_images.h"

namespace tandem::workers {
namespace {

using tandem::v1::WorkerGenerateChunk;

Clock::TimePoint SteadyDeadline(std::chrono::system_clock::time_point deadline) {
  if (IsNoDeadline(deadline)) return Clock::TimePoint::max();
  const auto left = deadline - std::chrono::system_clock::now();
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
}

}  // namespace

// State shared by the engine thread (producer) and gRPC (write completions). Start* and Finish
// are called outside the lock because gRPC may run reactions inline.
class GenerateCall::Bridge final : public GenerationSink {
 public:
  explicit Bridge(GenerateCall* call) : call_(call) {}

  void OnStarted(int32_t prompt_tokens, int32_t cached_prompt_tokens, double queue_seconds) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    pending_.set_prompt_tokens(prompt_tokens);
    pending_.set_cached_prompt_tokens(cached_prompt_tokens);
    pending_.set_queue_seconds(queue_seconds);
    started_ = true;
    // The first chunk goes out with the first token.
  }
  void OnText(std::string_view text, int32_t tokens) override ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    pending_.mutable_text()->append(text);
    pending_.set_tokens(pending_.tokens() + tokens);
    has_pending_ = true;
    PumpAndUnlock();
  }
  void OnFinished(const absl::Status& status, tandem::v1::FinishReason reason,
                  int32_t completion_tokens) override ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    finished_ = true;
    final_status_ = ToGrpcStatus(status);
    completion_tokens_ = completion_tokens;
    if (status.ok()) {
      pending_.set_finish_reason(reason);
      pending_.set_completion_tokens(completion_tokens);
      has_pending_ = true;
    } else if (pending_.prompt_tokens() > 0) {
      has_pending_ = true;  // prompt size and queue time still reach the gateway's accounting
    }
    PumpAndUnlock();
  }
  void WriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    write_in_flight_ = false;
    if (!ok) {
      broken_ = true;
      has_pending_ = false;
    }
    PumpAndUnlock();
  }
  void Detach() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    call_ = nullptr;
  }
  // The scheduler's handle on the admitted work; a cancel that came before it applies now.
  void SetCancellation(std::shared_ptr<Cancellation> cancellation) ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    cancellation_ = cancellation;
    const CancelKind pending = cancel_;
    mu_.Unlock();
    ApplyCancel(cancellation.get(), pending);
  }
  // The client went away (or its deadline passed): the work stops, or never starts.
  void CancelWork(bool expired) ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    if (cancel_ == CancelKind::kNone) cancel_ = expired ? CancelKind::kExpire : CancelKind::kCancel;
    std::shared_ptr<Cancellation> cancellation = cancellation_;
    const CancelKind kind = cancel_;
    mu_.Unlock();
    ApplyCancel(cancellation.get(), kind);
  }
  bool cancelled() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    return cancel_ != CancelKind::kNone;
  }

 private:
  enum class CancelKind { kNone, kCancel, kExpire };
  static void ApplyCancel(Cancellation* cancellation, CancelKind kind) {
    if (cancellation == nullptr || kind == CancelKind::kNone) return;
    if (kind == CancelKind::kExpire) {
      cancellation->Expire();
    } else {
      cancellation->Cancel();
    }
  }

  // Starts the next write or the Finish, if one is due. Releases mu_ on every path, before
  // calling gRPC.
  void PumpAndUnlock() ABSL_UNLOCK_FUNCTION(mu_) {
    if (call_ == nullptr || write_in_flight_ || finish_started_) {
      mu_.Unlock();
      return;
    }
    GenerateCall* call = call_;
    if (has_pending_ && !broken_) {
      call->out_.Clear();
      call->out_.Swap(&pending_);
      has_pending_ = false;
      write_in_flight_ = true;
      mu_.Unlock();
      call->StartWrite(&call->out_);
      return;
    }
    if (finished_) {
      finish_started_ = true;
      grpc::Status status = broken_ && final_status_.ok()
                                ? grpc::Status(grpc::StatusCode::CANCELLED, "client went away")
                                : final_status_;
      const int32_t completion_tokens = completion_tokens_;
      mu_.Unlock();
      call->LogEnd(status, completion_tokens);
      call->Finish(status);
      return;
    }
    mu_.Unlock();
  }

  absl::Mutex mu_;
  GenerateCall* call_ ABSL_GUARDED_BY(mu_);
  WorkerGenerateChunk pending_ ABSL_GUARDED_BY(mu_);
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_started_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  int32_t completion_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<Cancellation> cancellation_ ABSL_GUARDED_BY(mu_);
  CancelKind cancel_ ABSL_GUARDED_BY(mu_) = CancelKind::kNone;
};

GenerateCall::GenerateCall(const EngineInfo& engine_info, const Engine* engine,
                           Scheduler* scheduler, RemoteEngine* upstream, WorkerMetrics* metrics,
                           const RequestLimits& limits, LogRateLimiter* rejected_log,
                           ImagePool* image_pool, tandem::v1::WorkerInfo::State state,
                           grpc::CallbackServerContext* context,
                           const tandem::v1::WorkerGenerateRequest* request)
    : bridge_(std::make_shared<Bridge>(this)),
      info_(engine_info),
      engine_(engine),
      scheduler_(scheduler),
      upstream_(upstream),
      metrics_(metrics),
      limits_(&limits),
      request_(request),
      rejected_log_(rejected_log),
      // Only a valid id is logged as it is (the request is refused otherwise).
      request_id_(request->request_id().empty() ||
                          IsPlainToken(request->request_id(), kMaxRequestIdBytes)
                      ? request->request_id()
                      : QuoteForLog(request->request_id())),
      start_(std::chrono::steady_clock::now()),
      deadline_(WorkerDeadline(*context, std::chrono::system_clock::now())) {
  if (state != tandem::v1::WorkerInfo::STATE_READY) {
    RejectNotReady(state);
    return;
  }
  if (upstream != nullptr) {
    // The engine server tokenizes and checks the context itself; its refusals come back as
    // the call's status.
    absl::Status status = ValidateGenerateRequest(*request, info_.max_output_tokens, limits);
    if (!status.ok()) {
      metrics->rejected_invalid.Increment();
      Reject(status);
      return;
    }
    SubmitUpstream();
    return;
  }
  absl::StatusOr<PlannedGeneration> planned = ToGenerationRequest(*request, *engine, limits);
  if (!planned.ok()) {
    metrics->rejected_invalid.Increment();
    Reject(planned.status());
    return;
  }
  if (planned->images.parts.empty()) {
    Admit(std::move(planned->request));
    return;
  }
  // Once queued, the job owns the rest of the call: nothing here touches it after Submit.
  absl::Status queued = image_pool->Submit([this, planned = std::move(*planned)]() mutable {
    PrepareImagesAndAdmit(std::move(planned));
  });
  if (!queued.ok()) {
    metrics->rejected_image_pool_full.Increment();
    Reject(queued);
  }
}

void GenerateCall::OnWriteDone(bool ok) {
  if (!ok) bridge_->CancelWork(/*expired=*/false);
  bridge_->WriteDone(ok);
}

void GenerateCall::OnCancel() {
  // gRPC cancels calls whose deadline passed; tell that apart from a client cancelling. The
  // deadline fires upstream first and its cancel can arrive just before ours: within 100 ms of
  // it the cancel is the deadline. (The gateway's kWorkerTimeoutHeader makes deadline_ fire
  // here first; a caller without it is left with this.)
  bridge_->CancelWork(std::chrono::system_clock::now() + std::chrono::milliseconds(100) >=
                      deadline_);
}

void GenerateCall::OnDone() {
  bridge_->Detach();
  delete this;
}

void GenerateCall::RejectNotReady(tandem::v1::WorkerInfo::State state) {
  const bool draining = state == tandem::v1::WorkerInfo::STATE_DRAINING;
  (draining ? metrics_->rejected_draining : metrics_->rejected_loading).Increment();
  Reject(absl::UnavailableError(!draining && upstream_ != nullptr
                                    ? upstream_->NotReadyReason()
                                    : absl::StrCat("worker is ",
                                                   draining ? "draining" : "loading its model",
                                                   " and accepts no new requests")));
}

void GenerateCall::SubmitUpstream() {
  std::shared_ptr<Bridge> bridge = bridge_;
  const std::string request_id = request_id_;
  const std::string model = info_.model_name;
  auto submitted =
      upstream_->Submit(*request_, request_id_, start_, SteadyDeadline(deadline_), bridge);
  if (!submitted.ok()) {
    Reject(submitted.status());
    return;
  }
  bridge->SetCancellation(std::move(*submitted));
  spdlog::info("request_id={} model={} start engine=upstream", request_id, model);
}

void GenerateCall::PrepareImagesAndAdmit(PlannedGeneration planned) {
  const ImagePlan& plan = planned.images;
  if (bridge_->cancelled()) {
    Reject(absl::CancelledError("the call ended while its images waited for an image thread"));
    return;
  }
  if (std::chrono::system_clock::now() >= deadline_) {
    Reject(absl::DeadlineExceededError(
        "the deadline passed while the request's images waited for an image thread"));
    return;
  }
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<RequestImages> images =
      PrepareRequestImages(request_->messages(), plan, *engine_->ImageProcessor(), *limits_);
  metrics_->image_prepare_duration.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (!images.ok()) {
    metrics_->rejected_invalid.Increment();
    Reject(images.status());
    return;
  }
  // The prompt was laid out with the tokens the headers gave; the resize must agree.
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    if (images->tokens[i] != plan.parts[i].tokens) {
      Reject(absl::InternalError("an image's token count changed between header and decode"));
      return;
    }
  }
  planned.request.images = std::move(images->images);
  Admit(std::move(planned.request));
}

void GenerateCall::Admit(GenerationRequest g) {
  const EngineInfo& info = info_;
  g.arrival = start_;
  g.deadline = SteadyDeadline(deadline_);
  const size_t prompt_tokens = g.prompt.size();
  const int32_t max_tokens = g.max_tokens;
  const std::string request_id = request_id_;
  std::shared_ptr<Bridge> bridge = bridge_;
  auto submitted = scheduler_->Submit(std::move(g), bridge);
  if (!submitted.ok()) {
    Reject(submitted.status());
    return;
  }
  bridge->SetCancellation(std::move(*submitted));
  spdlog::info("request_id={} model={} start prompt_tokens={} max_tokens={}", request_id,
               info.model_name, prompt_tokens, max_tokens);
}

void GenerateCall::Reject(const absl::Status& status) {
  int64_t suppressed = 0;
  if (rejected_log_->Allow(&suppressed)) {
    spdlog::info("request_id={} rejected status={} message={}{}", request_id_,
                 GrpcCodeName(static_cast<grpc::StatusCode>(status.code())),
                 QuoteForLog(status.message(), kMaxLoggedMessageBytes),
                 suppressed > 0 ? absl::StrCat(" (", suppressed, " refusals not logged)") : "");
  }
  Finish(ToGrpcStatus(status));
}

void GenerateCall::LogEnd(const grpc::Status& status, int32_t completion_tokens) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  spdlog::info("request_id={} end status={} completion_tokens={} duration_ms={:.3f}", request_id_,
               GrpcCodeName(status.error_code()), completion_tokens, seconds * 1e3);
}

}  // namespace tandem::workers
