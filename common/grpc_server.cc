#include "common/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/resource_quota.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/process.h"

namespace tandem {

absl::StatusOr<GrpcServer> StartGrpcServer(const GrpcServerOptions& options) {
  auto host_port = ParseHostPort("listen", options.listen);
  if (!host_port.ok()) return host_port.status();
  if (options.health == nullptr) return absl::InvalidArgumentError("no health service");
  if (options.credentials == nullptr) return absl::InvalidArgumentError("no server credentials");
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, options.credentials, &port);
  builder.RegisterService(options.health);
  for (grpc::Service* s : options.services) builder.RegisterService(s);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  if (options.max_memory_bytes > 0) {
    grpc::ResourceQuota quota("tandem-server");
    quota.Resize(static_cast<size_t>(options.max_memory_bytes));
    builder.SetResourceQuota(quota);
  }
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  if (options.max_connection_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, options.max_connection_age_ms);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               options.max_connection_age_grace_ms);
  }
  GrpcServer out;
  out.server = builder.BuildAndStart();
  if (!out.server || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  out.address = absl::StrCat(host_port->first, ":", port);
  return out;
}

void StopGrpcServer(grpc::Server* server, HealthService* health, int grace_seconds) {
  health->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(grace_seconds));
}

}  // namespace tandem
