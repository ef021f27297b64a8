#include "gateway/relay/relay_writes.h"

namespace tandem::gateway {

void RelayWrites::WriteStarted() {
  absl::MutexLock l(&mu_);
  write_in_flight_ = true;
}

RelayWrites::Next RelayWrites::WriteDone(bool ok) {
  absl::MutexLock l(&mu_);
  write_in_flight_ = false;
  if (!ok) client_gone_ = true;
  if (upstream_done_) return Next::kFinish;
  return ok ? Next::kResume : Next::kClientGone;
}

bool RelayWrites::UpstreamDone(const grpc::Status& status) {
  absl::MutexLock l(&mu_);
  upstream_done_ = true;
  upstream_status_ = status;
  return !write_in_flight_;
}

std::optional<grpc::Status> RelayWrites::TakeFinish() {
  absl::MutexLock l(&mu_);
  if (finished_) return std::nullopt;
  finished_ = true;
  if (client_gone_ && upstream_status_.ok()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  }
  return upstream_status_;
}

}  // namespace tandem::gateway
