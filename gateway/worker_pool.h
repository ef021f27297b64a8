#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gateway/worker_client.h"
#include "tandem/v1/gateway.pb.h"

namespace tandem::gateway {

// One worker endpoint and what the gateway last learned about it.
class Endpoint {
 public:
  Endpoint(std::string model, std::unique_ptr<WorkerClient> client)
      : model_(std::move(model)), client_(std::move(client)) {}

  WorkerClient& client() { return *client_; }
  const std::string& address() const { return client_->address(); }
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  int outstanding() const { return outstanding_.load(std::memory_order_relaxed); }
  void AddOutstanding(int delta) { outstanding_.fetch_add(delta, std::memory_order_relaxed); }

  // Last successful WorkerInfo, and the reason it is not ready (empty when ready).
  tandem::v1::WorkerInfo info() const;
  std::string not_ready_reason() const;

  // Issues one asynchronous GetInfo unless one is in flight; `on_change` runs when readiness
  // flips. `timeout` bounds the probe.
  void Probe(absl::Duration timeout, const std::function<void()>& on_change);
  // Cancels an in-flight probe and waits for its callback; for shutdown.
  void StopProbing();

 private:
  void ProbeDone(const grpc::Status& status, const std::function<void()>& on_change);

  const std::string model_;
  const std::unique_ptr<WorkerClient> client_;
  std::atomic<bool> ready_{false};
  std::atomic<int> outstanding_{0};

  mutable std::mutex mu_;
  std::condition_variable probe_cv_;
  tandem::v1::WorkerInfo info_;                         // guarded by mu_
  std::string not_ready_reason_ = "not probed yet";     // guarded by mu_
  bool probe_in_flight_ = false;                        // guarded by mu_
  std::unique_ptr<grpc::ClientContext> probe_context_;  // guarded by mu_
  tandem::v1::WorkerInfoRequest probe_request_;
  tandem::v1::WorkerInfo probe_response_;
};

// The endpoints serving one model.
class ModelPool {
 public:
  explicit ModelPool(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  void AddEndpoint(std::unique_ptr<WorkerClient> client);
  const std::vector<std::unique_ptr<Endpoint>>& endpoints() const { return endpoints_; }

  // The ready endpoint with the fewest outstanding requests, or UNAVAILABLE with the reason each
  // endpoint is not ready.
  absl::StatusOr<Endpoint*> Pick() const;
  int ReadyCount() const;
  // Model facts from the most recently seen worker info (empty before any probe succeeded).
  tandem::v1::ModelStatus Status() const;

 private:
  const std::string name_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

// All model pools, and the thread that probes their endpoints every `interval`.
class WorkerPools {
 public:
  // `on_change` runs (on a gRPC thread) whenever an endpoint's readiness changes.
  WorkerPools(absl::Duration interval, std::function<void()> on_change)
      : interval_(interval), on_change_(std::move(on_change)) {}
  ~WorkerPools();

  // "model=host:port" entries; a model may be named several times (replicas).
  absl::Status Configure(const std::vector<std::string>& entries);
  void AddEndpoint(const std::string& model, std::unique_ptr<WorkerClient> client);

  void Start();
  void Stop();

  // nullptr when the model is not configured.
  ModelPool* Find(const std::string& model) const;
  const std::map<std::string, std::unique_ptr<ModelPool>>& pools() const { return pools_; }

 private:
  void Loop();

  const absl::Duration interval_;
  const std::function<void()> on_change_;
  std::map<std::string, std::unique_ptr<ModelPool>> pools_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace tandem::gateway
