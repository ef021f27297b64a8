#pragma once

#include <cstdint>
#include <vector>

#include "workers/model/qwen35_moe_config.h"

namespace tandem::workers::cpu {

// The weights of one Gated DeltaNet (linear attention) layer of Qwen3.5 in fp32, as the
// checkpoint stores them (H hidden_size, Hv linear_value_heads, dv linear_value_dim, K
// conv_kernel).
struct GdnWeights {
  std::vector<float> in_qkv;   // [conv_dim, H]: rows q | k | v
  std::vector<float> in_z;     // [value_dim, H]
  std::vector<float> in_b;     // [Hv, H]
  std::vector<float> in_a;     // [Hv, H]
  std::vector<float> conv;     // [conv_dim, K] (the [conv_dim, 1, K] tensor)
  std::vector<float> a_log;    // [Hv]
  std::vector<float> dt_bias;  // [Hv]
  std::vector<float> norm;     // [dv], plain weight
  std::vector<float> out;      // [H, value_dim]
};

// The Gated DeltaNet mixer of one layer: maps x [n][H] (input-normed) to out [n][H] for n
// tokens that continue a sequence whose carried state is `conv_state` (the last K-1 pre-conv
// qkv rows, [K-1][conv_dim]; zeros at the sequence start) and `recurrent_state` (the delta-rule
// state S, [Hv][dk][dv]); both are advanced past the n tokens. One token takes the recurrent
// form of the delta rule (decode), more the chunked one (prefill).
void GatedDeltaNet(const GdnWeights& w, const model::qwen35::TextConfig& c, const float* x,
                   int64_t n, std::vector<float>* conv_state, std::vector<float>* recurrent_state,
                   float* out);

}  // namespace tandem::workers::cpu
