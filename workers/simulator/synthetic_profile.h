#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "workers/engine.h"

namespace tandem::workers {

// Timing model of the synthetic engine (a load simulator, not a model). A step that prefills P
// prompt tokens and decodes a batch of B sequences with C total context tokens lasts
//   P / prefill_tokens_per_second
//   + decode_step_batch1_seconds + (B - 1) * decode_step_per_extra_sequence_seconds
//   + C * kv_bytes_per_token / effective_memory_bandwidth_bytes_per_second
// scaled by the worker's --synthetic_time-scale (0 = no delay, for tests and overhead runs).
struct SyntheticProfile {
  EngineInfo info;
  double decode_step_batch1_seconds = 0;
  double decode_step_per_extra_sequence_seconds = 0;
  double prefill_tokens_per_second = 0;
  double kv_bytes_per_token = 0;
  double effective_memory_bandwidth_bytes_per_second = 0;
  // Tokens one image costs in the prompt (vision models only).
  int32_t tokens_per_image = 0;
  // Memory the real model's weights would take, reported as device memory in use.
  uint64_t weight_bytes = 0;
};

// Profiles for "qwen" and "nemotron"; NOT_FOUND for other names.
absl::StatusOr<SyntheticProfile> SyntheticProfileFor(const std::string& model_name);

}  // namespace tandem::workers
