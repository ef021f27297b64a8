#include "gateway/pool/worker_pools.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "common/steady_wait.h"
#include "gateway/metrics/gateway_metrics.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {

absl::StatusOr<std::vector<std::string>> ResolveWithGetaddrinfo(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", gai_strerror(rc)));
  }
  std::set<std::string> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char buf[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) {
      continue;
    }
    out.insert(a->ai_family == AF_INET6 ? absl::StrCat("[", buf, "]:", port)
                                        : absl::StrCat(buf, ":", port));
  }
  freeaddrinfo(res);
  return std::vector<std::string>(out.begin(), out.end());
}

WorkerPools::WorkerPools(WorkerPoolsOptions options, std::function<void()> on_change,
                         GatewayMetrics* metrics)
    : options_(options), on_change_(std::move(on_change)), metrics_(metrics) {
  factory_ = [this](const std::string& a) {
    return std::make_unique<GrpcWorkerClient>(a, options_.credentials, options_.tls_server_name);
  };
}

WorkerPools::~WorkerPools() { Stop(); }

ModelPool& WorkerPools::PoolFor(const std::string& model) {
  auto& pool = pools_[model];
  if (!pool) pool = std::make_unique<ModelPool>(model, options_.endpoint, metrics_, options_.prefix_pick);
  return *pool;
}

absl::Status WorkerPools::Configure(const std::vector<std::string>& entries) {
  for (const std::string& entry : entries) {
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--workers entry '", entry, "': expected MODEL=HOST:PORT or MODEL=dns:///HOST:PORT"));
    }
    const std::string model = entry.substr(0, eq);
    std::string address = entry.substr(eq + 1);
    if (absl::StartsWith(address, "dns:")) {
      std::string target = address.substr(4);
      while (!target.empty() && target[0] == '/') target.erase(0, 1);
      const size_t colon = target.rfind(':');
      int port = 0;
      if (colon == std::string::npos || colon == 0 ||
          !absl::SimpleAtoi(target.substr(colon + 1), &port) || port < 1 || port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--workers entry '", entry, "': expected dns:///HOST:PORT with a port in [1, 65535]"));
      }
      dns_.push_back({model, target.substr(0, colon), port});
      PoolFor(model);
      continue;
    }
    static_[model].push_back(address);
    AddEndpoint(model, factory_(address));
  }
  if (pools_.empty()) {
    return absl::InvalidArgumentError(
        "--workers is empty: give at least one MODEL=HOST:PORT, e.g. qwen=127.0.0.1:7001");
  }
  if (!dns_.empty()) {
    // A name that does not resolve yet (pods still starting) is not fatal: re-resolved later.
    if (absl::Status s = ResolveNow(); !s.ok()) spdlog::warn("{}", std::string(s.message()));
  }
  return absl::OkStatus();
}

absl::Status WorkerPools::ResolveNow() {
  absl::Status first;
  std::map<std::string, std::vector<std::string>> lists;
  std::set<std::string> failed;
  for (const DnsEntry& d : dns_) {
    auto addresses = resolver_(d.host, d.port);
    if (!addresses.ok()) {
      if (first.ok()) first = addresses.status();
      failed.insert(d.model);
      if (metrics_ != nullptr) metrics_->CountDnsResolution(d.model, false);
      continue;
    }
    if (metrics_ != nullptr) metrics_->CountDnsResolution(d.model, true);
    auto& list = lists[d.model];
    list.insert(list.end(), addresses->begin(), addresses->end());
  }
  bool changed = false;
  for (auto& [model, list] : lists) {
    if (failed.contains(model)) continue;  // keep the last good list
    for (const std::string& s : static_[model]) list.push_back(s);
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    ModelPool& pool = PoolFor(model);
    const auto before = pool.endpoints();
    if (pool.SetAddresses(list, factory_)) {
      const auto after = pool.endpoints();
      for (const auto& e : *before) {
        if (std::find(after->begin(), after->end(), e) == after->end() && e->probing()) {
          retired_.push_back(e);
        }
      }
      spdlog::info("model {}: endpoints now {}", model, absl::StrJoin(list, ", "));
      changed = true;
    }
  }
  if (changed && on_change_) on_change_();
  return first;
}

void WorkerPools::AddEndpoint(const std::string& model, std::unique_ptr<WorkerClient> client) {
  PoolFor(model).AddEndpoint(std::move(client));
}

ModelPool* WorkerPools::Find(const std::string& model) const {
  auto it = pools_.find(model);
  return it == pools_.end() ? nullptr : it->second.get();
}

void WorkerPools::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void WorkerPools::Stop() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
  for (auto& [name, pool] : pools_) {
    for (auto& e : *pool->endpoints()) e->StopProbing();
  }
  for (auto& e : retired_) e->StopProbing();
  retired_.clear();
}

void WorkerPools::Loop() {
  const auto period = absl::ToChronoMilliseconds(options_.probe_interval);
  auto next_dns =
      std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(options_.dns_interval);
  absl::MutexLock l(&mu_);
  while (!stop_) {
    const auto now = std::chrono::steady_clock::now();
    if (!dns_.empty() && now >= next_dns) {
      mu_.Unlock();
      if (absl::Status s = ResolveNow(); !s.ok()) {
        spdlog::warn("{} (keeping the last endpoint list)", std::string(s.message()));
      }
      mu_.Lock();
      next_dns = now + absl::ToChronoMilliseconds(options_.dns_interval);
    }
    for (auto& [name, pool] : pools_) {
      for (auto& e : *pool->endpoints()) {
        e->set_probe_timeouts(options_.probe_timeouts);
        e->Tick(now);
        e->Probe(options_.probe_timeout, on_change_);
      }
    }
    std::erase_if(retired_, [](const auto& e) { return !e->probing(); });
    // Breaker timers and passive ejections change usability outside probe callbacks.
    if (on_change_) on_change_();
    const auto deadline = std::chrono::steady_clock::now() + period;
    while (!stop_ && WaitUntil(cv_, mu_, deadline)) {
    }
  }
}

}  // namespace tandem::gateway
