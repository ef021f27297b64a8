#pragma once

// The bounds cuda_benchmark reports its measurements against: the bytes a step must move through
// HBM (at the device's peak bandwidth) and the FLOPs it must do (at the tensor cores' BF16 dense
// peak), whichever takes longer. Host arithmetic on a few model facts; no CUDA, so it runs (and
// can be checked) on any machine.
//
// Decode step of B sequences at context C (each feeds one token at position C):
//   bytes = shared weights (everything on the device but the routed experts and the input
//           embedding table: attention / GDN / Mamba projections, norms, routers, shared experts,
//           lm_head) + B embedding rows + the routed experts the batch touches + the KV cache
//           read (B * (C + 1) tokens) + the recurrent state read and written back (B slots).
//   With random router weights routing is about uniform, so a MoE layer's batch touches
//   E * (1 - (1 - k/E)^B) distinct experts on average: that share of the routed bytes.
//   FLOPs = 2 * active matmul parameters per token * B + attention scores and values.
// Prefill of T tokens (one sequence, positions 0..T-1): every weight read once (the routed
// experts' expected share for T tokens), the KV written; FLOPs = 2 * active parameters * T +
// 4 * heads * head_dim * T(T+1)/2 per attention layer + lm_head for the last token only.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cuda::bench {

// What the bounds need to know about one model (bytes as stored on the device).
struct ModelCost {
  double weight_bytes = 0;    // all weights (CudaModel::weight_bytes)
  double routed_bytes = 0;    // of which routed experts
  double embed_bytes = 0;     // of which the input embedding table (0 when tied to lm_head)
  double row_bytes = 0;       // one embedding row (hidden * 2, BF16)
  double dense_params = 0;    // matmul parameters every token uses (no embedding, no lm_head)
  double routed_params = 0;   // all routed experts' parameters
  double lm_head_params = 0;  // vocab * hidden
  double experts = 0;         // E (0: no MoE)
  double experts_per_token = 0;
  double attention_layers = 0;
  double heads = 0;  // query heads of an attention layer
  double head_dim = 0;
  double kv_bytes_per_token = 0;  // device KV bytes per token of context, all attention layers
  double state_bytes = 0;         // device recurrent state of one sequence, all recurrent layers
};

// One bound, with the parts it is made of.
struct Bound {
  double shared_bytes = 0, routed_bytes = 0, kv_bytes = 0, state_bytes = 0;
  double flops = 0;
  double memory_s = 0, compute_s = 0;
  double bytes() const { return shared_bytes + routed_bytes + kv_bytes + state_bytes; }
  double seconds() const { return std::max(memory_s, compute_s); }
  const char* limiter() const { return memory_s >= compute_s ? "HBM" : "FLOPs"; }
};

// Expected share of a MoE layer's experts that `tokens` tokens, each routed to k of E experts
// uniformly at random, touch: 1 - (1 - k/E)^tokens.
inline double TouchedExpertShare(const ModelCost& c, double tokens) {
  if (c.experts <= 0 || c.experts_per_token <= 0) return 1.0;
  return 1.0 - std::pow(1.0 - c.experts_per_token / c.experts, tokens);
}

// Matmul FLOPs of one token through every layer (routed experts: k of E), without lm_head.
inline double TokenFlops(const ModelCost& c) {
  const double routed_share =
      c.experts > 0 ? c.experts_per_token / c.experts : (c.routed_params > 0 ? 1.0 : 0.0);
  return 2.0 * (c.dense_params + c.routed_params * routed_share);
}

inline void Finish(Bound* b, double peak_gbps, double peak_tflops) {
  b->memory_s = b->bytes() / (peak_gbps * 1e9);
  b->compute_s = peak_tflops > 0 ? b->flops / (peak_tflops * 1e12) : 0;
}

inline Bound DecodeBound(const ModelCost& c, int64_t batch, int64_t context, double peak_gbps,
                         double peak_tflops) {
  const double B = static_cast<double>(batch);
  const double keys = static_cast<double>(context + 1);  // the new token's key included
  Bound b;
  b.shared_bytes = c.weight_bytes - c.routed_bytes - c.embed_bytes + B * c.row_bytes;
  b.routed_bytes = c.routed_bytes * TouchedExpertShare(c, B);
  b.kv_bytes = B * keys * c.kv_bytes_per_token;
  b.state_bytes = 2.0 * B * c.state_bytes;  // read, updated, written back
  b.flops = B * (TokenFlops(c) + 2.0 * c.lm_head_params +
                 4.0 * c.attention_layers * c.heads * c.head_dim * keys);
  Finish(&b, peak_gbps, peak_tflops);
  return b;
}

inline Bound PrefillBound(const ModelCost& c, int64_t tokens, double peak_gbps,
                          double peak_tflops) {
  const double T = static_cast<double>(tokens);
  Bound b;
  b.shared_bytes = c.weight_bytes - c.routed_bytes - c.embed_bytes + T * c.row_bytes;
  b.routed_bytes = c.routed_bytes * TouchedExpertShare(c, T);
  b.kv_bytes = T * c.kv_bytes_per_token;  // written once
  b.state_bytes = c.state_bytes;          // written once
  b.flops = T * TokenFlops(c) + 2.0 * c.lm_head_params +
            4.0 * c.attention_layers * c.heads * c.head_dim * T * (T + 1) / 2;
  Finish(&b, peak_gbps, peak_tflops);
  return b;
}

// ModelCost of a checkpoint: parameter and byte counts from the tensors the engines read, shapes
// from config.json; what only the loaded model knows is given: the weights' device bytes (BF16,
// routers and a few state-space vectors fp32), device KV bytes per token (all attention layers)
// and recurrent-state bytes per sequence.
inline ModelCost CostOf(const model::Checkpoint& ckpt, double weight_bytes,
                        double kv_bytes_per_token, double state_bytes) {
  ModelCost c;
  c.weight_bytes = weight_bytes;
  double embed_elements = 0, hidden = 0;
  bool lm_head = false;
  for (const auto& [name, t] : ckpt.tensors()) {
    // Not loaded by the engines: Qwen's MTP head and vision tower in a released checkpoint.
    if (absl::StartsWith(name, "mtp.") || absl::StrContains(name, "visual.")) continue;
    const double n = static_cast<double>(t->elements());
    if (absl::StrContains(name, ".experts.")) {  // routed only: not shared_expert(s)
      c.routed_params += n;
      c.routed_bytes += 2.0 * n;  // BF16 on the device
    } else if (name == "lm_head.weight") {
      lm_head = true;
      c.lm_head_params = n;
    } else if (absl::StrContains(name, "embed")) {  // embed_tokens, embeddings: [vocab][hidden]
      embed_elements = n;
      hidden = static_cast<double>(t->shape.back());
    } else if (t->shape.size() >= 2 && !absl::StrContains(name, "conv1d")) {
      c.dense_params += n;  // matmuls; norms, conv taps and SSM vectors are negligible
    }
  }
  c.row_bytes = 2.0 * hidden;
  if (lm_head) {
    c.embed_bytes = 2.0 * embed_elements;
  } else {  // tied: the table is lm_head, read whole every step
    c.lm_head_params = embed_elements;
  }
  const nlohmann::json all = nlohmann::json::parse(ckpt.config_json(), nullptr, false);
  const nlohmann::json& t = all.contains("text_config") ? all["text_config"] : all;
  auto num = [&t](const char* key) {
    const auto it = t.find(key);
    return it != t.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  c.experts = num("num_experts") > 0 ? num("num_experts") : num("n_routed_experts");
  c.experts_per_token = num("num_experts_per_tok");
  c.heads = num("num_attention_heads");
  c.head_dim = num("head_dim") > 0 ? num("head_dim") : num("hidden_size") / std::max(1.0, c.heads);
  const double kv_heads = std::max(1.0, num("num_key_value_heads"));
  c.kv_bytes_per_token = kv_bytes_per_token;
  // The engines keep K and V in fp32: 2 x kv_heads x head_dim x 4 bytes per token and layer.
  c.attention_layers = c.head_dim > 0 ? kv_bytes_per_token / (8.0 * kv_heads * c.head_dim) : 0;
  c.state_bytes = state_bytes;
  return c;
}

}  // namespace tandem::workers::cuda::bench
