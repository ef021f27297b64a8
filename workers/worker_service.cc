#include "workers/worker_service.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

// One Generate call. The engine thread reaches it through Bridge, which outlives the reactor
// (the scheduler may hold it after the RPC is gone). A request with images has them decoded
// and resized on the image pool, never on this gRPC thread: gRPC's threads answer health
// checks and every other call, and must not wait on a decode.
class GenerateCall final : public grpc::ServerWriteReactor<WorkerGenerateChunk> {
 public:
  // `state` is the worker's: only READY workers accept work.
  // `engine` and `scheduler` are null for a worker in front of an engine server (`upstream`).
  GenerateCall(const EngineInfo& engine_info, const Engine* engine, Scheduler* scheduler,
               RemoteEngine* upstream, WorkerMetrics* metrics, const RequestLimits& limits,
               LogRateLimiter* rejected_log, ImagePool* image_pool,
               tandem::v1::WorkerInfo::State state, grpc::CallbackServerContext* context,
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
    const EngineInfo& info = info_;
    if (state != tandem::v1::WorkerInfo::STATE_READY) {
      (state == tandem::v1::WorkerInfo::STATE_DRAINING ? metrics->rejected_draining
                                                       : metrics->rejected_loading)
          .Increment();
      const bool draining = state == tandem::v1::WorkerInfo::STATE_DRAINING;
      Reject(absl::UnavailableError(!draining && upstream != nullptr
                                        ? upstream->NotReadyReason()
                                        : absl::StrCat("worker is ",
                                                       draining ? "draining" : "loading its model",
                                                       " and accepts no new requests")));
      return;
    }
    absl::Status status =
        request->request_id().empty() ? absl::OkStatus() : ValidateRequestId(request->request_id());
    if (status.ok()) status = ValidateReasoning(request->reasoning(), "reasoning");
    if (status.ok()) status = ValidateMessages(request->messages(), limits);
    if (status.ok()) status = ValidateSampling(request->sampling(), info.max_output_tokens, limits);
    if (status.ok()) status = ValidateTools(request->tools(), limits);
    if (upstream != nullptr) {
      // The engine server tokenizes and checks the context itself; its refusals come back as
      // the call's status.
      if (!status.ok()) {
        metrics->rejected_invalid.Increment();
        Reject(status);
        return;
      }
      SubmitUpstream();
      return;
    }
    // The load simulator takes images without a processor (its tokenizer counts them);
    // otherwise images go through the engine's processor, or are refused without one. Their
    // headers are checked here, all of them (sizes, limits, the context), before any decode.
    const bool prepare_images = engine->ImageProcessor() != nullptr || !info.vision;
    absl::StatusOr<ImagePlan> plan =
        status.ok() && prepare_images
            ? PlanRequestImages(request->messages(), engine->ImageProcessor(), info.model_name,
                                limits, info.max_context_tokens)
            : (status.ok() ? absl::StatusOr<ImagePlan>(ImagePlan())
                           : absl::StatusOr<ImagePlan>(status));
    // The whole prompt, with each image's token count from its header, against the context:
    // a request that cannot fit is refused before any of its images is decoded.
    absl::StatusOr<std::vector<int32_t>> prompt =
        plan.ok() ? Tokenize(plan->parts) : absl::StatusOr<std::vector<int32_t>>(plan.status());
    if (!prompt.ok()) {
      metrics->rejected_invalid.Increment();
      Reject(prompt.status());
      return;
    }
    if (plan->parts.empty()) {
      Admit(RequestImages(), std::move(*prompt));
      return;
    }
    // Once queued, the job owns the rest of the call: nothing here touches it after Submit.
    absl::Status queued =
        image_pool->Submit([this, plan = std::move(*plan), prompt = std::move(*prompt)]() mutable {
          PrepareImagesAndAdmit(plan, std::move(prompt));
        });
    if (!queued.ok()) {
      metrics->rejected_image_pool_full.Increment();
      Reject(queued);
    }
  }

  void OnWriteDone(bool ok) override {
    if (!ok) bridge_->CancelWork(/*expired=*/false);
    bridge_->WriteDone(ok);
  }
  void OnCancel() override {
    // gRPC cancels calls whose deadline passed; tell that apart from a client cancelling. The
    // deadline fires upstream first and its cancel can arrive just before ours: within 100 ms of
    // it the cancel is the deadline. (The gateway's kWorkerTimeoutHeader makes deadline_ fire
    // here first; a caller without it is left with this.)
    bridge_->CancelWork(std::chrono::system_clock::now() + std::chrono::milliseconds(100) >=
                        deadline_);
  }
  void OnDone() override {
    bridge_->Detach();
    delete this;
  }

 private:
  // State shared by the engine thread (producer) and gRPC (write completions). Start* and
  // Finish are called outside the lock because gRPC may run reactions inline.
  class Bridge final : public GenerationSink {
   public:
    explicit Bridge(GenerateCall* call) : call_(call) {}

    void OnStarted(int32_t prompt_tokens, double queue_seconds) override ABSL_LOCKS_EXCLUDED(mu_) {
      absl::MutexLock l(&mu_);
      pending_.set_prompt_tokens(prompt_tokens);
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
      if (cancel_ == CancelKind::kNone)
        cancel_ = expired ? CancelKind::kExpire : CancelKind::kCancel;
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

  // Hands the request to the engine server's dispatcher. As Admit: touches nothing of the call
  // after the dispatcher has it.
  void SubmitUpstream() {
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

  // The prompt's tokens, each image taking the tokens `parts` gives it; INVALID_ARGUMENT when
  // it does not fit the context.
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::vector<ImagePlan::Part>& parts) {
    const EngineInfo& info = info_;
    std::vector<int64_t> image_tokens;
    for (const ImagePlan::Part& p : parts) image_tokens.push_back(p.tokens);
    absl::StatusOr<std::vector<int32_t>> prompt = engine_->GetTokenizer().EncodeChatWithImages(
        request_->messages(), request_->tools(), request_->reasoning(),
        request_->continue_final_message(), image_tokens);
    if (prompt.ok() && static_cast<int64_t>(prompt->size()) >= info.max_context_tokens) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "messages: prompt of %d tokens does not fit the model's context of %d tokens",
          prompt->size(), info.max_context_tokens));
    }
    return prompt;
  }

  // On an image thread: the images decoded and resized, then the request admitted.
  void PrepareImagesAndAdmit(const ImagePlan& plan, std::vector<int32_t> prompt) {
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
    Admit(std::move(*images), std::move(prompt));
  }

  // Submits the request with its prompt and images to the scheduler. Touches nothing of the
  // call after the scheduler has it: the engine thread may finish (and delete) it at once.
  void Admit(RequestImages images, std::vector<int32_t> prompt) {
    const EngineInfo& info = info_;
    const tandem::v1::WorkerGenerateRequest* request = request_;
    GenerationRequest g;
    g.request_id = request_id_;
    g.prompt = std::move(prompt);
    g.images = std::move(images.images);
    const auto& s = request->sampling();
    g.sampling.temperature = s.has_temperature() ? s.temperature() : 1.0f;
    g.sampling.top_p = s.has_top_p() ? s.top_p() : 1.0f;
    g.sampling.top_k = s.top_k();
    g.sampling.seed = s.has_seed() ? s.seed() : std::random_device{}();
    g.max_tokens = s.has_max_tokens() ? s.max_tokens() : info.max_output_tokens;
    g.stop.assign(s.stop().begin(), s.stop().end());
    if (request->reasoning().mode() != tandem::v1::REASONING_MODE_OFF) {
      g.thinking_budget = std::max(0, request->reasoning().thinking_budget_tokens());
    }
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

  void Reject(const absl::Status& status) {
    int64_t suppressed = 0;
    if (rejected_log_->Allow(&suppressed)) {
      spdlog::info("request_id={} rejected status={} message={}{}", request_id_,
                   GrpcCodeName(static_cast<grpc::StatusCode>(status.code())),
                   QuoteForLog(status.message(), kMaxLoggedMessageBytes),
                   suppressed > 0 ? absl::StrCat(" (", suppressed, " refusals not logged)") : "");
    }
    Finish(ToGrpcStatus(status));
  }

  void LogEnd(const grpc::Status& status, int32_t completion_tokens) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    spdlog::info("request_id={} end status={} completion_tokens={} duration_ms={:.3f}", request_id_,
                 GrpcCodeName(status.error_code()), completion_tokens, seconds * 1e3);
  }

  std::shared_ptr<Bridge> bridge_;
  const EngineInfo& info_;
  const Engine* const engine_;
  Scheduler* const scheduler_;
  RemoteEngine* const upstream_;
  WorkerMetrics* const metrics_;
  const RequestLimits* const limits_;
  // gRPC keeps the request until OnDone, which comes only after Finish.
  const tandem::v1::WorkerGenerateRequest* const request_;
  LogRateLimiter* const rejected_log_;
  WorkerGenerateChunk out_;  // touched only while a write is not in flight
  const std::string request_id_;
  const std::chrono::steady_clock::time_point start_;
  // The call's deadline, the earlier of gRPC's and kWorkerTimeoutHeader's; the scheduler stops
  // the work at it.
  const std::chrono::system_clock::time_point deadline_;
};

}  // namespace

WorkerService::WorkerService(const Engine* engine, Scheduler* scheduler, WorkerMetrics* metrics,
                             DeviceDescription device, RequestLimits limits,
                             ImagePool::Options image_pool)
    : engine_(engine),
      scheduler_(scheduler),
      info_(engine->Info()),
      metrics_(metrics),
      limits_(limits),
      rejected_log_(limits.rejected_log_per_second, 2 * limits.rejected_log_per_second),
      device_(std::move(device)),
      image_pool_(std::make_unique<ImagePool>(image_pool, metrics)) {
  RefreshDevice();
}

WorkerService::WorkerService(RemoteEngine* upstream, WorkerMetrics* metrics,
                             DeviceDescription device, RequestLimits limits)
    : engine_(nullptr),
      scheduler_(nullptr),
      upstream_(upstream),
      info_(upstream->Info()),
      metrics_(metrics),
      limits_(limits),
      rejected_log_(limits.rejected_log_per_second, 2 * limits.rejected_log_per_second),
      device_(std::move(device)),
      image_pool_(std::make_unique<ImagePool>(ImagePool::Options(), metrics)) {
  RefreshDevice();
}

grpc::ServerWriteReactor<WorkerGenerateChunk>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const tandem::v1::WorkerGenerateRequest* request) {
  return new GenerateCall(info_, engine_, scheduler_, upstream_, metrics_, limits_, &rejected_log_,
                          image_pool_.get(), state_.load(), context, request);
}

grpc::ServerUnaryReactor* WorkerService::GetInfo(grpc::CallbackServerContext* context,
                                                 const tandem::v1::WorkerInfoRequest*,
                                                 tandem::v1::WorkerInfo* response) {
  const EngineInfo& info = info_;
  response->set_model_name(info.model_name);
  response->set_model_id(info.model_id);
  response->set_engine(info.engine);
  response->set_vision(info.vision);
  response->set_reasoning(info.reasoning);
  response->set_max_context_tokens(info.max_context_tokens);
  response->set_max_output_tokens(info.max_output_tokens);
  {
    absl::MutexLock l(&device_mu_);
    auto* d = response->mutable_device();
    d->set_id(device_.id);
    d->set_name(device_.name);
    d->set_memory_total_bytes(device_.memory_total_bytes);
    d->set_memory_free_bytes(device_.memory_free_bytes);
  }
  auto* load = response->mutable_load();
  if (upstream_ != nullptr) {
    load->set_running(upstream_->in_flight());
    load->set_waiting(upstream_->queued());
    load->set_max_batch_size(upstream_->max_in_flight());
    load->set_max_queue(upstream_->max_queue());
  } else {
    load->set_running(scheduler_->running());
    load->set_waiting(scheduler_->waiting());
    load->set_max_batch_size(scheduler_->options().max_batch_size);
    load->set_max_queue(scheduler_->options().max_queue);
  }
  response->set_state(state_.load());
  response->set_metrics_port(metrics_port_.load());
  response->set_metrics_tls(metrics_tls_.load());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void WorkerService::RefreshDevice() {
  // The device query runs outside the lock so GetInfo never waits on the driver.
  DeviceDescription d;
  {
    absl::MutexLock l(&device_mu_);
    d = device_;
  }
  if (absl::Status s = RefreshDeviceMemory(&d); !s.ok()) {
    spdlog::warn("cannot read device memory: {}", s.ToString());
    return;
  }
  metrics_->device_memory_total.Set(static_cast<double>(d.memory_total_bytes));
  metrics_->device_memory_used.Set(static_cast<double>(d.memory_total_bytes - d.memory_free_bytes));
  absl::MutexLock l(&device_mu_);
  device_ = std::move(d);
}

}  // namespace tandem::workers
