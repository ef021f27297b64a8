#pragma once

// Qwen3.5-MoE text-model config parsing, shared by the CPU reference (qwen35_moe_model.cc) and
// the CUDA engine's model (workers/cuda/cuda_qwen35_model.cc).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "workers/model/model_shape.h"

namespace tandem::workers::model::qwen35 {

// The text-model hyperparameters, validated.
struct TextConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t max_positions = 0;
  float rms_norm_eps = 0;
  // Gated full attention.
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool attn_output_gate = true;
  int64_t rotary_dim = 0;  // leading dims of each head that get (NeoX) RoPE
  float rope_theta = 0;
  // Gated DeltaNet.
  int64_t conv_kernel = 0;
  int64_t linear_key_heads = 0;
  int64_t linear_value_heads = 0;
  int64_t linear_key_dim = 0;    // per head
  int64_t linear_value_dim = 0;  // per head
  // MoE.
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t moe_intermediate = 0;
  int64_t shared_intermediate = 0;
  bool tie_word_embeddings = false;
  // model_type qwen3_5_moe: the text model nested in the multimodal config (its tensors under
  // model.language_model.); false for a bare qwen3_5_moe_text config (tensors under model.).
  bool composite = false;
  std::vector<bool> full_attention;  // per layer: full attention, else Gated DeltaNet
  std::vector<int32_t> eos_token_ids;

  int64_t key_dim() const { return linear_key_heads * linear_key_dim; }
  int64_t value_dim() const { return linear_value_heads * linear_value_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Validates config.json (model_type qwen3_5_moe with its text_config, or qwen3_5_moe_text).
absl::StatusOr<TextConfig> ParseConfig(const nlohmann::json& config);

// The shape both engines report for this config.
ModelShape Shape(const TextConfig& config);

}  // namespace tandem::workers::model::qwen35
