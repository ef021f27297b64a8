// libFuzzer target: a serialized GenerateRequest through the gateway's request validation and
// feature extraction (what intake does before any routing).
#include <cstddef>
#include <cstdint>

#include "common/request_validation.h"
#include "router/request_features.h"
#include "tandem/v1/gateway.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  tandem::RequestLimits limits;
  if (!tandem::ValidateMessages(request.messages(), limits).ok()) return 0;
  if (!tandem::ValidateSampling(request.sampling(), 0, limits).ok()) return 0;
  (void)tandem::router::ExtractFeatures(request);
  return 0;
}
