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
// (the scheduler may hold it after the RPC is gone).
class GenerateCall final : public grpc::ServerWriteReactor<WorkerGenerateChunk> {
 public:
  // `state` is the worker's: only READY workers accept work.
  GenerateCall(const Engine* engine, Scheduler* scheduler, WorkerMetrics* metrics,
               const RequestLimits& limits, LogRateLimiter* rejected_log,
               tandem::v1::WorkerInfo::State state, grpc::CallbackServerContext* context,
               const tandem::v1::WorkerGenerateRequest* request)
      : bridge_(std::make_shared<Bridge>(this)),
        rejected_log_(rejected_log),
        // Only a valid id is logged as it is (the request is refused otherwise).
        request_id_(request->request_id().empty() ||
                            IsPlainToken(request->request_id(), kMaxRequestIdBytes)
                        ? request->request_id()
                        : QuoteForLog(request->request_id())),
        start_(std::chrono::steady_clock::now()),
        deadline_(WorkerDeadline(*context, std::chrono::system_clock::now())) {
    const EngineInfo& info = engine->Info();
    if (state != tandem::v1::WorkerInfo::STATE_READY) {
      (state == tandem::v1::WorkerInfo::STATE_DRAINING ? metrics->rejected_draining
                                                       : metrics->rejected_loading)
          .Increment();
      Reject(absl::UnavailableError(absl::StrCat(
          "worker is ",
          state == tandem::v1::WorkerInfo::STATE_DRAINING ? "draining" : "loading its model",
          " and accepts no new requests")));
      return;
    }
    absl::Status status =
        request->request_id().empty() ? absl::OkStatus() : ValidateRequestId(request->request_id());
    if (status.ok()) status = ValidateReasoning(request->reasoning(), "reasoning");
    if (status.ok()) status = ValidateMessages(request->messages(), limits);
    if (status.ok()) status = ValidateSampling(request->sampling(), info.max_output_tokens, limits);
    if (status.ok()) status = ValidateTools(request->tools(), limits);
    // The load simulator takes images without a processor (its tokenizer counts them);
    // otherwise images go through the engine's processor, or are refused without one.
    const bool prepare_images = engine->ImageProcessor() != nullptr || !info.vision;
    absl::StatusOr<RequestImages> images =
        status.ok() && prepare_images
            ? PrepareRequestImages(request->messages(), engine->ImageProcessor(), info.model_name,
                                   limits, info.max_context_tokens)
            : (status.ok() ? absl::StatusOr<RequestImages>(RequestImages())
                           : absl::StatusOr<RequestImages>(status));
    absl::StatusOr<std::vector<int32_t>> prompt =
        images.ok() ? engine->GetTokenizer().EncodeChatWithImages(
                          request->messages(), request->tools(), request->reasoning(),
                          request->continue_final_message(), images->tokens)
                    : absl::StatusOr<std::vector<int32_t>>(images.status());
    if (prompt.ok() && static_cast<int64_t>(prompt->size()) >= info.max_context_tokens) {
      prompt = absl::InvalidArgumentError(absl::StrFormat(
          "messages: prompt of %d tokens does not fit the model's context of %d tokens",
          prompt->size(), info.max_context_tokens));
    }
    if (!prompt.ok()) {
      metrics->rejected_invalid.Increment();
      Reject(prompt.status());
      return;
    }
    GenerationRequest g;
    g.request_id = request_id_;
    g.prompt = std::move(*prompt);
    g.images = std::move(images->images);
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
    auto submitted = scheduler->Submit(std::move(g), bridge_);
    if (!submitted.ok()) {
      Reject(submitted.status());
      return;
    }
    cancellation_ = std::move(*submitted);
    spdlog::info("request_id={} model={} start prompt_tokens={} max_tokens={}", request_id_,
                 info.model_name, prompt_tokens,
                 s.has_max_tokens() ? s.max_tokens() : info.max_output_tokens);
  }

  void OnWriteDone(bool ok) override {
    if (!ok && cancellation_) cancellation_->Cancel();
    bridge_->WriteDone(ok);
  }
  void OnCancel() override {
    if (!cancellation_) return;
    // gRPC cancels calls whose deadline passed; tell that apart from a client cancelling. The
    // deadline fires upstream first and its cancel can arrive just before ours: within 100 ms of
    // it the cancel is the deadline. (The gateway's kWorkerTimeoutHeader makes deadline_ fire
    // here first; a caller without it is left with this.)
    if (std::chrono::system_clock::now() + std::chrono::milliseconds(100) >= deadline_) {
      cancellation_->Expire();
    } else {
      cancellation_->Cancel();
    }
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

   private:
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
  };

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
  LogRateLimiter* const rejected_log_;
  std::shared_ptr<Cancellation> cancellation_;
  WorkerGenerateChunk out_;  // touched only while a write is not in flight
  const std::string request_id_;
  const std::chrono::steady_clock::time_point start_;
  // The call's deadline, the earlier of gRPC's and kWorkerTimeoutHeader's; the scheduler stops
  // the work at it.
  const std::chrono::system_clock::time_point deadline_;
};

}  // namespace

WorkerService::WorkerService(const Engine* engine, Scheduler* scheduler, WorkerMetrics* metrics,
                             DeviceDescription device, RequestLimits limits)
    : engine_(engine),
      scheduler_(scheduler),
      metrics_(metrics),
      limits_(limits),
      rejected_log_(limits.rejected_log_per_second, 2 * limits.rejected_log_per_second),
      device_(std::move(device)) {
  RefreshDevice();
}

grpc::ServerWriteReactor<WorkerGenerateChunk>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const tandem::v1::WorkerGenerateRequest* request) {
  return new GenerateCall(engine_, scheduler_, metrics_, limits_, &rejected_log_, state_.load(),
                          context, request);
}

grpc::ServerUnaryReactor* WorkerService::GetInfo(grpc::CallbackServerContext* context,
                                                 const tandem::v1::WorkerInfoRequest*,
                                                 tandem::v1::WorkerInfo* response) {
  const EngineInfo& info = engine_->Info();
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
  load->set_running(scheduler_->running());
  load->set_waiting(scheduler_->waiting());
  load->set_max_batch_size(scheduler_->options().max_batch_size);
  load->set_max_queue(scheduler_->options().max_queue);
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
