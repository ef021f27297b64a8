#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gateway/pool/model_pool.h"
#include "tandem/v1/admin.pb.h"
#include "tandem/v1/gateway.pb.h"

namespace tandem::gateway {

class GatewayMetrics;

// Resolves HOST to addresses (IPv4 and IPv6), for dns: endpoints.
using Resolver =
    std::function<absl::StatusOr<std::vector<std::string>>(const std::string& host, int port)>;
absl::StatusOr<std::vector<std::string>> ResolveWithGetaddrinfo(const std::string& host, int port);

struct WorkerPoolsOptions {
  // Active probes every `probe_interval`, each RPC bounded by `probe_timeout`. A worker that
  // refuses connections is not ready at once; one that is only slow to answer (busy, or this
  // host's CPUs saturated) stays ready until `probe_timeouts` probes in a row time out, so load
  // alone never ejects the last worker of a model.
  absl::Duration probe_interval = absl::Milliseconds(100);
  absl::Duration probe_timeout = absl::Seconds(1);
  int probe_timeouts = 3;
  // How often dns: endpoints are re-resolved.
  absl::Duration dns_interval = absl::Seconds(5);
  EndpointOptions endpoint;
  PickStrategy pick = PickStrategy::kLeastOutstanding;
  // Models whose pick rule differs from `pick`.
  std::map<std::string, PickStrategy> pick_per_model;
  PrefixPickOptions prefix_pick;
  // Transport to the workers (mutual TLS, or plaintext when chosen); null means plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The name the workers' certificates must carry when it is not the host in their address.
  std::string tls_server_name;
};

// All model pools, and the thread that probes their endpoints, runs breaker timers and
// re-resolves DNS names.
class WorkerPools {
 public:
  // `on_change` runs (on a gRPC thread or the pools' thread) whenever an endpoint's usability
  // or a pool's membership changes. `metrics` may be null.
  WorkerPools(WorkerPoolsOptions options, std::function<void()> on_change,
              GatewayMetrics* metrics = nullptr);
  ~WorkerPools();

  // "MODEL=HOST:PORT" or "MODEL=dns:///HOST:PORT" entries; a model may be named several times.
  absl::Status Configure(const std::vector<std::string>& entries);
  void AddEndpoint(const std::string& model, std::unique_ptr<WorkerClient> client);
  // Seams for tests.
  void SetResolver(Resolver resolver) { resolver_ = std::move(resolver); }
  void SetClientFactory(ClientFactory factory) { factory_ = std::move(factory); }

  void Start();
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Re-resolves every dns: entry now; returns the first error (pools keep their last list).
  absl::Status ResolveNow();

  // nullptr when the model is not configured.
  ModelPool* Find(const std::string& model) const;
  const std::map<std::string, std::unique_ptr<ModelPool>>& pools() const { return pools_; }
  // Some model's endpoints are picked by prefix (PickStrategy::kPrefix).
  bool prefix_pick() const {
    if (options_.pick == PickStrategy::kPrefix) return true;
    for (const auto& [model, pick] : options_.pick_per_model) {
      if (pick == PickStrategy::kPrefix) return true;
    }
    return false;
  }
  PickStrategy pick(const std::string& model) const {
    auto it = options_.pick_per_model.find(model);
    return it == options_.pick_per_model.end() ? options_.pick : it->second;
  }

 private:
  struct DnsEntry {
    std::string model;
    std::string host;
    int port = 0;
  };
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  ModelPool& PoolFor(const std::string& model);

  const WorkerPoolsOptions options_;
  const std::function<void()> on_change_;
  GatewayMetrics* const metrics_;
  Resolver resolver_ = ResolveWithGetaddrinfo;
  ClientFactory factory_;
  std::map<std::string, std::unique_ptr<ModelPool>> pools_;
  std::vector<DnsEntry> dns_;
  // Static addresses per model, kept in every DNS-driven list.
  std::map<std::string, std::vector<std::string>> static_;
  // Endpoints a DNS change dropped while their probe ran: Stop waits for those probes too, since
  // their callbacks use on_change_ and the metrics. Touched by ResolveNow, Loop and Stop, which
  // never run at once (ResolveNow runs in Configure, before Start, or on Loop's thread).
  std::vector<std::shared_ptr<Endpoint>> retired_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tandem::gateway
