#pragma once

#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
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
  void SetServingStatus(const std::string& service, bool serving) ABSL_LOCKS_EXCLUDED(mu_);
  // Every registered service.
  void SetAllServingStatus(bool serving) ABSL_LOCKS_EXCLUDED(mu_);
  // Every service NOT_SERVING, later changes ignored, open Watch streams finished.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override ABSL_LOCKS_EXCLUDED(mu_);

  class Watcher;

 private:
  Status StatusOfLocked(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyLocked(const std::string& service) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Also guards each Watcher's state (Watcher::service_->mu_).
  absl::Mutex mu_;
  std::map<std::string, Status> statuses_ ABSL_GUARDED_BY(mu_);
  std::multimap<std::string, Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;

  friend class Watcher;
};

}  // namespace tandem
