#include "gateway/intake/access.h"

#include "absl/strings/match.h"

namespace tandem::gateway {

std::string ApiKeyFromHeaders(absl::string_view authorization, absl::string_view x_api_key) {
  if (!authorization.empty()) {
    constexpr absl::string_view kBearer = "Bearer ";
    if (authorization.size() > kBearer.size() &&
        absl::EqualsIgnoreCase(authorization.substr(0, kBearer.size()), kBearer)) {
      return std::string(authorization.substr(kBearer.size()));
    }
    // Present but not a bearer token: treated as a (wrong) key, never as "no key".
    return std::string(authorization);
  }
  return std::string(x_api_key);
}

std::string ApiKeyFromMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& md) {
  auto view = [&md](const char* key) {
    auto it = md.find(key);
    return it == md.end() ? absl::string_view()
                          : absl::string_view(it->second.data(), it->second.size());
  };
  return ApiKeyFromHeaders(view("authorization"), view("x-api-key"));
}

absl::StatusOr<TenantRegistry::Caller> Access::Authenticate(const std::string& api_key) const {
  if (tenants_ == nullptr) return TenantRegistry::Caller{};
  return tenants_->Authenticate(api_key);
}

Disclosure Access::DisclosureFor(const TenantRegistry::Caller& caller) const {
  // Without a tenants file every caller is the operator's.
  const bool full =
      tenants_ == nullptr || !tenants_->enabled() || (caller.spec != nullptr && caller.spec->admin);
  return Disclosure{.explain = full, .workers = full || expose_worker_addresses_};
}

std::string Access::ResolveModel(const std::string& name_or_id) const {
  if (name_or_id.empty() || pools_->Find(name_or_id) != nullptr) return name_or_id;
  for (const auto& [name, pool] : pools_->pools()) {
    if (absl::EqualsIgnoreCase(pool->Status().model_id(), name_or_id)) return name;
  }
  return name_or_id;
}

std::vector<tandem::v1::ModelStatus> Access::VisibleModels(
    const TenantRegistry::Caller& caller) const {
  std::vector<tandem::v1::ModelStatus> models;
  for (const auto& [name, pool] : pools_->pools()) {
    // A tenant sees the models it may use.
    if (caller.spec == nullptr || caller.spec->models.empty() ||
        caller.spec->models.contains(name)) {
      models.push_back(pool->Status());
    }
  }
  return models;
}

}  // namespace tandem::gateway
