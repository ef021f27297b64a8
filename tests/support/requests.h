#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>

#include "tandem/v1/gateway.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::testing {

// A request of type R (a GenerateRequest or a WorkerGenerateRequest) with one user message.
template <typename R>
R OneUserMessage(const std::string& text) {
  R r;
  auto* m = r.add_messages();
  m->set_role("user");
  m->add_content()->set_text(text);
  return r;
}

// A one-message user prompt, greedy, with `max_tokens`.
inline tandem::v1::GenerateRequest Prompt(const std::string& text, int32_t max_tokens = 16) {
  auto r = OneUserMessage<tandem::v1::GenerateRequest>(text);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(0);
  return r;
}

// A Prompt with the latency objective hint.
inline tandem::v1::GenerateRequest LatencyPrompt(const std::string& text, int32_t max_tokens = 16) {
  auto r = Prompt(text, max_tokens);
  r.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);
  return r;
}

// A one-message user prompt for a worker's Generate RPC: the worker's default sampling, or
// `max_tokens` when it is above 0.
inline tandem::v1::WorkerGenerateRequest WorkerPrompt(const std::string& text,
                                                      int32_t max_tokens = 0) {
  auto r = OneUserMessage<tandem::v1::WorkerGenerateRequest>(text);
  if (max_tokens > 0) r.mutable_sampling()->set_max_tokens(max_tokens);
  return r;
}

inline void Deadline(grpc::ClientContext* ctx, std::chrono::milliseconds d) {
  ctx->set_deadline(std::chrono::system_clock::now() + d);
}

}  // namespace tandem::testing
