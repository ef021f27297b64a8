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
  holder_->Swap(std::make_shared<router::PolicyRouter>(*policy));
  live_sha256_ = (*policy)->sha256;
  last_failed_sha256_.clear();
  metrics_->CountPolicyReload(true);
  metrics_->SetLivePolicy((*policy)->version, (*policy)->sha256);
  spdlog::info("policy ({}) {} version={} sha256={} rules={}", trigger, path_, (*policy)->version,
               (*policy)->sha256, (*policy)->rules.size());
  return absl::OkStatus();
}

void PolicyReloader::StartWatching(absl::Duration interval) {
  watcher_ = std::thread([this, interval] {
    const auto period = absl::ToChronoMilliseconds(interval);
    std::unique_lock<std::mutex> l(stop_mu_);
    while (!stop_cv_.wait_for(l, period, [&] { return stop_; })) {
      l.unlock();
      std::ifstream in(path_, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string sha = Sha256Hex(ss.str());
      bool changed;
      {
        std::lock_guard<std::mutex> rl(mu_);
        changed = in && sha != live_sha256_ && sha != last_failed_sha256_;
      }
      if (changed && !Reload("file changed").ok()) {
        std::lock_guard<std::mutex> rl(mu_);
        last_failed_sha256_ = sha;
      }
      l.lock();
    }
  });
}

void PolicyReloader::Stop() {
  {
    std::lock_guard<std::mutex> l(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

}  // namespace tandem::gateway
