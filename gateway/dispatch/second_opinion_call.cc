#include "gateway/dispatch/second_opinion_call.h"

#include <utility>

#include "common/request_validation.h"
#include "router/second_opinion.h"

namespace tandem::gateway {
namespace {

constexpr char kSuffix[] = "-second-opinion";
// The answer is one token; a few more bytes of it are enough to read a letter or a class name.
constexpr size_t kMaxAnswerBytes = 64;

}  // namespace

SecondOpinionCall* SecondOpinionCall::Start(std::shared_ptr<Endpoint> endpoint,
                                            const router::RouteDecision::SecondOpinion& ask,
                                            const std::string& request_id, const std::string& text,
                                            Done done) {
  auto* call = new SecondOpinionCall(std::move(endpoint), ask.classes, std::move(done));
  const router::SecondOpinionQuestion q = router::SecondOpinionPrompt(ask.classes, text);
  auto& r = call->request_;
  // Cut so that the suffixed id still passes the worker's check (as ShadowCall's).
  r.set_request_id(request_id.substr(0, kMaxRequestIdBytes - (sizeof(kSuffix) - 1)) + kSuffix);
  auto* system = r.add_messages();
  system->set_role("system");
  system->add_content()->set_text(q.system);
  auto* user = r.add_messages();
  user->set_role("user");
  user->add_content()->set_text(q.user);
  r.mutable_sampling()->set_max_tokens(1);
  r.mutable_sampling()->set_temperature(0);
  r.mutable_reasoning()->set_mode(tandem::v1::REASONING_MODE_OFF);
  call->context_.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(ask.timeout_seconds * 1e6)));
  call->context_.AddMetadata("x-request-id", r.request_id());
  call->endpoint_->AddOutstanding(1);
  call->endpoint_->client().Generate(&call->context_, &call->request_, call);
  call->StartRead(&call->chunk_);
  call->StartCall();
  return call;
}

SecondOpinionCall::SecondOpinionCall(std::shared_ptr<Endpoint> endpoint,
                                     std::vector<std::string> classes, Done done)
    : endpoint_(std::move(endpoint)), classes_(std::move(classes)), done_(std::move(done)) {}

void SecondOpinionCall::OnReadDone(bool ok) {
  if (!ok) return;
  if (answer_.size() < kMaxAnswerBytes) answer_ += chunk_.text();
  StartRead(&chunk_);
}

void SecondOpinionCall::OnDone(const grpc::Status& status) {
  endpoint_->AddOutstanding(-1);
  done_(status.ok() ? router::SecondOpinionClass(classes_, answer_) : std::string(), status);
  Unref();
}

void SecondOpinionCall::CancelAndUnref() {
  context_.TryCancel();
  Unref();
}

void SecondOpinionCall::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

}  // namespace tandem::gateway
