#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"

namespace tandem {

// grpc.health.v1 over the callback API, replacing gRPC's default service: that one starts
// SERVING before anything is ready, and in gRPC 1.51 a cancelled Watch keeps Server::Shutdown
// waiting for its whole deadline. Here every status starts NOT_SERVING, Watch streams send each
// change (coalesced to the latest while a write is in flight), and Shutdown ends them all.
class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Registers or updates `service` ("" is the whole server).
  void SetServingStatus(const std::string& service, bool serving);
  // Every registered service.
  void SetAllServingStatus(bool serving);
  // Every service NOT_SERVING, later changes ignored, open Watch streams finished.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

  class Watcher;

 private:
  Status StatusOfLocked(const std::string& service) const;
  void NotifyLocked(const std::string& service);

  std::mutex mu_;
  std::map<std::string, Status> statuses_;         // guarded by mu_
  std::multimap<std::string, Watcher*> watchers_;  // guarded by mu_
  bool shut_down_ = false;                         // guarded by mu_

  friend class Watcher;
};

}  // namespace tandem
