#pragma once

#include <functional>
#include <memory>
#include <string>

#include "gateway/pool/worker_client.h"

namespace tandem::gateway {

// Answers health checks and GetInfo at once with a configured result (shared so a test can
// change it between probes).
struct FakeState {
  grpc::Status status;
  tandem::v1::WorkerInfo info;
  bool serving = true;
};

class FakeWorkerClient final : public WorkerClient {
 public:
  FakeWorkerClient(std::string address, grpc::Status status, tandem::v1::WorkerInfo info)
      : address_(std::move(address)),
        state_(std::make_shared<FakeState>(FakeState{std::move(status), std::move(info)})) {}
  FakeWorkerClient(std::string address, std::shared_ptr<FakeState> state)
      : address_(std::move(address)), state_(std::move(state)) {}
  const std::string& address() const override { return address_; }
  void Generate(grpc::ClientContext*, const tandem::v1::WorkerGenerateRequest*,
                grpc::ClientReadReactor<tandem::v1::WorkerGenerateChunk>*) override {}
  void GetInfo(grpc::ClientContext*, const tandem::v1::WorkerInfoRequest*,
               tandem::v1::WorkerInfo* response, std::function<void(grpc::Status)> done) override {
    *response = state_->info;
    done(state_->status);
  }
  void CheckHealth(grpc::ClientContext*, const grpc::health::v1::HealthCheckRequest*,
                   grpc::health::v1::HealthCheckResponse* response,
                   std::function<void(grpc::Status)> done) override {
    if (!state_->status.ok()) {
      done(state_->status);
      return;
    }
    response->set_status(state_->serving ? grpc::health::v1::HealthCheckResponse::SERVING
                                         : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    done(grpc::Status::OK);
  }

 private:
  std::string address_;
  std::shared_ptr<FakeState> state_;
};

inline tandem::v1::WorkerInfo Info(const std::string& model, tandem::v1::WorkerInfo::State state) {
  tandem::v1::WorkerInfo i;
  i.set_model_name(model);
  i.set_model_id("id/" + model);
  i.set_state(state);
  i.set_vision(model == "qwen");
  i.set_max_output_tokens(123);
  return i;
}

}  // namespace tandem::gateway
