#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>

#include "gateway/dispatch/generation_attempts.h"
#include "gateway/intake/intake.h"
#include "gateway/pool/endpoint.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

// One call of a generation to one worker (Envoy's UpstreamRequest): a client read reactor whose
// events go to its owner, the GenerationCall. The owner creates it under its lock (registered
// with the attempt GenerationAttempts just added) and starts it once the lock is released.
//
// Lifetime: gRPC's reference until OnDone, plus one per CancelAndUnref to come (Ref); the
// object deletes itself when the last goes.
class WorkerAttempt final : public grpc::ClientReadReactor<tandem::v1::WorkerGenerateChunk> {
 public:
  // What the attempt tells its owner; called on gRPC's threads.
  class Owner {
   public:
    virtual void OnAttemptChunk(WorkerAttempt* attempt) = 0;
    virtual void OnAttemptReadEnded(WorkerAttempt* attempt) = 0;
    virtual void OnAttemptDone(WorkerAttempt* attempt, const grpc::Status& status) = 0;

   protected:
    ~Owner() = default;
  };

  // `context` is the worker call's (from the caller's CallerContext); `attempt_deadline` bounds
  // it and `worker_deadline` is when the worker is told to stop (kWorkerTimeoutHeader). The
  // owner outlives its attempts (the admitted request `start` may point to is its own).
  WorkerAttempt(Owner* owner, GenerationAttempts::NewAttempt start,
                std::unique_ptr<grpc::ClientContext> context,
                std::chrono::system_clock::time_point attempt_deadline,
                std::chrono::system_clock::time_point worker_deadline);

  void Start();
  // Reads the next chunk: only once the previous one was handled, so the attempt cannot end
  // (the hold) while its owner may still call this.
  void Read() { StartRead(&in_); }
  // A reference for a cancel from another thread (GenerationCall::RefLive).
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void CancelAndUnref();

  GenerationAttempts::AttemptId id() const { return id_; }
  const tandem::v1::WorkerGenerateChunk& chunk() const { return in_; }
  Endpoint* endpoint() const { return target_.endpoint.get(); }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void Unref();

  Owner* const owner_;
  const GenerationAttempts::AttemptId id_;
  const Target target_;
  // What this attempt sends: changed_ when it has one, else the call's admitted request.
  const std::optional<tandem::v1::WorkerGenerateRequest> changed_;
  const tandem::v1::WorkerGenerateRequest* const request_;
  std::unique_ptr<grpc::ClientContext> context_;
  tandem::v1::WorkerGenerateChunk in_;
  std::atomic<int> refs_{1};
};

}  // namespace tandem::gateway
