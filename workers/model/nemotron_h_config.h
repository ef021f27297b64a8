#pragma once

// Nemotron-H config parsing, shared by the CPU reference (nemotron_h_model.cc) and the CUDA
// engine's model (workers/cuda/cuda_nemotron_h_model.cc).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "workers/model/model_shape.h"

namespace tandem::workers::model::nemotron_h {

// Dimensions are capped so that every product of two of them fits comfortably in int64 and
// every single one in the int that BLAS takes.
constexpr int64_t kMaxDim = int64_t{1} << 24;

enum class LayerKind { kMamba, kAttention, kMoe, kMlp };

struct Config {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t max_positions = 0;
  float eps = 1e-5f;
  bool tie_embeddings = false;
  std::vector<LayerKind> kinds;
  std::vector<int32_t> eos;

  // Attention.
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;

  // Mamba-2. d_inner = mamba_heads * mamba_head_dim (not expand * hidden).
  int64_t m_heads = 0;
  int64_t m_head_dim = 0;
  int64_t groups = 0;
  int64_t state = 0;
  int64_t conv_kernel = 0;
  bool conv_bias = true;
  // time_step_limit: dt is clamped to [dt_min, dt_max]; the default (0, inf) is no clamp, as in
  // the CUDA kernels (the HF torch path's clamp to time_step_min is deliberately not applied).
  float dt_min = 0.0f;
  float dt_max = std::numeric_limits<float>::infinity();
  int64_t d_inner() const { return m_heads * m_head_dim; }
  int64_t conv_dim() const { return d_inner() + 2 * groups * state; }
  int64_t in_proj_rows() const { return d_inner() + conv_dim() + m_heads; }

  // MoE (routed experts are relu2 MLPs, like the shared expert and the dense MLP).
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t moe_inter = 0;
  int64_t shared_inter = 0;
  float routed_scale = 1.0f;
  bool norm_topk = true;

  // Dense MLP ('-' layers).
  int64_t mlp_inter = 0;

  bool Has(LayerKind k) const { return std::find(kinds.begin(), kinds.end(), k) != kinds.end(); }
  int64_t Count(LayerKind k) const { return std::count(kinds.begin(), kinds.end(), k); }
};

// Validates config.json; errors are prefixed with `where` (the checkpoint directory).
absl::StatusOr<Config> ParseConfig(const nlohmann::json& json, const std::string& where);

// The shape both engines report for this config.
ModelShape Shape(const Config& config);

}  // namespace tandem::workers::model::nemotron_h
