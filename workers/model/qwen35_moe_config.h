#pragma once

// Qwen3.5-MoE text-model config parsing, shared by the CPU reference (qwen35_moe_model.cc) and
// the CUDA engine's model (workers/cuda/cuda_qwen35_model.cc).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
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
  // Multimodal RoPE: frequency slots (rotary_dim / 2 of them) per position axis (t, h, w);
  // empty: every slot reads the t position. Interleaved (Qwen3.5): slot i reads h when
  // i % 3 == 1 and i < 3 * section[1], w when i % 3 == 2 and i < 3 * section[2], else t.
  std::vector<int32_t> mrope_section;
  bool mrope_interleaved = false;
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

// The vision encoder (config.vision_config of model_type qwen3_5_moe) and the token ids that
// place images in the text. Fixed by the code, not the config: LayerNorm eps 1e-6 with bias,
// 2-D rotary theta 10000, the merger's exact (erf) GELU, bilinear align_corners position
// resampling.
struct VisionConfig {
  int64_t depth = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_heads = 0;
  int64_t in_channels = 3;
  int64_t patch_size = 0;
  int64_t temporal_patch_size = 0;
  int64_t spatial_merge_size = 0;
  int64_t out_hidden_size = 0;          // the text model's hidden size
  int64_t num_position_embeddings = 0;  // a square table: side^2 rows
  bool tanh_gelu = true;                // hidden_act gelu_pytorch_tanh (else exact gelu)
  int32_t vision_start_token_id = 0;
  int32_t vision_end_token_id = 0;
  int32_t image_token_id = 0;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  int64_t merged_dim() const { return hidden_size * spatial_merge_size * spatial_merge_size; }
  int64_t position_side() const;  // sqrt(num_position_embeddings)
};

// Validates config.json (model_type qwen3_5_moe with its text_config, or qwen3_5_moe_text).
absl::StatusOr<TextConfig> ParseConfig(const nlohmann::json& config);

// config.vision_config with the top-level token ids; nullopt for a config without one (a text
// checkpoint). INVALID_ARGUMENT naming the field for a bad value (heads that do not divide the
// hidden size, a head dim not a multiple of 4, a non-square position table, token ids outside
// the vocabulary, out_hidden_size other than the text hidden size).
absl::StatusOr<std::optional<VisionConfig>> ParseVisionConfig(const nlohmann::json& config,
                                                              const TextConfig& text);

// The shape both engines report for this config.
ModelShape Shape(const TextConfig& config);

}  // namespace tandem::workers::model::qwen35
