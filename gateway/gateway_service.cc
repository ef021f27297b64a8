#include "gateway/gateway_service.h"

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "router/decision_record.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {
namespace {

using SteadyClock = std::chrono::steady_clock;
using tandem::v1::GenerateRequest;
using tandem::v1::WorkerGenerateChunk;

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string MetadataRequestId(const grpc::CallbackServerContext* context) {
  const auto& md = context->client_metadata();
  auto it = md.find("x-request-id");
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

void FillRoute(const Admission& a, tandem::v1::RouteInfo* route) {
  route->set_model(a.decision.model);
  route->set_request_class(a.decision.request_class);
  route->set_rule(a.decision.rule);
  route->set_reason(a.decision.reason);
  route->set_policy_version(a.decision.policy_version);
  if (a.endpoint != nullptr) route->set_worker(a.endpoint->address());
}

// What Generate and GenerateStream share: intake, the worker call, accounting and logging.
// Lifetime: one reference for the server reactor and one for the worker call once started;
// the object deletes itself when both are done.
class GenerationCall {
 public:
  GenerationCall(GatewayService* service, grpc::CallbackServerContext* context,
                 const GenerateRequest* request, const char* rpc)
      : service_(service),
        context_(context),
        request_(request),
        rpc_(rpc),
        arrival_(SteadyClock::now()) {}
  virtual ~GenerationCall() = default;

 protected:
  // Validates, routes and starts the worker call.
  absl::Status Begin() {
    if (service_->draining()) {
      return absl::UnavailableError("gateway is draining; retry on another replica");
    }
    absl::Status s = service_->intake().Admit(*request_, MetadataRequestId(context_),
                                              context_->deadline(), false, &admission_);
    if (!s.ok()) return s;
    const auto& d = admission_.decision;
    model_metrics_ = service_->metrics().ForModel(d.model);
    service_->metrics().CountDecision(d.model, d.request_class, d.rule, d.policy_version);
    if (DecisionLog* log = service_->decision_log()) {
      tandem::v1::DecisionRecord record = router::ToRecord(admission_.features, d);
      record.set_request_id(admission_.request_id);
      record.set_time_unix_seconds(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
      // The text the learned tier read (bounded), so replay classifies exactly what live did.
      if (service_->log_prompt_text()) record.set_prompt_text(admission_.features.classifier_text);
      log->Record(std::move(record));
    }
    if (model_metrics_ != nullptr) model_metrics_->inflight->Increment();
    admission_.endpoint->AddOutstanding(1);
    service_->CallStarted();
    started_ = true;
    spdlog::info("request_id={} rpc={} start model={} class={} rule={} worker={}",
                 admission_.request_id, rpc_, d.model, d.request_class, d.rule,
                 admission_.endpoint->address());

    upstream_context_ = grpc::ClientContext::FromCallbackServerContext(*context_);
    upstream_context_->AddMetadata("x-request-id", admission_.request_id);
    refs_.fetch_add(1, std::memory_order_relaxed);
    admission_.endpoint->client().Generate(upstream_context_.get(), &admission_.worker_request,
                                           &upstream_);
    // The hold keeps the worker call alive until we have read its end of stream: reads are
    // started from server reactions, and without it the call could complete (and be freed)
    // between a write finishing and the next read starting.
    upstream_.AddHold();
    upstream_.StartRead(&in_);
    upstream_.StartCall();
    if (!d.shadow.empty() && d.shadow != d.model) service_->StartShadow(admission_, d.shadow);
    return absl::OkStatus();
  }

  // A chunk arrived from the worker; the subclass relays it and calls ReadNext() when ready.
  virtual void OnUpstreamChunk(const WorkerGenerateChunk& chunk) = 0;
  // The worker call ended; no chunk follows.
  virtual void OnUpstreamDone(const grpc::Status& status) = 0;

  void ReadNext() { upstream_.StartRead(&in_); }
  void CancelUpstream() {
    if (upstream_context_) upstream_context_->TryCancel();
  }

  // Token accounting from a worker chunk.
  void Track(const WorkerGenerateChunk& chunk) {
    const auto now = SteadyClock::now();
    if (chunk.prompt_tokens() > 0) prompt_tokens_ = chunk.prompt_tokens();
    if (chunk.queue_seconds() > 0) queue_seconds_ = chunk.queue_seconds();
    if (chunk.tokens() > 0) {
      if (completion_tokens_ == 0) first_token_ = now;
      last_token_ = now;
      completion_tokens_ += chunk.tokens();
    }
  }

  void FillFinal(tandem::v1::Usage* usage, tandem::v1::Timings* timings) const {
    usage->set_prompt_tokens(prompt_tokens_);
    usage->set_completion_tokens(completion_tokens_);
    usage->set_total_tokens(prompt_tokens_ + completion_tokens_);
    timings->set_queue_seconds(queue_seconds_);
    if (completion_tokens_ > 0) {
      timings->set_time_to_first_token_seconds(Seconds(first_token_ - arrival_));
    }
    timings->set_total_seconds(Seconds(SteadyClock::now() - arrival_));
  }

  // Metrics and the end log line; exactly once per call.
  void Record(const grpc::Status& status) {
    const auto now = SteadyClock::now();
    const auto& d = admission_.decision;
    const std::string& model = started_ ? d.model : kNone;
    const std::string& klass = started_ ? d.request_class : kNone;
    service_->metrics().CountRequest(model, klass, GrpcCodeName(status.error_code()));
    if (model_metrics_ != nullptr) {
      model_metrics_->inflight->Decrement();
      model_metrics_->request_duration->Observe(Seconds(now - arrival_));
      if (completion_tokens_ > 0) {
        model_metrics_->time_to_first_token->Observe(Seconds(first_token_ - arrival_));
      }
      if (completion_tokens_ > 1) {
        model_metrics_->time_per_output_token->Observe(Seconds(last_token_ - first_token_) /
                                                       (completion_tokens_ - 1));
      }
      model_metrics_->prompt_tokens->Increment(prompt_tokens_);
      model_metrics_->completion_tokens->Increment(completion_tokens_);
    }
    if (started_) {
      admission_.endpoint->AddOutstanding(-1);
      service_->CallEnded();
    }
    spdlog::info(
        "request_id={} rpc={} end model={} class={} status={} prompt_tokens={} "
        "completion_tokens={} duration_ms={:.3f}{}{}",
        admission_.request_id, rpc_, model, klass, GrpcCodeName(status.error_code()),
        prompt_tokens_, completion_tokens_, Seconds(now - arrival_) * 1e3,
        status.ok() ? "" : " message=", status.error_message());
  }

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  GatewayService* const service_;
  grpc::CallbackServerContext* const context_;
  const GenerateRequest* const request_;
  const char* const rpc_;
  const SteadyClock::time_point arrival_;
  Admission admission_;

  int32_t prompt_tokens_ = 0;
  int32_t completion_tokens_ = 0;
  double queue_seconds_ = 0;
  SteadyClock::time_point first_token_;
  SteadyClock::time_point last_token_;

 private:
  static inline const std::string kNone = "none";

  class Upstream final : public grpc::ClientReadReactor<WorkerGenerateChunk> {
   public:
    explicit Upstream(GenerationCall* owner) : owner_(owner) {}
    void OnReadDone(bool ok) override {
      if (ok) {
        owner_->OnUpstreamChunk(owner_->in_);
      } else {
        RemoveHold();  // end of stream: OnDone follows with the status
      }
    }
    void OnDone(const grpc::Status& status) override {
      owner_->OnUpstreamDone(status);
      owner_->Unref();
    }

   private:
    GenerationCall* const owner_;
  };

  GatewayMetrics::Model* model_metrics_ = nullptr;
  bool started_ = false;
  std::unique_ptr<grpc::ClientContext> upstream_context_;
  Upstream upstream_{this};
  WorkerGenerateChunk in_;
  std::atomic<int> refs_{1};
};

}  // namespace

// A copy of a request sent to another model to measure it; the answer is read and discarded.
// Owns itself: deleted in OnDone.
class ShadowCall final : public grpc::ClientReadReactor<WorkerGenerateChunk> {
 public:
  ShadowCall(GatewayService* service, Endpoint* endpoint, std::string model,
             const Admission& admission, absl::Duration timeout)
      : service_(service),
        endpoint_(endpoint),
        model_(std::move(model)),
        request_class_(admission.decision.request_class),
        request_(admission.worker_request),
        start_(SteadyClock::now()) {
    request_.set_request_id(admission.request_id + "-shadow");
    context_.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
    context_.AddMetadata("x-request-id", request_.request_id());
    endpoint_->AddOutstanding(1);
    endpoint_->client().Generate(&context_, &request_, this);
    StartRead(&chunk_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    tokens_ += chunk_.tokens();
    StartRead(&chunk_);
  }

  void Cancel() { context_.TryCancel(); }

  void OnDone(const grpc::Status& status) override {
    service_->ShadowEnded(this);
    GatewayMetrics::Model* m = service_->metrics().ForModel(model_);
    if (m != nullptr) {
      m->shadow_duration->Observe(Seconds(SteadyClock::now() - start_));
      m->shadow_completion_tokens->Increment(tokens_);
    }
    service_->metrics().CountShadow(model_, request_class_, GrpcCodeName(status.error_code()));
    endpoint_->AddOutstanding(-1);
    service_->CallEnded();
    delete this;
  }

 private:
  GatewayService* const service_;
  Endpoint* const endpoint_;
  const std::string model_;
  const std::string request_class_;
  tandem::v1::WorkerGenerateRequest request_;
  grpc::ClientContext context_;
  WorkerGenerateChunk chunk_;
  int64_t tokens_ = 0;
  const SteadyClock::time_point start_;
};

namespace {

class UnaryCall final : public grpc::ServerUnaryReactor, public GenerationCall {
 public:
  UnaryCall(GatewayService* service, grpc::CallbackServerContext* context,
            const GenerateRequest* request, tandem::v1::GenerateResponse* response)
      : GenerationCall(service, context, request, "Generate"), response_(response) {
    absl::Status s = Begin();
    if (!s.ok()) {
      const grpc::Status status = ToGrpcStatus(s);
      Record(status);
      Finish(status);
    }
  }

  void OnCancel() override { CancelUpstream(); }
  void OnDone() override { Unref(); }

 private:
  void OnUpstreamChunk(const WorkerGenerateChunk& chunk) override {
    Track(chunk);
    response_->mutable_text()->append(chunk.text());
    if (chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      response_->set_finish_reason(chunk.finish_reason());
    }
    ReadNext();
  }

  void OnUpstreamDone(const grpc::Status& status) override {
    if (status.ok()) {
      response_->set_request_id(admission_.request_id);
      FillRoute(admission_, response_->mutable_route());
      FillFinal(response_->mutable_usage(), response_->mutable_timings());
    }
    Record(status);
    Finish(status);
  }

  tandem::v1::GenerateResponse* const response_;
};

class StreamCall final : public grpc::ServerWriteReactor<tandem::v1::GenerateStreamChunk>,
                         public GenerationCall {
 public:
  StreamCall(GatewayService* service, grpc::CallbackServerContext* context,
             const GenerateRequest* request)
      : GenerationCall(service, context, request, "GenerateStream") {
    absl::Status s = Begin();
    if (!s.ok()) {
      const grpc::Status status = ToGrpcStatus(s);
      Record(status);
      Finish(status);
    }
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> l(mu_);
    write_in_flight_ = false;
    if (!ok) client_gone_ = true;
    const bool upstream_done = upstream_done_;
    l.unlock();
    if (upstream_done) {
      FinishOnce();
      return;
    }
    // The client is gone: stop the worker; the read then ends the stream and releases the hold.
    if (!ok) CancelUpstream();
    ReadNext();
  }
  void OnCancel() override { CancelUpstream(); }
  void OnDone() override { Unref(); }

 private:
  void OnUpstreamChunk(const WorkerGenerateChunk& chunk) override {
    Track(chunk);
    out_.Clear();
    if (first_) {
      first_ = false;
      out_.set_request_id(admission_.request_id);
      FillRoute(admission_, out_.mutable_route());
    }
    out_.set_text(chunk.text());
    if (chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      out_.set_finish_reason(chunk.finish_reason());
      FillFinal(out_.mutable_usage(), out_.mutable_timings());
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      write_in_flight_ = true;
    }
    StartWrite(&out_);
  }

  void OnUpstreamDone(const grpc::Status& status) override {
    std::unique_lock<std::mutex> l(mu_);
    upstream_done_ = true;
    upstream_status_ = status;
    if (write_in_flight_) return;  // OnWriteDone finishes
    l.unlock();
    FinishOnce();
  }

  void FinishOnce() {
    bool client_gone;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (finished_) return;
      finished_ = true;
      client_gone = client_gone_;
    }
    // A stream the client stopped reading did not succeed, whatever the worker said.
    const grpc::Status status =
        client_gone && upstream_status_.ok()
            ? grpc::Status(grpc::StatusCode::CANCELLED, "the client went away")
            : upstream_status_;
    Record(status);
    Finish(status);
  }

  tandem::v1::GenerateStreamChunk out_;
  bool first_ = true;
  std::mutex mu_;
  bool write_in_flight_ = false;  // guarded by mu_
  bool upstream_done_ = false;    // guarded by mu_
  bool finished_ = false;         // guarded by mu_
  bool client_gone_ = false;      // guarded by mu_
  grpc::Status upstream_status_;
};

}  // namespace

GatewayService::GatewayService(const Intake* intake, const WorkerPools* pools,
                               GatewayMetrics* metrics, DecisionLog* decision_log,
                               bool log_prompt_text, absl::Duration shadow_timeout)
    : intake_(intake),
      pools_(pools),
      metrics_(metrics),
      decision_log_(decision_log),
      log_prompt_text_(log_prompt_text),
      shadow_timeout_(shadow_timeout) {}

void GatewayService::StartShadow(const Admission& a, const std::string& model) {
  ModelPool* pool = pools_->Find(model);
  const char* refused = nullptr;
  absl::StatusOr<Endpoint*> endpoint = absl::UnavailableError("no pool");
  if (pool == nullptr) {
    refused = "UNAVAILABLE";
  } else if (a.features.image_count > 0 && !pool->Status().capabilities().vision()) {
    refused = "INVALID_ARGUMENT";  // the shadow model cannot take this request
  } else if (endpoint = pool->Pick(); !endpoint.ok()) {
    refused = "UNAVAILABLE";
  }
  if (refused != nullptr) {
    metrics_->CountShadow(model, a.decision.request_class, refused);
    return;
  }
  CallStarted();  // draining waits for shadows too
  std::lock_guard<std::mutex> l(shadow_mu_);
  if (draining()) {
    metrics_->CountShadow(model, a.decision.request_class, "UNAVAILABLE");
    CallEnded();
    return;
  }
  // Registered under the lock before it can finish, so StartDraining can cancel it.
  shadows_.insert(new ShadowCall(this, *endpoint, model, a, shadow_timeout_));
}

void GatewayService::ShadowEnded(ShadowCall* call) {
  std::lock_guard<std::mutex> l(shadow_mu_);
  shadows_.erase(call);
}

void GatewayService::StartDraining() {
  draining_.store(true, std::memory_order_relaxed);
  // Shadows only measure; they need not delay the drain.
  std::lock_guard<std::mutex> l(shadow_mu_);
  for (ShadowCall* s : shadows_) s->Cancel();
}

grpc::ServerUnaryReactor* GatewayService::Generate(grpc::CallbackServerContext* context,
                                                   const GenerateRequest* request,
                                                   tandem::v1::GenerateResponse* response) {
  return new UnaryCall(this, context, request, response);
}

grpc::ServerWriteReactor<tandem::v1::GenerateStreamChunk>* GatewayService::GenerateStream(
    grpc::CallbackServerContext* context, const GenerateRequest* request) {
  return new StreamCall(this, context, request);
}

grpc::ServerUnaryReactor* GatewayService::Route(grpc::CallbackServerContext* context,
                                                const GenerateRequest* request,
                                                tandem::v1::RouteResponse* response) {
  auto* reactor = context->DefaultReactor();
  Admission admission;
  absl::Status s =
      intake_->Admit(*request, MetadataRequestId(context), context->deadline(), true, &admission);
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  response->set_request_id(admission.request_id);
  FillRoute(admission, response->mutable_route());
  for (auto& [name, value] : router::DescribeFeatures(admission.features)) {
    (*response->mutable_features())[name] = value;
  }
  for (const auto& t : admission.decision.trace) {
    auto* r = response->add_rules();
    r->set_rule(t.rule);
    r->set_matched(t.matched);
    r->set_detail(t.detail);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GatewayService::ListModels(grpc::CallbackServerContext* context,
                                                     const tandem::v1::ListModelsRequest*,
                                                     tandem::v1::ListModelsResponse* response) {
  for (const auto& [name, pool] : pools_->pools()) *response->add_models() = pool->Status();
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void GatewayService::CallStarted() {
  std::lock_guard<std::mutex> l(mu_);
  ++inflight_;
}

void GatewayService::CallEnded() {
  std::lock_guard<std::mutex> l(mu_);
  if (--inflight_ == 0) idle_cv_.notify_all();
}

int64_t GatewayService::inflight() const {
  std::lock_guard<std::mutex> l(mu_);
  return inflight_;
}

bool GatewayService::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  return idle_cv_.wait_until(l, deadline, [&] { return inflight_ == 0; });
}

}  // namespace tandem::gateway
