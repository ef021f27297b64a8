// libFuzzer target: bytes as the gateway receives them, through its own parse (ParseRequest, which
// names the field of a bad string) and every check intake makes before routing, then feature
// extraction. Caller text that reaches an error must come out quoted: one line, printable ASCII.
#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "common/log_text.h"
#include "common/proto_request.h"
#include "common/request_validation.h"
#include "router/request_features.h"
#include "tandem/v1/gateway.pb.h"

namespace {

// Every error message goes to clients and logs as it is: it must be one printable line.
void CheckMessage(const absl::Status& s) {
  for (const unsigned char c : s.message()) {
    if (c < 0x20 || c >= 0x7f) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  grpc::Slice slice(data, size);
  grpc::ByteBuffer bytes(&slice, 1);
  tandem::v1::GenerateRequest request;
  const absl::Status parsed = tandem::ParseRequest(bytes, &request);
  CheckMessage(parsed);
  if (!parsed.ok()) return 0;
  tandem::RequestLimits limits;
  for (const absl::Status& s :
       {tandem::ValidateRequestId(request.request_id()),
        tandem::ValidateReasoning(request.hints().reasoning(), "hints.reasoning"),
        tandem::ValidateMessages(request.messages(), limits),
        tandem::ValidateTools(request.tools(), limits),
        tandem::ValidateSampling(request.sampling(), 0, limits),
        tandem::ValidateLabels(request.labels(), limits)}) {
    CheckMessage(s);
    if (!s.ok()) return 0;
  }
  (void)tandem::router::ExtractFeatures(request);
  return 0;
}
