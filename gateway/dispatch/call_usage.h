#pragma once

#include <chrono>
#include <cstdint>

#include "gateway/metrics/gateway_metrics.h"
#include "tandem/v1/gateway.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

// The tokens and timings of the answer a caller got, from the committed attempt's chunks: what
// the final chunk reports (usage, timings) and what the call's metrics observe. Written by the
// relay one chunk at a time; read once the answer is complete.
class CallUsage {
 public:
  using SteadyClock = std::chrono::steady_clock;

  explicit CallUsage(SteadyClock::time_point arrival) : arrival_(arrival) {}

  void Track(const tandem::v1::WorkerGenerateChunk& chunk);
  void Fill(tandem::v1::Usage* usage, tandem::v1::Timings* timings) const;
  // Duration (arrival to `now`), time to first token, time per output token, token counts.
  void ObserveModel(GatewayMetrics::Model& metrics, SteadyClock::time_point now) const;
  // Token counts; with `timings`, duration and time to first token too.
  void ObserveTenant(GatewayMetrics::Tenant& metrics, SteadyClock::time_point now,
                     bool timings) const;

  SteadyClock::time_point arrival() const { return arrival_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }
  int32_t completion_tokens() const { return completion_tokens_; }

 private:
  const SteadyClock::time_point arrival_;
  // The first attempt's prompt count is the caller's prompt; a failover's includes the prefix.
  int32_t prompt_tokens_ = 0;
  int32_t cached_prompt_tokens_ = 0;  // of prompt_tokens_, from the worker's prefix cache
  int32_t completion_tokens_ = 0;
  double queue_seconds_ = 0;  // in the worker's queue
  SteadyClock::time_point first_token_;
  SteadyClock::time_point last_token_;
};

}  // namespace tandem::gateway
