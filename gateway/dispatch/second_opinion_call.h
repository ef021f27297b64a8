#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "gateway/pool/endpoint.h"
#include "router/route_decision.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

// The question a policy's second-opinion model is asked about an unsure request
// (classifier.second_opinion, router/second_opinion.h): one token, greedy, no thinking, within
// the policy's timeout. `done` gets the class the answer names (empty when none) and how the
// call ended; it runs once, on a gRPC thread. Owns itself: deleted after `done` and once every
// Cancel has returned.
class SecondOpinionCall final : public grpc::ClientReadReactor<tandem::v1::WorkerGenerateChunk> {
 public:
  using Done = std::function<void(const std::string& request_class, const grpc::Status& status)>;

  // Starts the call. `text` is what the learned classifier read.
  static SecondOpinionCall* Start(std::shared_ptr<Endpoint> endpoint,
                                  const router::RouteDecision::SecondOpinion& ask,
                                  const std::string& request_id, const std::string& text,
                                  Done done);

  // Cancels the call (the caller went away); `done` still runs. The caller holds a reference
  // (Ref) across it, taken while it knew the call was live.
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void CancelAndUnref();

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  SecondOpinionCall(std::shared_ptr<Endpoint> endpoint, std::vector<std::string> classes,
                    Done done);
  void Unref();

  const std::shared_ptr<Endpoint> endpoint_;
  const std::vector<std::string> classes_;
  const Done done_;
  tandem::v1::WorkerGenerateRequest request_;
  grpc::ClientContext context_;
  tandem::v1::WorkerGenerateChunk chunk_;
  std::string answer_;
  std::atomic<int> refs_{1};  // gRPC's, dropped in OnDone; one per CancelAndUnref
};

}  // namespace tandem::gateway
