#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gateway/intake/tenants.h"
#include "gateway/pool/worker_pools.h"
#include "tandem/v1/gateway.pb.h"

namespace tandem::gateway {

// The API key of a call: "authorization: Bearer KEY", else "x-api-key: KEY"; empty when none.
std::string ApiKeyFromHeaders(absl::string_view authorization, absl::string_view x_api_key);
std::string ApiKeyFromMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);

// What an answer tells its caller about the gateway's internals. Admin tenants (and every caller
// when there are no tenants) get all of it; the others their request's decision without the
// policy's conditions, which may name other customers, and without worker addresses unless the
// operator sets --expose_worker_addresses.
struct Disclosure {
  // The policy's reason for the decision and, for Route, every rule's trace.
  bool explain = false;
  // Worker addresses in RouteInfo.worker and Recovery.
  bool workers = false;
};

// Who a caller is and what it may see, the same for both fronts: its tenant (from its API key
// only, never from the request's content), the models it may use and what answers disclose.
class Access {
 public:
  // `tenants` null serves everyone as one unlimited tenant. Both outlive this object.
  Access(const TenantRegistry* tenants, const WorkerPools* pools, bool expose_worker_addresses)
      : tenants_(tenants), pools_(pools), expose_worker_addresses_(expose_worker_addresses) {}

  // The caller's tenant (an empty Caller without tenants); UNAUTHENTICATED as the registry says.
  absl::StatusOr<TenantRegistry::Caller> Authenticate(const std::string& api_key) const;
  Disclosure DisclosureFor(const TenantRegistry::Caller& caller) const;
  // The routing name of an upstream model id ("Qwen/Qwen3.5-35B-A3B" -> "qwen", any case); other
  // names unchanged.
  std::string ResolveModel(const std::string& name_or_id) const;
  // The models `caller` may use, in --models order, with their workers' state.
  std::vector<tandem::v1::ModelStatus> VisibleModels(const TenantRegistry::Caller& caller) const;

 private:
  const TenantRegistry* const tenants_;
  const WorkerPools* const pools_;
  const bool expose_worker_addresses_;
};

}  // namespace tandem::gateway
