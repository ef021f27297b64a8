#pragma once

#include "gateway/control/policy_reloader.h"
#include "gateway/intake/tenants.h"
#include "gateway/pool/worker_pools.h"
#include "gateway/signals/signal_engine.h"
#include "tandem/v1/admin.grpc.pb.h"

namespace tandem::gateway {

// tandem.v1.Admin: policy and tenants reload and inspection. Reloads run on the reloaders'
// threads; the reactor finishes when they answer, so no gRPC thread waits on file I/O.
class AdminService final : public tandem::v1::Admin::CallbackService {
 public:
  // `reloader` is null when the gateway runs the built-in rules; `pools` and `signals` may be
  // null (tests).
  // With `tenants` enabled (a tenants file), only tenants with `admin: true` may call it; others
  // get PERMISSION_DENIED, calls without a valid key UNAUTHENTICATED.
  explicit AdminService(PolicyReloader* reloader, const WorkerPools* pools = nullptr,
                        const SignalEngine* signals = nullptr, TenantRegistry* tenants = nullptr,
                        GatewayMetrics* metrics = nullptr)
      : reloader_(reloader),
        pools_(pools),
        signals_(signals),
        tenants_(tenants),
        metrics_(metrics) {}

  grpc::ServerUnaryReactor* ReloadPolicy(grpc::CallbackServerContext* context,
                                         const tandem::v1::ReloadPolicyRequest* request,
                                         tandem::v1::ReloadPolicyResponse* response) override;
  grpc::ServerUnaryReactor* GetPolicy(grpc::CallbackServerContext* context,
                                      const tandem::v1::GetPolicyRequest* request,
                                      tandem::v1::GetPolicyResponse* response) override;
  grpc::ServerUnaryReactor* ListEndpoints(grpc::CallbackServerContext* context,
                                          const tandem::v1::ListEndpointsRequest* request,
                                          tandem::v1::ListEndpointsResponse* response) override;
  grpc::ServerUnaryReactor* GetSignals(grpc::CallbackServerContext* context,
                                       const tandem::v1::GetSignalsRequest* request,
                                       tandem::v1::GetSignalsResponse* response) override;
  grpc::ServerUnaryReactor* ReloadTenants(grpc::CallbackServerContext* context,
                                          const tandem::v1::ReloadTenantsRequest* request,
                                          tandem::v1::ReloadTenantsResponse* response) override;
  grpc::ServerUnaryReactor* GetTenants(grpc::CallbackServerContext* context,
                                       const tandem::v1::GetTenantsRequest* request,
                                       tandem::v1::GetTenantsResponse* response) override;

 private:
  void Fill(tandem::v1::PolicyStatus* response) const;
  void Fill(tandem::v1::TenantsStatus* response) const;
  // OK when the caller may use Admin.
  grpc::Status Authorize(const grpc::CallbackServerContext* context) const;
  // A reactor already finished with the refusal, or nullptr when the caller may go on.
  grpc::ServerUnaryReactor* Deny(grpc::CallbackServerContext* context) const;

  PolicyReloader* const reloader_;
  const WorkerPools* const pools_;
  const SignalEngine* const signals_;
  TenantRegistry* const tenants_;
  GatewayMetrics* const metrics_;
};

}  // namespace tandem::gateway
