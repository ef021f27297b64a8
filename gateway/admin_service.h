#pragma once

#include "gateway/policy_reloader.h"
#include "tandem/v1/admin.grpc.pb.h"

namespace tandem::gateway {

// tandem.v1.Admin: policy reload and inspection. Reloads run on the reloader's thread; the
// reactor finishes when it answers, so no gRPC thread waits on file I/O.
class AdminService final : public tandem::v1::Admin::CallbackService {
 public:
  // `reloader` is null when the gateway runs the built-in rules.
  explicit AdminService(PolicyReloader* reloader) : reloader_(reloader) {}

  grpc::ServerUnaryReactor* ReloadPolicy(grpc::CallbackServerContext* context,
                                         const tandem::v1::ReloadPolicyRequest* request,
                                         tandem::v1::PolicyStatus* response) override;
  grpc::ServerUnaryReactor* GetPolicy(grpc::CallbackServerContext* context,
                                      const tandem::v1::GetPolicyRequest* request,
                                      tandem::v1::PolicyStatus* response) override;

 private:
  void Fill(tandem::v1::PolicyStatus* response) const;

  PolicyReloader* const reloader_;
};

}  // namespace tandem::gateway
