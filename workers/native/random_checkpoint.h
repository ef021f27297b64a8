#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "workers/native/safetensors.h"

namespace tandem::workers::native {

// The size of a random-weight model. Field names follow the released configs; defaults are a
// small model that runs on a CPU (hidden 256, 4 layers, 16 experts).
struct RandomModelOptions {
  std::string architecture = "qwen3_5_moe";  // or "nemotron_h"
  int32_t vocab_size = 512;
  int32_t hidden_size = 256;
  int32_t num_layers = 4;
  int32_t num_experts = 16;
  int32_t experts_per_token = 2;
  int32_t moe_intermediate_size = 128;
  int32_t shared_intermediate_size = 128;
  int32_t num_attention_heads = 4;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 64;
  // Qwen3.5 Gated DeltaNet.
  int32_t linear_key_heads = 2;
  int32_t linear_value_heads = 4;
  int32_t linear_head_dim = 64;
  // Nemotron-H Mamba-2; the layer pattern (M Mamba, E MoE, * attention) defaults to MEM*E
  // repeated, cut to num_layers.
  int32_t mamba_heads = 8;
  int32_t mamba_head_dim = 32;
  int32_t mamba_groups = 2;
  int32_t ssm_state_size = 32;
  std::string pattern;
  int32_t max_positions = 32768;
  // End-of-sequence id written to config.json; -1 for none.
  int32_t eos_token_id = -1;
  uint64_t seed = 1;
  DType dtype = DType::kBF16;
  // > 0: shard the weights into files of about this many bytes, with an index.
  uint64_t shard_bytes = 0;
};

// Writes config.json and the weights of a random model into `dir` (created if missing), in the
// real checkpoints' tensor names and layouts (model_spec.md), so the native engine loads it
// exactly like released weights. The output is meaningless text; for tests, demos, benchmarks.
absl::Status WriteRandomCheckpoint(const RandomModelOptions& options, const std::string& dir);

}  // namespace tandem::workers::native
