#include "gateway/control/admin_service.h"

#include "common/grpc_status.h"
#include "gateway/intake/access.h"

namespace tandem::gateway {

void AdminService::Fill(tandem::v1::PolicyStatus* response) const {
  if (reloader_ == nullptr) {
    response->set_version("builtin");
    return;
  }
  auto [version, sha256] = reloader_->Live();
  response->set_version(version);
  response->set_sha256(sha256);
  response->set_path(reloader_->path());
}

void AdminService::Fill(tandem::v1::TenantsStatus* response) const {
  if (tenants_ == nullptr) return;
  const TenantRegistry::Live live = tenants_->Describe();
  response->set_path(live.path);
  response->set_sha256(live.sha256);
  response->set_allow_unauthenticated(live.allow_unauthenticated);
  for (const TenantRegistry::TenantInfo& t : live.tenants) {
    tandem::v1::TenantStatus* out = response->add_tenants();
    const policies::TenantSpec& spec = *t.spec;
    out->set_name(spec.name);
    for (const std::string& m : spec.models) out->add_models(m);
    out->set_admin(spec.admin);
    out->set_priority(spec.priority);
    out->set_requests_per_second(spec.limits.requests_per_second);
    out->set_burst_requests(spec.limits.burst_requests);
    out->set_tokens_per_second(spec.limits.tokens_per_second);
    out->set_burst_tokens(spec.limits.burst_tokens);
    out->set_max_concurrency(spec.limits.max_concurrency);
    out->set_keys(t.keys);
    out->set_inflight(t.inflight);
  }
}

grpc::Status AdminService::Authorize(const grpc::CallbackServerContext* context) const {
  if (tenants_ == nullptr || !tenants_->enabled()) return grpc::Status::OK;
  auto caller = tenants_->Authenticate(ApiKeyFromMetadata(context->client_metadata()));
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (!caller->spec->admin) {
    if (metrics_ != nullptr) metrics_->CountAuthFailure("admin_denied");
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        "tenant '" + caller->spec->name + "' may not use tandem.v1.Admin (admin: false)");
  }
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* AdminService::Deny(grpc::CallbackServerContext* context) const {
  grpc::Status auth = Authorize(context);
  if (auth.ok()) return nullptr;
  auto* reactor = context->DefaultReactor();
  reactor->Finish(auth);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ReloadPolicy(grpc::CallbackServerContext* context,
                                                     const tandem::v1::ReloadPolicyRequest*,
                                                     tandem::v1::ReloadPolicyResponse* response) {
  if (auto* denied = Deny(context)) return denied;
  auto* reactor = context->DefaultReactor();
  if (reloader_ == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 "the gateway runs its built-in rules; start it with --policy"));
    return reactor;
  }
  reloader_->ReloadAsync("admin RPC", [this, reactor, response](absl::Status s) {
    if (s.ok()) Fill(response->mutable_live());
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetPolicy(grpc::CallbackServerContext* context,
                                                  const tandem::v1::GetPolicyRequest*,
                                                  tandem::v1::GetPolicyResponse* response) {
  if (auto* denied = Deny(context)) return denied;
  Fill(response->mutable_live());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ListEndpoints(grpc::CallbackServerContext* context,
                                                      const tandem::v1::ListEndpointsRequest*,
                                                      tandem::v1::ListEndpointsResponse* response) {
  if (auto* denied = Deny(context)) return denied;
  if (pools_ != nullptr) {
    for (const auto& [name, pool] : pools_->pools()) {
      for (const auto& e : *pool->endpoints()) *response->add_endpoints() = e->Describe();
    }
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetSignals(grpc::CallbackServerContext* context,
                                                   const tandem::v1::GetSignalsRequest*,
                                                   tandem::v1::GetSignalsResponse* response) {
  if (auto* denied = Deny(context)) return denied;
  if (signals_ != nullptr) *response = signals_->Describe();
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ReloadTenants(grpc::CallbackServerContext* context,
                                                      const tandem::v1::ReloadTenantsRequest*,
                                                      tandem::v1::ReloadTenantsResponse* response) {
  if (auto* denied = Deny(context)) return denied;
  auto* reactor = context->DefaultReactor();
  if (tenants_ == nullptr || !tenants_->enabled()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 "the gateway has no tenants file; start it with --tenants"));
    return reactor;
  }
  tenants_->ReloadAsync("admin RPC", [this, reactor, response](absl::Status s) {
    if (s.ok()) Fill(response->mutable_live());
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetTenants(grpc::CallbackServerContext* context,
                                                   const tandem::v1::GetTenantsRequest*,
                                                   tandem::v1::GetTenantsResponse* response) {
  if (auto* denied = Deny(context)) return denied;
  Fill(response->mutable_live());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tandem::gateway
