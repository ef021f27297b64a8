#include "gateway/grpc_front/grpc_front.h"

#include <memory>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/grpc_status.h"
#include "common/proto_request.h"
#include "gateway/dispatch/generation_call.h"
#include "gateway/grpc_front/grpc_caller_context.h"
#include "gateway/relay/relay_writes.h"
#include "gateway/relay/tool_call_parser.h"
#include "router/decision_record.h"

namespace tandem::gateway {
namespace {

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
  UnaryCall(Dispatcher* dispatcher, grpc::CallbackServerContext* context,
            const grpc::ByteBuffer* request, grpc::ByteBuffer* response)
      : GenerationCall(dispatcher, std::make_unique<GrpcCallerContext>(context), "Generate"),
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
  bool InternalInlineable() override { return dispatcher()->InlineReactions(); }

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
  StreamCall(Dispatcher* dispatcher, grpc::CallbackServerContext* context,
             const grpc::ByteBuffer* request)
      : GenerationCall(dispatcher, std::make_unique<GrpcCallerContext>(context), "GenerateStream") {
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
  bool InternalInlineable() override { return dispatcher()->InlineReactions(); }

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

// The authenticated caller; nullopt once `reactor` has finished with the refusal.
std::optional<TenantRegistry::Caller> CallerOrFinish(Dispatcher* dispatcher,
                                                     grpc::CallbackServerContext* context,
                                                     grpc::ServerUnaryReactor* reactor) {
  absl::StatusOr<TenantRegistry::Caller> caller =
      dispatcher->access().Authenticate(ApiKeyFromMetadata(context->client_metadata()));
  if (caller.ok()) return *std::move(caller);
  reactor->Finish(ToGrpcStatus(caller.status()));
  return std::nullopt;
}

}  // namespace

grpc::ServerUnaryReactor* GrpcFront::Generate(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  return new UnaryCall(dispatcher_, context, request, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GrpcFront::GenerateStream(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new StreamCall(dispatcher_, context, request);
}

grpc::ServerUnaryReactor* GrpcFront::Route(grpc::CallbackServerContext* context,
                                           const grpc::ByteBuffer* request_bytes,
                                           grpc::ByteBuffer* response_bytes) {
  auto* reactor = context->DefaultReactor();
  const std::optional<TenantRegistry::Caller> caller =
      CallerOrFinish(dispatcher_, context, reactor);
  if (!caller.has_value()) return reactor;
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
    s = dispatcher_->intake().Decide(request, MetadataRequestId(context), context->deadline(),
                                     &admission, caller->spec);
  }
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  const Disclosure disclosure = dispatcher_->access().DisclosureFor(*caller);
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

grpc::ServerUnaryReactor* GrpcFront::ListModels(grpc::CallbackServerContext* context,
                                                const tandem::v1::ListModelsRequest*,
                                                tandem::v1::ListModelsResponse* response) {
  auto* reactor = context->DefaultReactor();
  const std::optional<TenantRegistry::Caller> caller =
      CallerOrFinish(dispatcher_, context, reactor);
  if (!caller.has_value()) return reactor;
  for (auto& m : dispatcher_->access().VisibleModels(*caller))
    *response->add_models() = std::move(m);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tandem::gateway
