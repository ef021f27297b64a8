#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::gateway {

// The gateway's view of one worker endpoint: the seam that lets tests put an in-process fake
// behind the dispatch and relay code. All calls are asynchronous and never block.
class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  virtual const std::string& address() const = 0;
  // Starts a streaming generation delivered to `reactor` (which then calls StartCall()).
  virtual void Generate(grpc::ClientContext* context,
                        const tandem::v1::WorkerGenerateRequest* request,
                        grpc::ClientReadReactor<tandem::v1::WorkerGenerateChunk>* reactor) = 0;
  virtual void GetInfo(grpc::ClientContext* context, const tandem::v1::WorkerInfoRequest* request,
                       tandem::v1::WorkerInfo* response,
                       std::function<void(grpc::Status)> done) = 0;
  // grpc.health.v1 Check.
  virtual void CheckHealth(grpc::ClientContext* context,
                           const grpc::health::v1::HealthCheckRequest* request,
                           grpc::health::v1::HealthCheckResponse* response,
                           std::function<void(grpc::Status)> done) = 0;
};

// One HTTP/2 channel per endpoint. gRPC's own retries are off: the gateway retries at one layer
// only (its relay), where it knows whether anything was streamed yet.
class GrpcWorkerClient final : public WorkerClient {
 public:
  // `credentials` null means plaintext; `tls_server_name` overrides the name checked against the
  // worker's certificate (empty: the host in `address`).
  GrpcWorkerClient(std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials,
                   const std::string& tls_server_name);
  const std::string& address() const override { return address_; }
  void Generate(grpc::ClientContext* context, const tandem::v1::WorkerGenerateRequest* request,
                grpc::ClientReadReactor<tandem::v1::WorkerGenerateChunk>* reactor) override;
  void GetInfo(grpc::ClientContext* context, const tandem::v1::WorkerInfoRequest* request,
               tandem::v1::WorkerInfo* response, std::function<void(grpc::Status)> done) override;
  void CheckHealth(grpc::ClientContext* context,
                   const grpc::health::v1::HealthCheckRequest* request,
                   grpc::health::v1::HealthCheckResponse* response,
                   std::function<void(grpc::Status)> done) override;

 private:
  const std::string address_;
  std::unique_ptr<tandem::v1::Worker::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace tandem::gateway
