#include "gateway/policy_reloader.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "policies/policy_loader.h"
#include "router/policy_router.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {

PolicyReloader::~PolicyReloader() { Stop(); }

absl::Status PolicyReloader::Reload(const std::string& trigger) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<policies::PolicyError> errors;
  auto policy = policies::LoadPolicyFile(path_, &errors);
  absl::Status status = policy.status();
  if (status.ok()) {
    for (const auto& [name, spec] : (*policy)->models) {
      if (pools_->Find(name) == nullptr) {
        status = absl::InvalidArgumentError(absl::StrCat(
            path_, ": models.", name, ": no workers are configured for it (--workers)"));
        break;
      }
    }
  }
  if (!status.ok()) {
    metrics_->CountPolicyReload(false);
    spdlog::error("policy reload ({}) from {} failed; the live policy stays:\n{}", trigger, path_,
                  std::string(status.message()));
    return status;
  }
  if ((*policy)->sha256 == live_sha256_) return absl::OkStatus();
  for (const auto& [name, spec] : (*policy)->models) {
    const ModelPool* pool = pools_->Find(name);
    for (const std::string& ep : spec.endpoints) {
      bool known = false;
      for (const auto& e : pool->endpoints()) known = known || e->address() == ep;
      if (!known) {
        spdlog::warn(
            "policy {}: models.{}.endpoints adds {}; endpoints are read at start-up, so "
            "it takes effect at the next restart",
            (*policy)->version, name, ep);
      }
    }
  }
  holder_->Swap(std::make_shared<router::PolicyRouter>(*policy));
  live_version_ = (*policy)->version;
  live_sha256_ = (*policy)->sha256;
  last_failed_sha256_.clear();
  metrics_->CountPolicyReload(true);
  metrics_->SetLivePolicy((*policy)->version, (*policy)->sha256);
  spdlog::info("policy ({}) {} version={} sha256={} rules={}", trigger, path_, (*policy)->version,
               (*policy)->sha256, (*policy)->rules.size());
  return absl::OkStatus();
}

std::pair<std::string, std::string> PolicyReloader::Live() const {
  std::lock_guard<std::mutex> l(mu_);
  return {live_version_, live_sha256_};
}

void PolicyReloader::Start(absl::Duration interval) {
  thread_ = std::thread([this, interval] { Loop(interval); });
}

void PolicyReloader::ReloadAsync(std::string trigger, std::function<void(absl::Status)> done) {
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    if (stop_) {
      if (done) done(absl::UnavailableError("the gateway is shutting down"));
      return;
    }
    queue_.push_back({std::move(trigger), std::move(done)});
  }
  queue_cv_.notify_one();
}

void PolicyReloader::CheckFile() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string sha = Sha256Hex(ss.str());
  {
    std::lock_guard<std::mutex> l(mu_);
    if (sha == live_sha256_ || sha == last_failed_sha256_) return;
  }
  if (!Reload("file changed").ok()) {
    std::lock_guard<std::mutex> l(mu_);
    last_failed_sha256_ = sha;
  }
}

void PolicyReloader::Loop(absl::Duration interval) {
  const auto period = absl::ToChronoMilliseconds(interval);
  std::unique_lock<std::mutex> l(queue_mu_);
  while (!stop_) {
    if (!queue_cv_.wait_for(l, period, [&] { return stop_ || !queue_.empty(); })) {
      l.unlock();
      CheckFile();
      l.lock();
      continue;
    }
    while (!queue_.empty()) {
      Pending p = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      absl::Status s = Reload(p.trigger);
      if (p.done) p.done(s);
      l.lock();
    }
  }
  // Nothing queued is left without an answer.
  for (auto& p : queue_) {
    if (p.done) p.done(absl::UnavailableError("the gateway is shutting down"));
  }
  queue_.clear();
}

void PolicyReloader::Stop() {
  {
    std::lock_guard<std::mutex> l(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tandem::gateway
