#include "gateway/control/policy_reloader.h"

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/sha256.h"
#include "policies/policy_loader.h"
#include "router/policy_router.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {

absl::Status PolicyReloader::Reload(const std::string& trigger) {
  auto text = ReadFileToString(path_, limits_.max_file_bytes, "--max_policy_bytes");
  if (!text.ok()) {
    metrics_->CountPolicyReload(false);
    spdlog::error("policy reload ({}): {}; the live policy stays", trigger,
                  std::string(text.status().message()));
    // The gateway's own file, not the caller's input: whatever errno said, the caller cannot fix
    // it by retrying, and PERMISSION_DENIED would read as "you may not reload".
    return absl::FailedPreconditionError(text.status().message());
  }
  return ReloadText(*text, trigger);
}

absl::Status PolicyReloader::ReloadText(const std::string& text, const std::string& trigger) {
  absl::MutexLock l(&mu_);
  std::vector<policies::PolicyError> errors;
  auto policy = policies::ParsePolicy(text, path_, &errors, limits_);
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
    absl::MutexLock live(&live_mu_);
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
    absl::MutexLock live(&live_mu_);
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
  absl::MutexLock l(&live_mu_);
  return {live_version_, live_sha256_};
}

void PolicyReloader::CheckFile() {
  constexpr char kOverLimit[] = "over limit|";
  {
    // A file refused for its size is not read again until its size or time changes: a link to
    // /dev/zero would cost --max_policy_bytes of reading at every poll.
    absl::MutexLock l(&mu_);
    if (last_failed_key_ == kOverLimit + FileStamp(path_)) return;
  }
  auto text = ReadFileToString(path_, limits_.max_file_bytes, "--max_policy_bytes");
  if (!text.ok()) {
    // Mid-rename or removed: the next poll sees what comes.
    if (!absl::IsResourceExhausted(text.status())) return;
    // Over --max_policy_bytes (read no further): refused as an invalid file is, once per change
    // of the file's size and time (a link to /dev/zero keeps the same).
    const std::string key = kOverLimit + FileStamp(path_);
    {
      absl::MutexLock l(&mu_);
      if (key == last_failed_key_) return;
      last_failed_key_ = key;
    }
    metrics_->CountPolicyReload(false);
    spdlog::error("policy reload (file changed): {}; the live policy stays",
                  std::string(text.status().message()));
    return;
  }
  std::string key;
  {
    absl::MutexLock l(&mu_);
    // The YAML's bytes and the model file's stamp: either changing is a new policy.
    key = Sha256Hex(*text) + "|" + FileStamp(live_classifier_path_);
    if (key == live_key_ || key == last_failed_key_) return;
  }
  // The same bytes that were hashed are parsed, so a half-written file is judged as read.
  if (!ReloadText(*text, "file changed").ok()) {
    absl::MutexLock l(&mu_);
    last_failed_key_ = key;  // reported once per change, not every interval
  }
}

}  // namespace tandem::gateway
