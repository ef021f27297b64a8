#include "gateway/dispatch/call_usage.h"

#include "common/clock.h"

namespace tandem::gateway {

void CallUsage::Track(const tandem::v1::WorkerGenerateChunk& chunk) {
  const auto now = SteadyClock::now();
  if (chunk.prompt_tokens() > 0 && prompt_tokens_ == 0) {
    prompt_tokens_ = chunk.prompt_tokens();
    cached_prompt_tokens_ = chunk.cached_prompt_tokens();
  }
  if (chunk.queue_seconds() > 0 && queue_seconds_ == 0) queue_seconds_ = chunk.queue_seconds();
  if (chunk.tokens() > 0) {
    if (completion_tokens_ == 0) first_token_ = now;
    last_token_ = now;
    completion_tokens_ += chunk.tokens();
  }
}

void CallUsage::Fill(tandem::v1::Usage* usage, tandem::v1::Timings* timings) const {
  usage->set_prompt_tokens(prompt_tokens_);
  usage->set_completion_tokens(completion_tokens_);
  usage->set_total_tokens(prompt_tokens_ + completion_tokens_);
  usage->set_cached_prompt_tokens(cached_prompt_tokens_);
  timings->set_queue_seconds(queue_seconds_);
  if (completion_tokens_ > 0) {
    timings->set_time_to_first_token_seconds(Seconds(first_token_ - arrival_));
  }
  timings->set_total_seconds(Seconds(SteadyClock::now() - arrival_));
}

void CallUsage::ObserveModel(GatewayMetrics::Model& m, SteadyClock::time_point now) const {
  m.request_duration->Observe(Seconds(now - arrival_));
  if (completion_tokens_ > 0) m.time_to_first_token->Observe(Seconds(first_token_ - arrival_));
  if (completion_tokens_ > 1) {
    m.time_per_output_token->Observe(Seconds(last_token_ - first_token_) /
                                     (completion_tokens_ - 1));
  }
  m.prompt_tokens->Increment(prompt_tokens_);
  m.cached_prompt_tokens->Increment(cached_prompt_tokens_);
  m.completion_tokens->Increment(completion_tokens_);
}

void CallUsage::ObserveTenant(GatewayMetrics::Tenant& tm, SteadyClock::time_point now,
                              bool timings) const {
  tm.prompt_tokens->Increment(prompt_tokens_);
  tm.completion_tokens->Increment(completion_tokens_);
  if (!timings) return;
  tm.request_duration->Observe(Seconds(now - arrival_));
  if (completion_tokens_ > 0) tm.time_to_first_token->Observe(Seconds(first_token_ - arrival_));
}

}  // namespace tandem::gateway
