#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/health_service.h"

namespace tandem {

struct GrpcServerOptions {
  // HOST:PORT; port 0 picks a free port.
  std::string listen;
  // Transport security of the port (see common/server_tls_flags.h); required.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::vector<grpc::Service*> services;
  // Served as grpc.health.v1 (required).
  HealthService* health = nullptr;
  // gRPC's receive limit for one message.
  int max_receive_message_bytes = 4 << 20;
  // Memory gRPC may use for this server's connections and calls (a grpc::ResourceQuota); past
  // it gRPC stops reading from peers instead of growing without bound. 0 leaves gRPC's default.
  int64_t max_memory_bytes = 0;
  // Connection age after which clients reconnect (and re-resolve DNS); 0 disables it.
  int max_connection_age_ms = 0;
  // After that age, how long calls in flight may still run before the connection is closed.
  int max_connection_age_grace_ms = 60 * 1000;
};

struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  // HOST:PORT actually bound.
  std::string address;
};

// Builds and starts a server with `options.health` as grpc.health.v1, server reflection, and
// keepalive pings from clients permitted every 5 s.
absl::StatusOr<GrpcServer> StartGrpcServer(const GrpcServerOptions& options);

// Health NOT_SERVING (ending Watch streams), then Shutdown with a `grace_seconds` deadline for
// calls still open.
void StopGrpcServer(grpc::Server* server, HealthService* health, int grace_seconds);

}  // namespace tandem
