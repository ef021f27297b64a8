#include "common/health_service.h"

#include <vector>

namespace tandem {

using grpc::health::v1::HealthCheckResponse;

// One Watch stream. Registered with the service while open; the service pushes statuses to it.
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, std::string name) : service_(service), name_(std::move(name)) {
    absl::MutexLock l(&service_->mu_);
    if (service_->shut_down_) {
      finishing_ = true;
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down"));
      return;
    }
    registered_ = true;
    service_->watchers_.emplace(name_, this);
    PushLocked(service_->StatusOfLocked(name_));
  }

  // Keeps only the latest status while a write is in flight.
  void PushLocked(Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finishing_) return;
    if (write_in_flight_) {
      pending_ = status;
      has_pending_ = true;
      return;
    }
    write_in_flight_ = true;
    response_.set_status(status);
    StartWrite(&response_);
  }

  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (finishing_) return;
    finishing_ = true;
    if (!write_in_flight_)
      Finish(status);
    else
      final_status_ = status;
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(service_->mu_) {
    absl::MutexLock l(&service_->mu_);
    write_in_flight_ = false;
    if (finishing_) {
      // The last status (NOT_SERVING at shutdown) still goes out before the stream ends.
      if (ok && has_pending_) {
        has_pending_ = false;
        response_.set_status(pending_);
        StartWriteAndFinish(&response_, grpc::WriteOptions(), final_status_);
      } else {
        Finish(final_status_);
      }
      return;
    }
    if (!ok) {
      finishing_ = true;
      Finish(grpc::Status::CANCELLED);
      return;
    }
    if (has_pending_) {
      has_pending_ = false;
      PushLocked(pending_);
    }
  }

  void OnCancel() override ABSL_LOCKS_EXCLUDED(service_->mu_) {
    absl::MutexLock l(&service_->mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override ABSL_LOCKS_EXCLUDED(service_->mu_) {
    {
      absl::MutexLock l(&service_->mu_);
      if (registered_) {
        auto [begin, end] = service_->watchers_.equal_range(name_);
        for (auto it = begin; it != end; ++it) {
          if (it->second == this) {
            service_->watchers_.erase(it);
            break;
          }
        }
      }
    }
    delete this;
  }

 private:
  friend class HealthService;  // its *Locked functions assert service_->mu_ (their own mu_)

  HealthService* const service_;
  const std::string name_;
  HealthCheckResponse response_ ABSL_GUARDED_BY(service_->mu_);
  bool registered_ ABSL_GUARDED_BY(service_->mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(service_->mu_) = false;
  bool has_pending_ ABSL_GUARDED_BY(service_->mu_) = false;
  Status pending_ ABSL_GUARDED_BY(service_->mu_) = HealthCheckResponse::UNKNOWN;
  bool finishing_ ABSL_GUARDED_BY(service_->mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(service_->mu_);
};

HealthService::Status HealthService::StatusOfLocked(const std::string& service) const {
  auto it = statuses_.find(service);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
}

void HealthService::NotifyLocked(const std::string& service) {
  auto [begin, end] = watchers_.equal_range(service);
  for (auto it = begin; it != end; ++it) {
    // Every watcher's service_ is this: its mutex is mu_, held here.
    it->second->service_->mu_.AssertHeld();
    it->second->PushLocked(StatusOfLocked(service));
  }
}

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  const Status s = serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  auto [it, inserted] = statuses_.emplace(service, s);
  if (!inserted && it->second == s) return;
  it->second = s;
  NotifyLocked(service);
}

void HealthService::SetAllServingStatus(bool serving) {
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  const Status s = serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  for (auto& [name, status] : statuses_) {
    if (status == s) continue;
    status = s;
    NotifyLocked(name);
  }
}

void HealthService::Shutdown() {
  absl::MutexLock l(&mu_);
  if (shut_down_) return;
  for (auto& [name, status] : statuses_) {
    status = HealthCheckResponse::NOT_SERVING;
    NotifyLocked(name);
  }
  shut_down_ = true;
  for (auto& [name, watcher] : watchers_) {
    watcher->service_->mu_.AssertHeld();  // mu_, as in NotifyLocked
    watcher->FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down"));
  }
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const grpc::health::v1::HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  auto* reactor = context->DefaultReactor();
  Status s;
  {
    absl::MutexLock l(&mu_);
    s = StatusOfLocked(request->service());
  }
  if (s == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + request->service() + "'"));
  } else {
    response->set_status(s);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext*, const grpc::health::v1::HealthCheckRequest* request) {
  return new Watcher(this, request->service());
}

}  // namespace tandem
