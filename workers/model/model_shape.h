#pragma once

#include <cstdint>
#include <vector>

#include "workers/model/architecture.h"

namespace tandem::workers::model {

// What an engine (CPU or CUDA) needs to know about a model, from its config alone.
struct ModelShape {
  Architecture architecture = Architecture::kQwen35Moe;
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t num_layers = 0;
  int32_t max_positions = 0;
  // Memory per sequence, as in docs/models.md §3 (fp32 here): KV cache bytes per token of
  // context (attention layers only), and the fixed recurrent + conv state bytes.
  int64_t kv_bytes_per_token = 0;
  int64_t state_bytes = 0;
  // Token ids that end a sequence (from config.json; may be empty).
  std::vector<int32_t> eos_token_ids;
};

}  // namespace tandem::workers::model
