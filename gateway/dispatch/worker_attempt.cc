#include "gateway/dispatch/worker_attempt.h"

#include <utility>

#include "common/call_metadata.h"

namespace tandem::gateway {

WorkerAttempt::WorkerAttempt(Owner* owner, GenerationAttempts::NewAttempt start,
                             std::unique_ptr<grpc::ClientContext> context,
                             std::chrono::system_clock::time_point attempt_deadline,
                             std::chrono::system_clock::time_point worker_deadline)
    : owner_(owner),
      id_(start.id),
      target_(*start.target.target),
      changed_(std::move(start.changed)),
      request_(changed_.has_value() ? &*changed_ : start.admitted),
      context_(std::move(context)) {
  // Propagation already bounds this by the caller's deadline; this adds the default.
  context_->set_deadline(attempt_deadline);
  AddWorkerTimeout(worker_deadline, context_.get());
  context_->AddMetadata("x-request-id", request_->request_id());
}

void WorkerAttempt::Start() {
  target_.endpoint->AddOutstanding(1);
  target_.endpoint->client().Generate(context_.get(), request_, this);
  // The hold keeps the call alive until its end of stream is read: reads are started from
  // other reactions, and without it the call could complete between them.
  AddHold();
  StartRead(&in_);
  StartCall();
}

void WorkerAttempt::CancelAndUnref() {
  context_->TryCancel();
  Unref();
}

void WorkerAttempt::OnReadDone(bool ok) {
  if (ok) {
    owner_->OnAttemptChunk(this);
    return;
  }
  owner_->OnAttemptReadEnded(this);
  RemoveHold();  // end of stream: OnDone follows with the status
}

void WorkerAttempt::OnDone(const grpc::Status& status) {
  owner_->OnAttemptDone(this, status);
  Unref();
}

void WorkerAttempt::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

}  // namespace tandem::gateway
