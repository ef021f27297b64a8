#include "gateway/gateway_service.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "common/grpc_status.h"
#include "common/proto_request.h"
#include "common/steady_wait.h"
#include "gateway/generation_attempts.h"
#include "gateway/generation_call.h"
#include "gateway/grpc_caller_context.h"
#include "gateway/relay_writes.h"
#include "gateway/tool_call_parser.h"
#include "router/decision_record.h"

namespace tandem::gateway {
namespace {

constexpr char kShadowSuffix[] = "-shadow";

using SteadyClock = std::chrono::steady_clock;
using tandem::v1::GenerateRequest;
using tandem::v1::WorkerGenerateChunk;

void FillRoute(const Admission& a, Disclosure disclosure, tandem::v1::RouteInfo* route) {
  route->set_model(a.decision.model);
  route->set_request_class(a.decision.request_class);
  route->set_rule(a.decision.rule);
  // A policy's reason lists the conditions that matched, which may name other tenants.
  route->set_reason(disclosure.explain ? a.decision.reason
                                       : absl::StrCat("rule '", a.decision.rule, "' matched"));
  route->set_policy_version(a.decision.policy_version);
  route->set_reasoning(router::ReasoningModeName(a.decision.reasoning));
  route->set_thinking_budget_tokens(a.decision.thinking_budget);
  // Its details (a live signal's shrink, a tenant's cap) are the policy's, like the reason's.
  const std::string& source = a.decision.reasoning_source;
  route->set_reasoning_source(
      disclosure.explain ? source
                         : std::string(absl::StripTrailingAsciiWhitespace(
                               absl::string_view(source).substr(0, source.find_first_of("(;")))));
  route->set_prompt_tokens(a.features.prompt_tokens);
  route->set_prompt_tokens_source(a.features.prompt_tokens_exact ? "tokenizer" : "estimate");
  if (!a.session.id().empty()) *route->mutable_session() = a.session;
  if (a.endpoint != nullptr && disclosure.workers) route->set_worker(a.endpoint->address());
}

}  // namespace

std::string MetadataValue(const grpc::CallbackServerContext* context, std::string_view key) {
  const auto& md = context->client_metadata();
  auto it = md.find(grpc::string_ref(key.data(), key.size()));
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

std::string MetadataRequestId(const grpc::CallbackServerContext* context) {
  return MetadataValue(context, "x-request-id");
}

// A copy of a request sent to another model to measure it; the answer is read and discarded.
// Owns itself: deleted in OnDone.
class ShadowCall final : public grpc::ClientReadReactor<WorkerGenerateChunk> {
 public:
  ShadowCall(GatewayService* service, std::shared_ptr<Endpoint> endpoint, std::string model,
             const Admission& admission, absl::Duration timeout)
      : service_(service),
        endpoint_(std::move(endpoint)),
        model_(std::move(model)),
        request_class_(admission.decision.request_class),
        request_(admission.worker_request),
        start_(SteadyClock::now()) {
    // Cut so that the suffixed id still passes the worker's check (at most kMaxRequestIdBytes).
    request_.set_request_id(absl::StrCat(
        admission.request_id.substr(0, kMaxRequestIdBytes - std::strlen(kShadowSuffix)),
        kShadowSuffix));
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
  const std::shared_ptr<Endpoint> endpoint_;
  const std::string model_;
  const std::string request_class_;
  tandem::v1::WorkerGenerateRequest request_;
  grpc::ClientContext context_;
  WorkerGenerateChunk chunk_;
  int64_t tokens_ = 0;
  const SteadyClock::time_point start_;
};

namespace {

// The gRPC answers' text and tool calls: a request with tools has its calls parsed out of the
// text (ToolCallParser); one without passes the text as it is.
class AnswerToolCalls {
 public:
  void Relay(GenerationCall& call, const WorkerGenerateChunk& chunk, std::string* text,
             google::protobuf::RepeatedPtrField<tandem::v1::ToolCall>* calls) {
    if (!checked_) {
      checked_ = true;
      if (call.request().tools_size() > 0) {
        parser_.emplace(call.request().tools(), call.admission().request_id);
      }
    }
    if (!parser_.has_value()) {
      text->append(chunk.text());
      return;
    }
    found_.clear();
    parser_->Feed(chunk.text(), text, &found_);
    for (auto& c : found_) *calls->Add() = std::move(c);
  }
  tandem::v1::FinishReason Finish(tandem::v1::FinishReason worker, std::string* text) {
    return parser_.has_value() ? parser_->Finish(worker, text) : worker;
  }

 private:
  bool checked_ = false;
  std::optional<ToolCallParser> parser_;
  std::vector<tandem::v1::ToolCall> found_;
};

// Generate: the answer is gathered from the committed attempt's chunks and sent whole.
class UnaryCall final : public grpc::ServerUnaryReactor, public GenerationCall {
 public:
  UnaryCall(GatewayService* service, grpc::CallbackServerContext* context,
            const grpc::ByteBuffer* request, grpc::ByteBuffer* response)
      : GenerationCall(service, std::make_unique<GrpcCallerContext>(context), "Generate"),
        response_bytes_(response) {
    absl::Status s = Begin(ParseRequest(*request, &this->request()));
    if (!s.ok()) {
      const grpc::Status status = ToGrpcStatus(s);
      Record(status);
      Finish(Detailed(status));
    }
  }

  void OnCancel() override { CancelAll(); }
  void OnDone() override { Unref(); }
  // gRPC 1.51's hook ("not API", server_callback.h) for reactions that may run where gRPC
  // completes the call instead of on its executor thread. Ours may: OnDone drops a reference
  // and OnCancel cancels the attempts, both short and never blocking, taking only the call's
  // own locks, which nothing holds while waiting on gRPC. When it pays: InlineReactions.
  bool InternalInlineable() override { return service()->InlineReactions(); }

 private:
  void Relay(const WorkerGenerateChunk& chunk) override {
    tools_.Relay(*this, chunk, response_.mutable_text(), response_.mutable_tool_calls());
    if (chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      response_.set_finish_reason(tools_.Finish(chunk.finish_reason(), response_.mutable_text()));
    }
    Resume();
  }

  void Complete(const grpc::Status& status) override {
    if (status.ok()) {
      response_.set_request_id(admission().request_id);
      FillRoute(admission(), disclosure(), response_.mutable_route());
      FillFinal(response_.mutable_usage(), response_.mutable_timings(),
                response_.mutable_recovery());
      if (!HasRecovery(response_.recovery())) response_.clear_recovery();
      SerializeResponse(response_, response_bytes_);
    }
    Record(status);
    Finish(Detailed(status));
    ReleaseSlot();
  }

  tandem::v1::GenerateResponse response_;
  grpc::ByteBuffer* const response_bytes_;
  AnswerToolCalls tools_;
};

// GenerateStream: each chunk of the committed attempt is written as it comes, one write in
// flight at a time; the next chunk is read once the write is done.
class StreamCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer>, public GenerationCall {
 public:
  StreamCall(GatewayService* service, grpc::CallbackServerContext* context,
             const grpc::ByteBuffer* request)
      : GenerationCall(service, std::make_unique<GrpcCallerContext>(context), "GenerateStream") {
    absl::Status s = Begin(ParseRequest(*request, &this->request()));
    if (!s.ok()) {
      const grpc::Status status = ToGrpcStatus(s);
      Record(status);
      Finish(Detailed(status));
    }
  }

  void OnWriteDone(bool ok) override {
    switch (writes_.WriteDone(ok)) {
      case RelayWrites::Next::kFinish:
        FinishOnce();
        return;
      case RelayWrites::Next::kClientGone:
        CancelAll();  // the workers stop; the reads then end and release the holds
        break;
      case RelayWrites::Next::kResume:
        break;
    }
    Resume();
  }
  void OnCancel() override { CancelAll(); }
  void OnDone() override { Unref(); }
  // gRPC 1.51's hook ("not API", server_callback.h) for reactions that may run where gRPC
  // completes the call instead of on its executor thread. Ours may: OnDone drops a reference
  // and OnCancel cancels the attempts, both short and never blocking, taking only the call's
  // own locks, which nothing holds while waiting on gRPC. When it pays: InlineReactions.
  bool InternalInlineable() override { return service()->InlineReactions(); }

 private:
  void Relay(const WorkerGenerateChunk& chunk) override {
    out_.Clear();
    if (first_) {
      first_ = false;
      out_.set_request_id(admission().request_id);
      FillRoute(admission(), disclosure(), out_.mutable_route());
    }
    tools_.Relay(*this, chunk, out_.mutable_text(), out_.mutable_tool_calls());
    if (chunk.finish_reason() != tandem::v1::FINISH_REASON_UNSPECIFIED) {
      out_.set_finish_reason(tools_.Finish(chunk.finish_reason(), out_.mutable_text()));
      FillFinal(out_.mutable_usage(), out_.mutable_timings(), out_.mutable_recovery());
      if (!HasRecovery(out_.recovery())) out_.clear_recovery();
    }
    SerializeResponse(out_, &out_bytes_);
    writes_.WriteStarted();
    StartWrite(&out_bytes_);
  }

  void Complete(const grpc::Status& status) override {
    if (writes_.UpstreamDone(status)) FinishOnce();
  }

  void FinishOnce() {
    const std::optional<grpc::Status> status = writes_.TakeFinish();
    if (!status.has_value()) return;
    Record(*status);
    Finish(Detailed(*status));
    ReleaseSlot();
  }

  // Written by Relay only, one chunk at a time.
  tandem::v1::GenerateStreamChunk out_;
  grpc::ByteBuffer out_bytes_;  // out_ as sent; one write is in flight at a time
  bool first_ = true;
  AnswerToolCalls tools_;
  RelayWrites writes_;
};

}  // namespace

GatewayService::GatewayService(const Intake* intake, const WorkerPools* pools,
                               GatewayMetrics* metrics, GatewayServiceOptions options)
    : intake_(intake),
      pools_(pools),
      metrics_(metrics),
      options_(options),
      retry_budget_(options.retry_budget_ratio, options.retry_budget_min),
      rejected_log_(options.rejected_log_per_second, 2 * options.rejected_log_per_second) {}

void GatewayService::StartShadow(const Admission& a, const std::string& model) {
  ModelPool* pool = pools_->Find(model);
  const char* refused = nullptr;
  absl::StatusOr<std::shared_ptr<Endpoint>> endpoint = absl::UnavailableError("no pool");
  if (pool == nullptr) {
    refused = "UNAVAILABLE";
  } else if (a.features.image_count > 0 && !pool->Facts().vision) {
    refused = "INVALID_ARGUMENT";  // the shadow model cannot take this request
  } else if (endpoint = pool->Pick(pools_->pick()); !endpoint.ok()) {
    refused = "UNAVAILABLE";
  }
  if (refused != nullptr) {
    metrics_->CountShadow(model, a.decision.request_class, refused);
    return;
  }
  CallStarted();  // draining waits for shadows too
  absl::MutexLock l(&shadow_mu_);
  if (draining()) {
    metrics_->CountShadow(model, a.decision.request_class, "UNAVAILABLE");
    CallEnded();
    return;
  }
  // Registered under the lock before it can finish, so StartDraining can cancel it.
  shadows_.insert(new ShadowCall(this, *endpoint, model, a, options_.shadow_timeout));
}

void GatewayService::ShadowEnded(ShadowCall* call) {
  absl::MutexLock l(&shadow_mu_);
  shadows_.erase(call);
}

void GatewayService::StartDraining() {
  draining_.store(true, std::memory_order_relaxed);
  // Shadows only measure; they need not delay the drain.
  absl::MutexLock l(&shadow_mu_);
  for (ShadowCall* s : shadows_) s->Cancel();
}

grpc::ServerUnaryReactor* GatewayService::Generate(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* request,
                                                   grpc::ByteBuffer* response) {
  return new UnaryCall(this, context, request, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GatewayService::GenerateStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new StreamCall(this, context, request);
}

std::string ApiKeyFromHeaders(absl::string_view authorization, absl::string_view x_api_key) {
  if (!authorization.empty()) {
    constexpr absl::string_view kBearer = "Bearer ";
    if (authorization.size() > kBearer.size() &&
        absl::EqualsIgnoreCase(authorization.substr(0, kBearer.size()), kBearer)) {
      return std::string(authorization.substr(kBearer.size()));
    }
    // Present but not a bearer token: treated as a (wrong) key, never as "no key".
    return std::string(authorization);
  }
  return std::string(x_api_key);
}

std::string ApiKeyFromMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& md) {
  auto view = [&md](const char* key) {
    auto it = md.find(key);
    return it == md.end() ? absl::string_view()
                          : absl::string_view(it->second.data(), it->second.size());
  };
  return ApiKeyFromHeaders(view("authorization"), view("x-api-key"));
}

FairQueue* GatewayService::QueueFor(const std::string& model) const {
  if (options_.queues == nullptr) return nullptr;
  auto it = options_.queues->find(model);
  return it == options_.queues->end() ? nullptr : it->second.get();
}

Disclosure GatewayService::DisclosureFor(const TenantRegistry::Caller& caller) const {
  // Without a tenants file every caller is the operator's.
  const bool full = options_.tenants == nullptr || !options_.tenants->enabled() ||
                    (caller.spec != nullptr && caller.spec->admin);
  return Disclosure{.explain = full, .workers = full || options_.expose_worker_addresses};
}

absl::StatusOr<TenantRegistry::Caller> GatewayService::Authenticate(
    const std::string& api_key) const {
  if (options_.tenants == nullptr) return TenantRegistry::Caller{};
  return options_.tenants->Authenticate(api_key);
}

std::string GatewayService::ResolveModel(const std::string& name_or_id) const {
  if (name_or_id.empty() || pools_->Find(name_or_id) != nullptr) return name_or_id;
  for (const auto& [name, pool] : pools_->pools()) {
    if (absl::EqualsIgnoreCase(pool->Status().model_id(), name_or_id)) return name;
  }
  return name_or_id;
}

std::vector<tandem::v1::ModelStatus> GatewayService::VisibleModels(
    const TenantRegistry::Caller& caller) const {
  std::vector<tandem::v1::ModelStatus> models;
  for (const auto& [name, pool] : pools_->pools()) {
    // A tenant sees the models it may use.
    if (caller.spec == nullptr || caller.spec->models.empty() ||
        caller.spec->models.contains(name)) {
      models.push_back(pool->Status());
    }
  }
  return models;
}

grpc::ServerUnaryReactor* GatewayService::Route(grpc::CallbackServerContext* context,
                                                const grpc::ByteBuffer* request_bytes,
                                                grpc::ByteBuffer* response_bytes) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<TenantRegistry::Caller> caller =
      Authenticate(ApiKeyFromMetadata(context->client_metadata()));
  if (!caller.ok()) {
    reactor->Finish(ToGrpcStatus(caller.status()));
    return reactor;
  }
  GenerateRequest request;
  Admission admission;
  absl::Status s = ParseRequest(*request_bytes, &request);
  if (s.ok()) {
    if (request.session_id().empty()) {
      request.set_session_id(MetadataValue(context, "x-session-id"));
    }
    if (request.session_token().empty()) {
      request.set_session_token(MetadataValue(context, "x-tandem-session-token"));
    }
    s = intake_->Decide(request, MetadataRequestId(context), context->deadline(), &admission,
                        caller->spec);
  }
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  const Disclosure disclosure = DisclosureFor(*caller);
  tandem::v1::RouteResponse response;
  response.set_request_id(admission.request_id);
  FillRoute(admission, disclosure, response.mutable_route());
  for (auto& [name, value] : router::DescribeFeatures(admission.features)) {
    (*response.mutable_features())[name] = value;
  }
  // Every rule's conditions: the operator's policy, which may name other tenants.
  if (disclosure.explain) {
    for (const auto& t : admission.decision.trace) {
      auto* r = response.add_rules();
      r->set_rule(t.rule);
      r->set_matched(t.matched);
      r->set_detail(t.detail);
    }
  }
  SerializeResponse(response, response_bytes);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GatewayService::ListModels(grpc::CallbackServerContext* context,
                                                     const tandem::v1::ListModelsRequest*,
                                                     tandem::v1::ListModelsResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<TenantRegistry::Caller> caller =
      Authenticate(ApiKeyFromMetadata(context->client_metadata()));
  if (!caller.ok()) {
    reactor->Finish(ToGrpcStatus(caller.status()));
    return reactor;
  }
  for (auto& m : VisibleModels(*caller)) *response->add_models() = std::move(m);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void GatewayService::CallStarted() { inflight_.fetch_add(1, std::memory_order_relaxed); }

void GatewayService::CallEnded() {
  if (inflight_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  absl::MutexLock l(&mu_);
  idle_cv_.SignalAll();
}

void GatewayService::RefusedWhileDraining() {
  last_refused_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                         std::memory_order_relaxed);
}

void GatewayService::WaitQuiet(std::chrono::steady_clock::duration quiet,
                               std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto last = std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(last_refused_ns_.load(std::memory_order_relaxed)));
    const auto until = std::min(last + quiet, deadline);
    if (std::chrono::steady_clock::now() >= until) return;
    std::this_thread::sleep_until(until);
  }
}

bool GatewayService::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  absl::MutexLock l(&mu_);
  while (inflight() != 0 && WaitUntil(idle_cv_, mu_, deadline)) {
  }
  return inflight() == 0;
}

}  // namespace tandem::gateway
