#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gateway/intake/intake.h"
#include "gateway/pool/endpoint.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

class Dispatcher;

// A copy of an admitted request sent to another model to measure it (a policy's `shadow`
// action); the answer is read and discarded, its duration and tokens go to the metrics. Owns
// itself: deleted in OnDone. Started by Dispatcher::StartShadow, which counts it in flight.
class ShadowCall final : public grpc::ClientReadReactor<tandem::v1::WorkerGenerateChunk> {
 public:
  ShadowCall(Dispatcher* dispatcher, std::shared_ptr<Endpoint> endpoint, std::string model,
             const Admission& admission, absl::Duration timeout);

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;
  void Cancel() { context_.TryCancel(); }

 private:
  Dispatcher* const dispatcher_;
  const std::shared_ptr<Endpoint> endpoint_;
  const std::string model_;
  const std::string request_class_;
  tandem::v1::WorkerGenerateRequest request_;
  grpc::ClientContext context_;
  tandem::v1::WorkerGenerateChunk chunk_;
  int64_t tokens_ = 0;
  const std::chrono::steady_clock::time_point start_;
};

}  // namespace tandem::gateway
