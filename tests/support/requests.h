#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>

#include "tandem/v1/gateway.pb.h"

namespace tandem::testing {

// A one-message user prompt, greedy, with `max_tokens`.
inline tandem::v1::GenerateRequest Prompt(const std::string& text, int32_t max_tokens = 16) {
  tandem::v1::GenerateRequest r;
  auto* m = r.add_messages();
  m->set_role("user");
  m->add_content()->set_text(text);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(0);
  return r;
}

inline void Deadline(grpc::ClientContext* ctx, std::chrono::milliseconds d) {
  ctx->set_deadline(std::chrono::system_clock::now() + d);
}

}  // namespace tandem::testing
