#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/log_rate_limiter.h"
#include "common/request_validation.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "workers/engine.h"
#include "workers/generation_request.h"
#include "workers/image_pool.h"
#include "workers/remote_engine.h"
#include "workers/scheduler.h"
#include "workers/worker_metrics.h"

namespace tandem::workers {

// One Generate call. The engine thread reaches it through Bridge, which outlives the reactor
// (the scheduler may hold it after the RPC is gone). A request with images has them decoded
// and resized on the image pool, never on this gRPC thread: gRPC's threads answer health
// checks and every other call, and must not wait on a decode. Created by WorkerService with
// `new`; deletes itself in OnDone.
class GenerateCall final : public grpc::ServerWriteReactor<tandem::v1::WorkerGenerateChunk> {
 public:
  // `state` is the worker's: only READY workers accept work.
  // `engine` and `scheduler` are null for a worker in front of an engine server (`upstream`).
  GenerateCall(const EngineInfo& engine_info, const Engine* engine, Scheduler* scheduler,
               RemoteEngine* upstream, WorkerMetrics* metrics, const RequestLimits& limits,
               LogRateLimiter* rejected_log, ImagePool* image_pool,
               tandem::v1::WorkerInfo::State state, grpc::CallbackServerContext* context,
               const tandem::v1::WorkerGenerateRequest* request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // State shared by the engine thread (producer) and gRPC (write completions).
  class Bridge;

  // UNAVAILABLE for a worker that is loading or draining, counted by why.
  void RejectNotReady(tandem::v1::WorkerInfo::State state);
  // Hands the request to the engine server's dispatcher. As Admit: touches nothing of the call
  // after the dispatcher has it.
  void SubmitUpstream();
  // On an image thread: the images `planned` lists decoded and resized, then the request
  // admitted.
  void PrepareImagesAndAdmit(PlannedGeneration planned);
  // Submits the request, its arrival and deadline set from the call's, to the scheduler.
  // Touches nothing of the call after the scheduler has it: the engine thread may finish (and
  // delete) it at once.
  void Admit(GenerationRequest g);
  void Reject(const absl::Status& status);
  void LogEnd(const grpc::Status& status, int32_t completion_tokens);

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
  tandem::v1::WorkerGenerateChunk out_;  // touched only while a write is not in flight
  const std::string request_id_;
  const std::chrono::steady_clock::time_point start_;
  // The call's deadline, the earlier of gRPC's and kWorkerTimeoutHeader's; the scheduler stops
  // the work at it.
  const std::chrono::system_clock::time_point deadline_;
};

}  // namespace tandem::workers
