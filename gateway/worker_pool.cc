#include "gateway/worker_pool.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "common/steady_wait.h"
#include "gateway/gateway_metrics.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {

const char* BreakerStateName(BreakerState s) {
  switch (s) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
  }
  return "?";
}

CallOutcome ClassifyCall(grpc::StatusCode code, bool caller_deadline_passed) {
  switch (code) {
    case grpc::StatusCode::OK:
      return CallOutcome::kSuccess;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DATA_LOSS:
      return CallOutcome::kWorkerFault;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return caller_deadline_passed ? CallOutcome::kNeutral : CallOutcome::kWorkerFault;
    case grpc::StatusCode::INTERNAL:
      return CallOutcome::kInternal;
    default:
      // INVALID_ARGUMENT and its kin describe the request; RESOURCE_EXHAUSTED is a full queue
      // (load, not sickness); CANCELLED is the caller leaving.
      return CallOutcome::kNeutral;
  }
}

Endpoint::Endpoint(std::string model, std::unique_ptr<WorkerClient> client, EndpointOptions options,
                   GatewayMetrics* metrics)
    : model_(std::move(model)), client_(std::move(client)), options_(options), metrics_(metrics) {
  if (metrics_ != nullptr) metrics_->AddEndpoint(model_, address());
}

Endpoint::~Endpoint() {
  if (metrics_ != nullptr) metrics_->RemoveEndpoint(model_, address());
}

std::string Endpoint::metrics_url() const {
  absl::MutexLock l(&mu_);
  if (info_.metrics_port() <= 0) return "";
  const std::string& a = address();
  const size_t colon = a.rfind(':');
  return absl::StrCat(info_.metrics_tls() ? "https://" : "http://", a.substr(0, colon), ":",
                      info_.metrics_port(), "/metrics");
}

tandem::v1::WorkerInfo Endpoint::info() const {
  absl::MutexLock l(&mu_);
  return info_;
}

namespace {
constexpr uint64_t kFactsKnown = uint64_t{1} << 32;
constexpr uint64_t kFactsVision = uint64_t{1} << 33;
}  // namespace

ModelFacts Endpoint::facts() const {
  const uint64_t packed = facts_.load(std::memory_order_acquire);
  return ModelFacts{.known = (packed & kFactsKnown) != 0,
                    .vision = (packed & kFactsVision) != 0,
                    .max_output_tokens = static_cast<int32_t>(packed & 0xffffffffu)};
}

std::string Endpoint::not_ready_reason() const {
  absl::MutexLock l(&mu_);
  if (!not_ready_reason_.empty()) return not_ready_reason_;
  if (breaker() == BreakerState::kOpen) return absl::StrCat("ejected: ", last_fault_);
  return "";
}

tandem::v1::EndpointStatus Endpoint::Describe() const {
  tandem::v1::EndpointStatus s;
  s.set_model(model_);
  s.set_address(address());
  s.set_ready(ready());
  s.set_usable(usable());
  s.set_breaker(BreakerStateName(breaker()));
  s.set_reason(not_ready_reason());
  s.set_outstanding(outstanding());
  s.set_scraped_load(scraped_load());
  absl::MutexLock l(&mu_);
  s.set_consecutive_failures(std::max(consecutive_faults_, consecutive_internal_));
  s.set_ejections(ejections_);
  if (breaker() == BreakerState::kOpen) {
    s.set_ejected_for_seconds(std::max(
        0.0,
        std::chrono::duration<double>(ejected_until_ - std::chrono::steady_clock::now()).count()));
  }
  s.set_last_fault(last_fault_);
  return s;
}

void Endpoint::ExportState() {
  if (metrics_ != nullptr) {
    metrics_->SetEndpointState(model_, address(), ready(), static_cast<int>(breaker()));
  }
}

void Endpoint::Eject(TimePoint now, const char* why) {
  ejection_ = ejection_ == absl::ZeroDuration() ? options_.base_ejection
                                                : std::min(ejection_ * 2, options_.max_ejection);
  ejected_until_ = now + absl::ToChronoNanoseconds(ejection_);
  ++ejections_;
  breaker_.store(BreakerState::kOpen, std::memory_order_release);
  if (metrics_ != nullptr) metrics_->CountEjection(model_, address());
  spdlog::warn("worker {} for model {} ejected for {} ({}: {})", address(), model_,
               absl::FormatDuration(ejection_), why, last_fault_);
  ExportState();
}

void Endpoint::RecordCall(CallOutcome outcome, TimePoint now) {
  absl::MutexLock l(&mu_);
  switch (outcome) {
    case CallOutcome::kNeutral:
      return;
    case CallOutcome::kSuccess:
      consecutive_faults_ = 0;
      consecutive_internal_ = 0;
      consecutive_stalls_ = 0;
      return;
    case CallOutcome::kWorkerFault:
      ++consecutive_faults_;
      last_fault_ = "consecutive failed calls";
      break;
    case CallOutcome::kInternal:
      ++consecutive_internal_;
      last_fault_ = "consecutive INTERNAL errors";
      break;
    case CallOutcome::kStalled:
      ++consecutive_stalls_;
      last_fault_ = "consecutive stalled streams";
      break;
  }
  if (breaker() != BreakerState::kClosed) return;
  if (consecutive_faults_ >= options_.failure_threshold ||
      consecutive_internal_ >= options_.internal_error_threshold ||
      consecutive_stalls_ >= options_.stall_threshold) {
    if (consecutive_stalls_ >= options_.stall_threshold) {
      stall_ejected_.store(true, std::memory_order_release);
    }
    Eject(now, "passive outlier detection");
  }
}

void Endpoint::Tick(TimePoint now) {
  absl::MutexLock l(&mu_);
  if (breaker() == BreakerState::kOpen && now >= ejected_until_) {
    breaker_.store(BreakerState::kHalfOpen, std::memory_order_release);
    ExportState();
  }
}

void Endpoint::Probe(absl::Duration timeout, const std::function<void()>& on_change) {
  grpc::ClientContext* context = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (probe_in_flight_) return;
    probe_in_flight_ = true;
    probe_context_ = std::make_unique<grpc::ClientContext>();
    probe_context_->set_deadline(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout));
    health_response_.Clear();
    context = probe_context_.get();  // replaced only by this probe's own callbacks
  }
  // The callback holds the endpoint: a pool may drop it (DNS change) while a probe runs.
  auto self = shared_from_this();
  client_->CheckHealth(context, &health_request_, &health_response_,
                       [self, timeout, on_change](grpc::Status status) {
                         self->HealthDone(status, timeout, on_change);
                       });
}

void Endpoint::HealthDone(const grpc::Status& status, absl::Duration timeout,
                          const std::function<void()>& on_change) {
  std::string failure;
  if (!status.ok()) {
    failure = absl::StrCat("health check: ", GrpcCodeName(status.error_code()), ": ",
                           status.error_message());
  } else if (health_response_.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    failure = absl::StrCat(
        "health check: ",
        grpc::health::v1::HealthCheckResponse::ServingStatus_Name(health_response_.status()));
  }
  if (!failure.empty()) {
    ProbeDone(status, failure, on_change);
    return;
  }
  grpc::ClientContext* context = nullptr;
  {
    absl::MutexLock l(&mu_);
    probe_context_ = std::make_unique<grpc::ClientContext>();
    probe_context_->set_deadline(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout));
    probe_response_.Clear();
    context = probe_context_.get();
  }
  auto self = shared_from_this();
  client_->GetInfo(context, &probe_request_, &probe_response_,
                   [self, on_change](grpc::Status s) { self->ProbeDone(s, "", on_change); });
}

void Endpoint::ProbeDone(const grpc::Status& status, const std::string& health_failure,
                         const std::function<void()>& on_change) {
  bool now_ready = false;
  std::string reason = health_failure;
  if (!reason.empty()) {
  } else if (!status.ok()) {
    reason = absl::StrCat(GrpcCodeName(status.error_code()), ": ", status.error_message());
  } else if (probe_response_.model_name() != model_) {
    reason = absl::StrCat("serves model '", probe_response_.model_name(), "', configured as '",
                          model_, "'");
  } else if (probe_response_.state() != tandem::v1::WorkerInfo::STATE_READY) {
    reason = absl::StrCat("state ", tandem::v1::WorkerInfo::State_Name(probe_response_.state()));
  } else {
    now_ready = true;
  }
  bool changed = false;
  bool readmitted = false;
  std::string engine, device;
  {
    absl::MutexLock l(&mu_);
    // A probe that only timed out says the worker (or this host) is slow, not that it is gone:
    // a ready endpoint stays ready until several in a row time out.
    const bool timed_out = !now_ready && status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    consecutive_probe_timeouts_ = timed_out ? consecutive_probe_timeouts_ + 1 : 0;
    if (timed_out && ready() && consecutive_probe_timeouts_ < probe_timeouts_allowed_.load()) {
      probe_in_flight_ = false;
      probe_cv_.SignalAll();
      return;
    }
    probes_timed_out_.store(timed_out, std::memory_order_release);
    const bool was_usable = usable();
    if (health_failure.empty() && status.ok()) {
      info_ = probe_response_;
      facts_.store((info_.model_id().empty() ? 0 : kFactsKnown) |
                       (info_.vision() ? kFactsVision : 0) |
                       static_cast<uint32_t>(info_.max_output_tokens()),
                   std::memory_order_release);
      engine = info_.engine();
      device = info_.device().id();
    }
    const bool reason_changed = not_ready_reason_ != reason;
    not_ready_reason_ = reason;
    ready_.store(now_ready, std::memory_order_release);
    // Half-open: this probe is the trial. A worker that is healthy again is readmitted at once;
    // a worker that still fails (or whose calls failed) is ejected again, for longer.
    if (breaker() == BreakerState::kHalfOpen) {
      if (now_ready) {
        breaker_.store(BreakerState::kClosed, std::memory_order_release);
        consecutive_faults_ = 0;
        consecutive_internal_ = 0;
        consecutive_stalls_ = 0;
        ejection_ = absl::ZeroDuration();
        stall_ejected_.store(false, std::memory_order_release);
        readmitted = true;
      } else {
        Eject(std::chrono::steady_clock::now(), "half-open probe failed");
      }
    }
    changed = was_usable != usable() || reason_changed || readmitted;
    ExportState();
  }
  if (changed) {
    if (usable()) {
      spdlog::info("worker {} for model {} is {} ({} on {})", address(), model_,
                   readmitted ? "readmitted" : "ready", engine, device);
    } else if (!now_ready) {
      spdlog::warn("worker {} for model {} is not ready: {}", address(), model_, reason);
    }
    on_change();
  }
  // Last: StopProbing returns once this is released.
  absl::MutexLock l(&mu_);
  probe_in_flight_ = false;
  probe_cv_.SignalAll();
}

bool Endpoint::probing() const {
  absl::MutexLock l(&mu_);
  return probe_in_flight_;
}

void Endpoint::StopProbing() {
  absl::MutexLock l(&mu_);
  if (probe_in_flight_ && probe_context_) probe_context_->TryCancel();
  while (probe_in_flight_) probe_cv_.Wait(&mu_);
}

void ModelPool::AddEndpoint(std::unique_ptr<WorkerClient> client) {
  absl::MutexLock l(&write_mu_);
  auto next = std::make_shared<EndpointList>(*endpoints_.load());
  next->push_back(std::make_shared<Endpoint>(name_, std::move(client), options_, metrics_));
  endpoints_.store(std::move(next));
}

bool ModelPool::SetAddresses(const std::vector<std::string>& addresses,
                             const ClientFactory& factory) {
  absl::MutexLock l(&write_mu_);
  const auto current = endpoints_.load();
  auto next = std::make_shared<EndpointList>();
  bool changed = current->size() != addresses.size();
  for (const std::string& a : addresses) {
    auto it = std::find_if(current->begin(), current->end(),
                           [&](const auto& e) { return e->address() == a; });
    if (it != current->end()) {
      next->push_back(*it);
    } else {
      next->push_back(std::make_shared<Endpoint>(name_, factory(a), options_, metrics_));
      changed = true;
    }
  }
  if (changed) endpoints_.store(std::move(next));
  return changed;
}

absl::StatusOr<std::shared_ptr<Endpoint>> ModelPool::Pick(
    PickStrategy strategy, const std::vector<const Endpoint*>& exclude) const {
  const auto list = endpoints_.load();
  // A handful of replicas: a linear scan over the snapshot.
  std::vector<Endpoint*> usable;
  usable.reserve(list->size());
  for (const auto& e : *list) {
    if (e->usable() && std::find(exclude.begin(), exclude.end(), e.get()) == exclude.end()) {
      usable.push_back(e.get());
    }
  }
  Endpoint* best = nullptr;
  if (strategy == PickStrategy::kPowerOfTwo && usable.size() > 2) {
    thread_local std::minstd_rand rng{std::random_device{}()};
    const size_t a = rng() % usable.size();
    size_t b = rng() % (usable.size() - 1);
    if (b >= a) ++b;
    // Live load: the worker's own queue at its last scrape, plus what this gateway sent since.
    auto load = [](const Endpoint* e) {
      return std::max<int64_t>(0, e->scraped_load()) + e->outstanding();
    };
    best = load(usable[a]) <= load(usable[b]) ? usable[a] : usable[b];
  } else {
    for (Endpoint* e : usable) {
      if (best == nullptr || e->outstanding() < best->outstanding()) best = e;
    }
  }
  if (best != nullptr) {
    for (const auto& e : *list) {
      if (e.get() == best) return e;
    }
  }
  std::vector<std::string> reasons;
  for (const auto& e : *list) {
    const bool excluded = std::find(exclude.begin(), exclude.end(), e.get()) != exclude.end();
    reasons.push_back(absl::StrCat(
        e->address(), ": ", excluded ? "already failed this request" : e->not_ready_reason()));
  }
  if (list->empty()) reasons.push_back("no endpoints (DNS gave no addresses?)");
  return absl::UnavailableError(absl::StrCat("model '", name_, "' has no usable worker (",
                                             absl::StrJoin(reasons, "; "), ")"));
}

int ModelPool::DispatchCapacity(int headroom) const {
  int64_t total = 0;
  for (const auto& e : *endpoints_.load()) {
    if (!e->usable()) continue;
    const tandem::v1::WorkerInfo info = e->info();
    const int batch = info.load().max_batch_size();
    // Never beyond the worker's own admission queue: what it would refuse stays here.
    const int queue = info.load().max_queue();
    if (batch > 0) total += batch + (headroom >= 0 ? std::min(headroom, queue) : queue);
  }
  return static_cast<int>(std::min<int64_t>(total, INT32_MAX));
}

int ModelPool::ReadyCount() const {
  int n = 0;
  for (const auto& e : *endpoints_.load()) n += e->usable() ? 1 : 0;
  return n;
}

tandem::v1::ModelStatus ModelPool::Status() const {
  const auto list = endpoints_.load();
  tandem::v1::ModelStatus s;
  s.set_name(name_);
  s.set_total_workers(static_cast<int32_t>(list->size()));
  s.set_ready_workers(ReadyCount());
  // Prefer a ready endpoint's view; otherwise any endpoint that was ever seen.
  for (int pass = 0; pass < 2 && s.model_id().empty(); ++pass) {
    for (const auto& e : *list) {
      if (pass == 0 && !e->ready()) continue;
      tandem::v1::WorkerInfo info = e->info();
      if (info.model_id().empty()) continue;
      s.set_model_id(info.model_id());
      s.set_engine(info.engine());
      auto* c = s.mutable_capabilities();
      c->set_vision(info.vision());
      c->set_max_context_tokens(info.max_context_tokens());
      c->set_max_output_tokens(info.max_output_tokens());
      c->set_reasoning(info.reasoning());
      break;
    }
  }
  return s;
}

ModelFacts ModelPool::Facts() const {
  const auto list = endpoints_.load();
  // As Status: a ready endpoint's view first, otherwise any endpoint that was ever seen.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& e : *list) {
      if (pass == 0 && !e->ready()) continue;
      const ModelFacts f = e->facts();
      if (f.known) return f;
    }
  }
  return ModelFacts{};
}

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
  if (!pool) pool = std::make_unique<ModelPool>(model, options_.endpoint, metrics_);
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
