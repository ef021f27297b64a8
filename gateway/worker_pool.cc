#include "gateway/worker_pool.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {

tandem::v1::WorkerInfo Endpoint::info() const {
  std::lock_guard<std::mutex> l(mu_);
  return info_;
}

std::string Endpoint::not_ready_reason() const {
  std::lock_guard<std::mutex> l(mu_);
  return not_ready_reason_;
}

void Endpoint::Probe(absl::Duration timeout, const std::function<void()>& on_change) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (probe_in_flight_) return;
    probe_in_flight_ = true;
    probe_context_ = std::make_unique<grpc::ClientContext>();
    probe_context_->set_deadline(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout));
    probe_response_.Clear();
  }
  client_->GetInfo(probe_context_.get(), &probe_request_, &probe_response_,
                   [this, on_change](grpc::Status status) { ProbeDone(status, on_change); });
}

void Endpoint::ProbeDone(const grpc::Status& status, const std::function<void()>& on_change) {
  bool now_ready = false;
  std::string reason;
  if (!status.ok()) {
    reason = absl::StrCat(GrpcCodeName(status.error_code()), ": ", status.error_message());
  } else if (probe_response_.model_name() != model_) {
    reason = absl::StrCat("serves model '", probe_response_.model_name(), "', configured as '",
                          model_, "'");
  } else if (probe_response_.state() != tandem::v1::WorkerInfo::READY) {
    reason = absl::StrCat("state ", tandem::v1::WorkerInfo::State_Name(probe_response_.state()));
  } else {
    now_ready = true;
  }
  // Copied for the log line; the next probe reuses probe_response_.
  const std::string engine = probe_response_.engine();
  const std::string device = probe_response_.device().id();
  bool changed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (status.ok()) info_ = probe_response_;
    changed = ready_.load() != now_ready || not_ready_reason_ != reason;
    not_ready_reason_ = reason;
    ready_.store(now_ready, std::memory_order_release);
  }
  if (changed) {
    if (now_ready) {
      spdlog::info("worker {} for model {} is ready ({} on {})", address(), model_, engine, device);
    } else {
      spdlog::warn("worker {} for model {} is not ready: {}", address(), model_, reason);
    }
    on_change();
  }
  // Last: StopProbing returns once this is released, and the endpoint may then be destroyed.
  std::lock_guard<std::mutex> l(mu_);
  probe_in_flight_ = false;
  probe_cv_.notify_all();
}

void Endpoint::StopProbing() {
  std::unique_lock<std::mutex> l(mu_);
  if (probe_in_flight_ && probe_context_) probe_context_->TryCancel();
  probe_cv_.wait(l, [&] { return !probe_in_flight_; });
}

void ModelPool::AddEndpoint(std::unique_ptr<WorkerClient> client) {
  endpoints_.push_back(std::make_unique<Endpoint>(name_, std::move(client)));
}

absl::StatusOr<Endpoint*> ModelPool::Pick() const {
  Endpoint* best = nullptr;
  for (const auto& e : endpoints_) {
    if (e->ready() && (best == nullptr || e->outstanding() < best->outstanding())) best = e.get();
  }
  if (best != nullptr) return best;
  std::vector<std::string> reasons;
  for (const auto& e : endpoints_) {
    reasons.push_back(absl::StrCat(e->address(), ": ", e->not_ready_reason()));
  }
  return absl::UnavailableError(
      absl::StrCat("model '", name_, "' has no ready worker (", absl::StrJoin(reasons, "; "), ")"));
}

int ModelPool::ReadyCount() const {
  int n = 0;
  for (const auto& e : endpoints_) n += e->ready() ? 1 : 0;
  return n;
}

tandem::v1::ModelStatus ModelPool::Status() const {
  tandem::v1::ModelStatus s;
  s.set_name(name_);
  s.set_total_workers(static_cast<int32_t>(endpoints_.size()));
  s.set_ready_workers(ReadyCount());
  // Prefer a ready endpoint's view; otherwise any endpoint that was ever seen.
  for (int pass = 0; pass < 2 && s.model_id().empty(); ++pass) {
    for (const auto& e : endpoints_) {
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

WorkerPools::~WorkerPools() { Stop(); }

absl::Status WorkerPools::Configure(const std::vector<std::string>& entries) {
  for (const std::string& entry : entries) {
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--workers entry '", entry, "': expected MODEL=HOST:PORT"));
    }
    AddEndpoint(entry.substr(0, eq), std::make_unique<GrpcWorkerClient>(entry.substr(eq + 1)));
  }
  if (pools_.empty()) {
    return absl::InvalidArgumentError(
        "--workers is empty: give at least one MODEL=HOST:PORT, e.g. qwen=127.0.0.1:7001");
  }
  return absl::OkStatus();
}

void WorkerPools::AddEndpoint(const std::string& model, std::unique_ptr<WorkerClient> client) {
  auto& pool = pools_[model];
  if (!pool) pool = std::make_unique<ModelPool>(model);
  pool->AddEndpoint(std::move(client));
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
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& [name, pool] : pools_) {
    for (auto& e : pool->endpoints()) e->StopProbing();
  }
}

void WorkerPools::Loop() {
  const auto period = absl::ToChronoMilliseconds(interval_);
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    for (auto& [name, pool] : pools_) {
      for (auto& e : pool->endpoints()) e->Probe(interval_ * 4, on_change_);
    }
    cv_.wait_for(l, period, [&] { return stop_; });
  }
}

}  // namespace tandem::gateway
