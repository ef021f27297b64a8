#pragma once

// The small random models (workers/model/random_checkpoint.h) the random-weights tests build:
// one set of sizes for the CPU and CUDA suites.
#include <string>

#include "workers/model/random_checkpoint.h"

namespace tandem::testing {

// A small model of `arch` ("qwen3_5_moe" or "nemotron_h") that the CPU reference runs in
// milliseconds.
inline workers::model::RandomModelOptions SmallRandomModel(const std::string& arch) {
  workers::model::RandomModelOptions o;
  o.architecture = arch;
  o.vocab_size = 300;
  o.hidden_size = 64;
  o.num_layers = 5;  // Qwen: GDN x3, attention, GDN; Nemotron: M E M * E
  o.num_experts = 8;
  o.experts_per_token = 2;
  o.moe_intermediate_size = 32;
  o.shared_intermediate_size = 48;
  o.num_attention_heads = 4;
  o.num_kv_heads = 2;
  o.head_dim = 32;
  o.linear_head_dim = 16;
  o.mamba_heads = 4;
  o.mamba_head_dim = 16;
  o.mamba_groups = 2;
  o.ssm_state_size = 16;
  return o;
}

}  // namespace tandem::testing
