#include "gateway/intake/tenants.h"

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file.h"
#include "common/sha256.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {

std::shared_ptr<const policies::TenantSpec> TenantState::spec() const {
  absl::MutexLock l(&mu_);
  return spec_;
}

void TenantState::SetSpec(std::shared_ptr<const policies::TenantSpec> spec, TimePoint now) {
  absl::MutexLock l(&mu_);
  requests_.Configure(spec->limits.requests_per_second, spec->limits.burst_requests, now);
  tokens_.Configure(spec->limits.tokens_per_second, spec->limits.burst_tokens, now);
  spec_ = std::move(spec);
}

std::optional<TenantState::Refusal> TenantState::TryAdmit(int64_t tokens, TimePoint now) {
  absl::MutexLock l(&mu_);
  const policies::TenantLimits& limits = spec_->limits;
  if (limits.max_concurrency > 0 && inflight_ >= limits.max_concurrency) {
    // No rate to compute a wait from: a short pause, about one request's worth.
    return Refusal{"concurrency",
                   absl::StrFormat("tenant '%s' has %d requests in flight, its limit "
                                   "(limits.max_concurrency)",
                                   name_, limits.max_concurrency),
                   0.1};
  }
  if (const double wait = requests_.WaitFor(1, now); wait > 0) {
    return Refusal{"requests",
                   absl::StrFormat("tenant '%s' is over %g requests/s (limits.requests_per_second)",
                                   name_, limits.requests_per_second),
                   wait};
  }
  // Tokens: admitted while the bucket is not in debt, so a request larger than the burst still
  // runs (and the next waits until its cost is paid back).
  if (const double wait = tokens_.WaitFor(0, now); wait > 0) {
    return Refusal{"tokens",
                   absl::StrFormat("tenant '%s' is over %g tokens/s (limits.tokens_per_second)",
                                   name_, limits.tokens_per_second),
                   wait};
  }
  requests_.Take(1);
  tokens_.Take(static_cast<double>(tokens));
  ++inflight_;
  metrics_.inflight->Increment();
  return std::nullopt;
}

void TenantState::Release(int64_t unused_tokens) {
  absl::MutexLock l(&mu_);
  if (unused_tokens > 0) tokens_.Give(static_cast<double>(unused_tokens));
  --inflight_;
  metrics_.inflight->Decrement();
}

int TenantState::inflight() const {
  absl::MutexLock l(&mu_);
  return inflight_;
}

TenantRegistry::TenantRegistry(TenantRegistryOptions options, GatewayMetrics* metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      loop_([this] { CheckFile(); }, [this](const std::string& t) { return Reload(t); }) {
  Apply(nullptr);
}

TenantRegistry::~TenantRegistry() { Stop(); }

std::shared_ptr<TenantState> TenantRegistry::StateFor(const std::string& name) {
  auto& state = states_[name];
  if (state == nullptr) {
    state =
        std::make_shared<TenantState>(name, metrics_->ForTenant(name, options_.max_tenant_labels));
  }
  return state;
}

void TenantRegistry::Apply(std::shared_ptr<const policies::TenantConfig> config) {
  absl::MutexLock l(&mu_);
  const auto now = std::chrono::steady_clock::now();
  auto snap = std::make_shared<Snapshot>();
  snap->config = config;
  if (config != nullptr) {
    for (const policies::TenantSpec& t : config->tenants) {
      auto spec = std::make_shared<const policies::TenantSpec>(t);
      auto state = StateFor(t.name);
      state->SetSpec(spec, now);
      snap->states.push_back(state);
      snap->specs.push_back(spec);
    }
  }
  if (options_.allow_unauthenticated) {
    const policies::TenantSpec* anon = config != nullptr ? config->Anonymous() : nullptr;
    policies::TenantSpec unlimited;
    unlimited.name = "anonymous";
    auto spec = std::make_shared<const policies::TenantSpec>(anon != nullptr ? *anon : unlimited);
    snap->anonymous = StateFor("anonymous");
    snap->anonymous->SetSpec(spec, now);
    snap->anonymous_spec = spec;
  }
  snapshot_.store(std::move(snap));
}

absl::Status CheckTenantRights(const policies::TenantConfig& next,
                               const policies::TenantConfig* live, const std::string& path) {
  if (absl::Status s = policies::CheckAnonymousIsNotAdmin(next, path); !s.ok()) return s;
  if (live == nullptr || !AdminNames(next).empty()) return absl::OkStatus();
  const std::string live_admins = AdminNames(*live);
  if (live_admins.empty()) return absl::OkStatus();  // started without admins: stays so
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: no tenant has admin: true, so applying it would lock tandem.v1.Admin (admins now: "
      "%s); the live tenants stay. Keep an admin, or restart the gateway with this file to run "
      "without the admin API",
      path, live_admins));
}

std::string AdminNames(const policies::TenantConfig& config) {
  std::vector<std::string> names;
  for (const policies::TenantSpec& t : config.tenants) {
    if (t.admin) names.push_back(t.name);
  }
  return absl::StrJoin(names, ", ");
}

absl::Status TenantRegistry::Load(const std::string& path) {
  auto config = policies::LoadTenantFile(path, options_.models, options_.file_limits);
  if (!config.ok()) return config.status();
  if (absl::Status s = CheckTenantRights(**config, nullptr, path); !s.ok()) return s;
  if (AdminNames(**config).empty()) {
    // Allowed: an operator may run without the admin API, editing the file (watched, SIGHUP).
    spdlog::warn("tenants: no tenant in {} has admin: true; tandem.v1.Admin refuses every call",
                 path);
  }
  path_ = path;
  Apply(*config);
  spdlog::info("tenants: loaded {} ({} tenants, sha256 {})", path, (*config)->tenants.size(),
               (*config)->sha256.substr(0, 12));
  return absl::OkStatus();
}

absl::Status TenantRegistry::Reload(const std::string& trigger) {
  auto text = ReadFileToString(path_, options_.file_limits.max_file_bytes, "--max_tenants_bytes");
  if (!text.ok()) {
    metrics_->CountTenantsReload(false);
    spdlog::error("tenants reload ({}): {}; the live configuration stays", trigger,
                  std::string(text.status().message()));
    return absl::FailedPreconditionError(text.status().message());  // as the policy reloader
  }
  return ReloadText(*text, trigger);
}

absl::Status TenantRegistry::ReloadText(const std::string& text, const std::string& trigger) {
  absl::MutexLock l(&reload_mu_);
  auto config = policies::ParseTenantConfig(text, path_, options_.models, options_.file_limits);
  absl::Status s = config.status();
  if (s.ok()) s = CheckTenantRights(**config, snapshot_.load()->config.get(), path_);
  if (!s.ok()) {
    metrics_->CountTenantsReload(false);
    last_failed_sha_ = Sha256Hex(text);
    spdlog::error("tenants reload ({}) from {} failed; the live configuration stays:\n{}", trigger,
                  path_, std::string(s.message()));
    return s;
  }
  last_failed_sha_.clear();
  Apply(*config);
  metrics_->CountTenantsReload(true);
  spdlog::info("tenants: reloaded ({}) {}: {} tenants, sha256 {}", trigger, path_,
               (*config)->tenants.size(), (*config)->sha256.substr(0, 12));
  return absl::OkStatus();
}

void TenantRegistry::CheckFile() {
  {
    // A file refused for its size is not read again until its size or time changes: a link to
    // /dev/zero would cost --max_tenants_bytes of reading at every poll.
    absl::MutexLock l(&reload_mu_);
    if (!last_over_limit_.empty() && last_over_limit_ == FileStamp(path_)) return;
  }
  auto text = ReadFileToString(path_, options_.file_limits.max_file_bytes, "--max_tenants_bytes");
  if (!text.ok()) {
    // Mid-rename or removed: the next poll sees what comes.
    if (!absl::IsResourceExhausted(text.status())) return;
    // Over --max_tenants_bytes (read no further): refused as an invalid file is, once per change
    // of the file's size and time (a link to /dev/zero keeps the same).
    const std::string stamp = FileStamp(path_);
    {
      absl::MutexLock l(&reload_mu_);
      if (stamp == last_over_limit_) return;
      last_over_limit_ = stamp;
    }
    metrics_->CountTenantsReload(false);
    spdlog::error("tenants reload (file changed): {}; the live configuration stays",
                  std::string(text.status().message()));
    return;
  }
  const std::string sha = Sha256Hex(*text);
  {
    absl::MutexLock l(&reload_mu_);
    last_over_limit_.clear();
    const auto live = snapshot_.load()->config;
    if ((live != nullptr && sha == live->sha256) || sha == last_failed_sha_) return;
  }
  // The same bytes that were hashed are parsed, so a half-written file is judged as read.
  ReloadText(*text, "file changed").IgnoreError();  // logged and counted
}

TenantRegistry::Live TenantRegistry::Describe() const {
  const auto snap = snapshot_.load();
  Live live;
  live.allow_unauthenticated = snap->anonymous != nullptr;
  if (snap->config != nullptr) {
    live.path = path_;
    live.sha256 = snap->config->sha256;
    for (size_t i = 0; i < snap->specs.size(); ++i) {
      TenantInfo info{snap->specs[i], static_cast<int>(snap->specs[i]->key_sha256.size()),
                      snap->states[i]->inflight()};
      live.tenants.push_back(std::move(info));
    }
  }
  // A file's own 'anonymous' entry is already listed.
  if (snap->anonymous != nullptr &&
      (snap->config == nullptr || snap->config->Anonymous() == nullptr)) {
    live.tenants.push_back({snap->anonymous_spec, 0, snap->anonymous->inflight()});
  }
  return live;
}

bool TenantRegistry::enabled() const { return snapshot_.load()->config != nullptr; }

absl::StatusOr<TenantRegistry::Caller> TenantRegistry::Authenticate(
    const std::string& api_key) const {
  const auto snap = snapshot_.load();
  // No tenants file: everyone is anonymous, whatever key a client sends.
  if (snap->config == nullptr && snap->anonymous != nullptr) {
    return Caller{snap->anonymous, snap->anonymous_spec};
  }
  if (api_key.empty()) {
    if (snap->anonymous != nullptr) return Caller{snap->anonymous, snap->anonymous_spec};
    metrics_->CountAuthFailure("missing_key");
    return absl::UnauthenticatedError(
        "no API key: send 'authorization: Bearer KEY' (or 'x-api-key: KEY')");
  }
  if (snap->config != nullptr) {
    // Only the key's SHA-256 is compared: the file never holds keys, and a lookup by hash leaks
    // nothing useful through timing.
    auto it = snap->config->by_key.find(Sha256Hex(api_key));
    if (it != snap->config->by_key.end()) {
      return Caller{snap->states[it->second], snap->specs[it->second]};
    }
  }
  metrics_->CountAuthFailure("unknown_key");
  return absl::UnauthenticatedError("unknown API key");
}

}  // namespace tandem::gateway
