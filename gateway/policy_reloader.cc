#include "gateway/policy_reloader.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "policies/policy_loader.h"
#include "router/policy_router.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {

PolicyReloader::~PolicyReloader() { Stop(); }

namespace {

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Size and modification time: cheap to poll, unlike hashing a model file every interval.
std::string FileStamp(const std::string& path) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

}  // namespace

absl::Status PolicyReloader::Reload(const std::string& trigger) {
  bool ok = false;
  const std::string text = ReadFile(path_, &ok);
  if (!ok) {
    metrics_->CountPolicyReload(false);
    spdlog::error("policy reload ({}): cannot read {}; the live policy stays", trigger, path_);
    return absl::NotFoundError(absl::StrCat("cannot read policy file ", path_));
  }
  return ReloadText(text, trigger);
}

absl::Status PolicyReloader::ReloadText(const std::string& text, const std::string& trigger) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<policies::PolicyError> errors;
  auto policy = policies::ParsePolicy(text, path_, &errors);
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
  if (status.ok() && signals_ != nullptr) status = signals_->Validate(**policy);
  if (!status.ok()) {
    metrics_->CountPolicyReload(false);
    spdlog::error("policy reload ({}) from {} failed; the live policy stays:\n{}", trigger, path_,
                  std::string(status.message()));
    return status;
  }
  live_classifier_path_ = (*policy)->classifier_path;
  live_key_ = Sha256Hex(text) + "|" + FileStamp(live_classifier_path_);
  last_failed_key_.clear();
  {
    std::lock_guard<std::mutex> live(live_mu_);
    if ((*policy)->sha256 == live_sha256_) return absl::OkStatus();
  }
  for (const auto& [name, spec] : (*policy)->models) {
    const ModelPool* pool = pools_->Find(name);
    for (const std::string& ep : spec.endpoints) {
      bool known = false;
      if (pool == nullptr) continue;
      for (const auto& e : *pool->endpoints()) known = known || e->address() == ep;
      if (!known) {
        spdlog::warn(
            "policy {}: models.{}.endpoints adds {}; endpoints are read at start-up, so "
            "it takes effect at the next restart",
            (*policy)->version, name, ep);
      }
    }
  }
  if (signals_ != nullptr) signals_->SetPolicy(*policy);
  holder_->Swap(std::make_shared<router::PolicyRouter>(*policy));
  {
    std::lock_guard<std::mutex> live(live_mu_);
    live_version_ = (*policy)->version;
    live_sha256_ = (*policy)->sha256;
  }
  metrics_->CountPolicyReload(true);
  metrics_->SetLivePolicy((*policy)->version, (*policy)->sha256);
  spdlog::info("policy ({}) {} version={} sha256={} rules={}", trigger, path_, (*policy)->version,
               (*policy)->sha256, (*policy)->rules.size());
  return absl::OkStatus();
}

std::pair<std::string, std::string> PolicyReloader::Live() const {
  std::lock_guard<std::mutex> l(live_mu_);
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
  bool ok = false;
  const std::string text = ReadFile(path_, &ok);
  if (!ok) return;
  std::string key;
  {
    std::lock_guard<std::mutex> l(mu_);
    // The YAML's bytes and the model file's stamp: either changing is a new policy.
    key = Sha256Hex(text) + "|" + FileStamp(live_classifier_path_);
    if (key == live_key_ || key == last_failed_key_) return;
  }
  // The same bytes that were hashed are parsed, so a half-written file is judged as read.
  if (!ReloadText(text, "file changed").ok()) {
    std::lock_guard<std::mutex> l(mu_);
    last_failed_key_ = key;  // reported once per change, not every interval
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
