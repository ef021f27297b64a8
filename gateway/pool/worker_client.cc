#include "gateway/pool/worker_client.h"

namespace tandem::gateway {

GrpcWorkerClient::GrpcWorkerClient(std::string address,
                                   std::shared_ptr<grpc::ChannelCredentials> credentials,
                                   const std::string& tls_server_name)
    : address_(std::move(address)) {
  grpc::ChannelArguments args;
  // Worker requests carry whole prompts (and images); the gateway has already bounded them.
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(-1);
  // Keepalive matched by the worker's GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Reconnect quickly after a worker restart (defaults back off up to 120 s): readmission
  // within a second needs a connection attempt at least every ~200 ms.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  if (!tls_server_name.empty()) args.SetSslTargetNameOverride(tls_server_name);
  auto channel = grpc::CreateCustomChannel(
      address_, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials(), args);
  stub_ = tandem::v1::Worker::NewStub(channel);
  health_ = grpc::health::v1::Health::NewStub(channel);
}

void GrpcWorkerClient::CheckHealth(grpc::ClientContext* context,
                                   const grpc::health::v1::HealthCheckRequest* request,
                                   grpc::health::v1::HealthCheckResponse* response,
                                   std::function<void(grpc::Status)> done) {
  health_->async()->Check(context, request, response, std::move(done));
}

void GrpcWorkerClient::Generate(grpc::ClientContext* context,
                                const tandem::v1::WorkerGenerateRequest* request,
                                grpc::ClientReadReactor<tandem::v1::WorkerGenerateChunk>* reactor) {
  stub_->async()->Generate(context, request, reactor);
}

void GrpcWorkerClient::GetInfo(grpc::ClientContext* context,
                               const tandem::v1::WorkerInfoRequest* request,
                               tandem::v1::WorkerInfo* response,
                               std::function<void(grpc::Status)> done) {
  stub_->async()->GetInfo(context, request, response, std::move(done));
}

}  // namespace tandem::gateway
