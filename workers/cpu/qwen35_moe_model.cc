#include "workers/cpu/qwen35_moe_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "workers/cpu/cpu_kernels.h"
#include "workers/cpu/gated_delta_net.h"
#include "workers/model/qwen35_moe_config.h"

namespace tandem::workers::cpu {
namespace {

using model::qwen35::TextConfig;

struct AttnWeights {
  std::vector<float> q;       // [heads * head_dim * (gate ? 2 : 1), H], per head [q | gate]
  std::vector<float> k;       // [kv_heads * head_dim, H]
  std::vector<float> v;       // [kv_heads * head_dim, H]
  std::vector<float> o;       // [H, heads * head_dim]
  std::vector<float> q_norm;  // [head_dim], (1 + w)
  std::vector<float> k_norm;  // [head_dim], (1 + w)
};

struct MoeWeights {
  std::vector<float> router;        // [E, H]
  std::vector<float> gate_up;       // [E, 2I, H]: rows 0..I-1 gate, I..2I-1 up
  std::vector<float> down;          // [E, H, I]
  std::vector<float> shared_gate;   // [Is, H] (gate_proj)
  std::vector<float> shared_up;     // [Is, H]
  std::vector<float> shared_down;   // [H, Is]
  std::vector<float> shared_scale;  // [1, H]: sigmoid of x . w scales the shared expert
};

struct Layer {
  bool full_attention = false;
  int64_t index = 0;  // among the layers of its kind: KV cache or GDN state slot
  std::vector<float> input_norm;
  std::vector<float> post_norm;
  GdnWeights gdn;
  AttnWeights attn;
  MoeWeights moe;
};

// Loads tensors in order, keeping the first error (which names the tensor and shapes).
class TensorLoader {
 public:
  explicit TensorLoader(const model::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}
  void Load(const std::string& name, std::vector<int64_t> shape, std::vector<float>* out) {
    if (!status_.ok()) return;
    auto t = checkpoint_.GetFloat(name, shape);
    if (!t.ok()) {
      status_ = t.status();
      return;
    }
    *out = std::move(*t);
  }
  // A layer's routed experts (prefix `p`): fused ([E, 2I, H] with the gate rows first, and
  // [E, H, I]) as the BF16 release stores them, or one tensor per expert and projection
  // (mlp.experts.N.{gate,up,down}_proj.weight) as the FP8 release does.
  void LoadExperts(const std::string& p, int64_t E, int64_t I, int64_t H,
                   std::vector<float>* gate_up, std::vector<float>* down) {
    if (checkpoint_.Has(p + "mlp.experts.gate_up_proj") ||
        !checkpoint_.HasWeight(p + "mlp.experts.0.gate_proj.weight")) {
      Load(p + "mlp.experts.gate_up_proj", {E, 2 * I, H}, gate_up);
      Load(p + "mlp.experts.down_proj", {E, H, I}, down);
      return;
    }
    gate_up->resize(static_cast<size_t>(E * 2 * I * H));
    down->resize(static_cast<size_t>(E * H * I));
    std::vector<float> part;
    for (int64_t e = 0; e < E && status_.ok(); ++e) {
      const std::string q = absl::StrCat(p, "mlp.experts.", e, ".");
      const std::pair<const char*, float*> rows[] = {
          {"gate_proj.weight", gate_up->data() + e * 2 * I * H},
          {"up_proj.weight", gate_up->data() + (e * 2 + 1) * I * H}};
      for (const auto& [name, to] : rows) {
        Load(q + name, {I, H}, &part);
        if (status_.ok()) std::copy(part.begin(), part.end(), to);
      }
      Load(q + "down_proj.weight", {H, I}, &part);
      if (status_.ok()) std::copy(part.begin(), part.end(), down->data() + e * H * I);
    }
  }
  const absl::Status& status() const { return status_; }

 private:
  const model::Checkpoint& checkpoint_;
  absl::Status status_;
};

class Qwen35MoeModel;

int64_t FloatBytes(const std::vector<std::vector<float>>& v) {
  int64_t n = 0;
  for (const auto& x : v) n += static_cast<int64_t>(x.size());
  return n * static_cast<int64_t>(sizeof(float));
}

class Qwen35MoeState : public SequenceState {
 public:
  int64_t position() const override { return position_; }
  std::unique_ptr<SequenceState> Clone() const override {
    return std::make_unique<Qwen35MoeState>(*this);
  }
  int64_t bytes() const override {
    return FloatBytes(keys_) + FloatBytes(values_) + FloatBytes(conv_) + FloatBytes(recurrent_);
  }

 private:
  friend class Qwen35MoeModel;
  const Qwen35MoeModel* owner_ = nullptr;
  int64_t position_ = 0;
  // A prompt with images ends at a rotary position other than its length: later tokens are at
  // (sequence index + rope_delta_) on every axis.
  int64_t rope_delta_ = 0;
  // Per full-attention layer: [position][kv_heads][head_dim] keys (post-norm, post-RoPE) and
  // values.
  std::vector<std::vector<float>> keys_;
  std::vector<std::vector<float>> values_;
  // Per GDN layer: the last K-1 pre-conv qkv rows, [K-1][conv_dim] (zeros at sequence start),
  // and the delta-rule state S, [Hv][dk][dv].
  std::vector<std::vector<float>> conv_;
  std::vector<std::vector<float>> recurrent_;
};

class Qwen35MoeModel : public CpuModel {
 public:
  Qwen35MoeModel(TextConfig config, model::ModelShape shape)
      : c_(std::move(config)), shape_(shape) {}

  absl::Status LoadWeights(const model::Checkpoint& checkpoint);

  const model::ModelShape& shape() const override { return shape_; }
  std::unique_ptr<SequenceState> NewState() const override;
  absl::Status Forward(SequenceState* state, absl::Span<const int32_t> tokens, bool all_logits,
                       std::vector<float>* logits) const override;
  absl::Status ForwardMultimodal(SequenceState* state, absl::Span<const int32_t> tokens,
                                 const MultimodalInput& input, bool all_logits,
                                 std::vector<float>* logits) const override;

 private:
  // Rotary positions of the tokens fed, per axis (t, h, w); equal for text.
  struct RopePositions {
    const int64_t* axis[3];
  };
  // The forward pass on embeddings `h` [n][hidden] (overwritten) at `rope` positions.
  absl::Status Run(Qwen35MoeState* state, std::vector<float>& h, int64_t n,
                   const RopePositions& rope, bool all_logits, std::vector<float>* logits) const;
  absl::StatusOr<Qwen35MoeState*> CheckedState(SequenceState* state,
                                               absl::Span<const int32_t> tokens,
                                               const std::vector<float>* logits) const;
  // The attention mixer (the other one is GatedDeltaNet) and the MoE map x [n][hidden] (normed)
  // to out [n][hidden]. The mixers read and extend the layer's slot in `state` for tokens at
  // positions state->position_ .. + n - 1; Forward advances the position after the last layer.
  void Attention(const Layer& layer, const float* x, int64_t n, const RopePositions& rope,
                 Qwen35MoeState* state, float* out) const;
  // Attention's steps. The per-head (1 + w) RMSNorm and rotary embedding of the n tokens:
  // q [n][heads][head_dim] from the q half of qg (as projected, [n][heads][q | gate]), and the
  // new keys in place (new_k [n][kv_heads][head_dim], in the cache).
  void NormAndRotate(const AttnWeights& w, const float* qg, int64_t n, const RopePositions& rope,
                     float* q, float* new_k) const;
  // Causal softmax attention of q [n][heads][head_dim] (tokens at pos0 ..) over the cache's
  // pos0 + n keys and values, into o [n][heads][head_dim].
  void CausalAttention(const float* q, int64_t n, const float* keys, const float* values,
                       int64_t pos0, float* o) const;
  void Moe(const Layer& layer, const float* x, int64_t n, float* out) const;

  const TextConfig c_;
  const model::ModelShape shape_;
  int64_t num_full_ = 0;
  int64_t num_gdn_ = 0;
  std::vector<float> embed_;    // [V, H]
  std::vector<float> lm_head_;  // [V, H]; empty when tied to embed_
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  // RoPE inverse frequencies, [rotary_dim / 2], computed in fp32 as HF does, and the position
  // axis (0 t, 1 h, 2 w) each frequency slot reads (interleaved mRoPE).
  std::vector<float> inv_freq_;
  std::vector<int> slot_axis_;
};

absl::Status Qwen35MoeModel::LoadWeights(const model::Checkpoint& checkpoint) {
  const int64_t H = c_.hidden_size;
  // The composite checkpoint nests the text model under model.language_model.; a bare text
  // checkpoint (Qwen3_5MoeForCausalLM) uses model.
  std::string prefix = "model.language_model.";
  if (!checkpoint.Has(prefix + "embed_tokens.weight") &&
      checkpoint.Has("model.embed_tokens.weight")) {
    prefix = "model.";
  }
  TensorLoader l(checkpoint);
  l.Load(prefix + "embed_tokens.weight", {c_.vocab_size, H}, &embed_);
  if (!c_.tie_word_embeddings) l.Load("lm_head.weight", {c_.vocab_size, H}, &lm_head_);
  l.Load(prefix + "norm.weight", {H}, &final_norm_);

  const int64_t hv = c_.linear_value_heads;
  const int64_t q_rows = c_.num_heads * c_.head_dim * (c_.attn_output_gate ? 2 : 1);
  const int64_t kv_rows = c_.num_kv_heads * c_.head_dim;
  const int64_t E = c_.num_experts, I = c_.moe_intermediate, Is = c_.shared_intermediate;
  layers_.resize(c_.num_layers);
  for (int64_t i = 0; i < c_.num_layers && l.status().ok(); ++i) {
    Layer& layer = layers_[i];
    const std::string p = absl::StrCat(prefix, "layers.", i, ".");
    layer.full_attention = c_.full_attention[i];
    layer.index = layer.full_attention ? num_full_++ : num_gdn_++;
    l.Load(p + "input_layernorm.weight", {H}, &layer.input_norm);
    l.Load(p + "post_attention_layernorm.weight", {H}, &layer.post_norm);
    if (layer.full_attention) {
      AttnWeights& a = layer.attn;
      l.Load(p + "self_attn.q_proj.weight", {q_rows, H}, &a.q);
      l.Load(p + "self_attn.k_proj.weight", {kv_rows, H}, &a.k);
      l.Load(p + "self_attn.v_proj.weight", {kv_rows, H}, &a.v);
      l.Load(p + "self_attn.o_proj.weight", {H, c_.num_heads * c_.head_dim}, &a.o);
      l.Load(p + "self_attn.q_norm.weight", {c_.head_dim}, &a.q_norm);
      l.Load(p + "self_attn.k_norm.weight", {c_.head_dim}, &a.k_norm);
    } else {
      GdnWeights& g = layer.gdn;
      l.Load(p + "linear_attn.in_proj_qkv.weight", {c_.conv_dim(), H}, &g.in_qkv);
      l.Load(p + "linear_attn.in_proj_z.weight", {c_.value_dim(), H}, &g.in_z);
      l.Load(p + "linear_attn.in_proj_b.weight", {hv, H}, &g.in_b);
      l.Load(p + "linear_attn.in_proj_a.weight", {hv, H}, &g.in_a);
      l.Load(p + "linear_attn.conv1d.weight", {c_.conv_dim(), 1, c_.conv_kernel}, &g.conv);
      l.Load(p + "linear_attn.A_log", {hv}, &g.a_log);
      l.Load(p + "linear_attn.dt_bias", {hv}, &g.dt_bias);
      l.Load(p + "linear_attn.norm.weight", {c_.linear_value_dim}, &g.norm);
      l.Load(p + "linear_attn.out_proj.weight", {H, c_.value_dim()}, &g.out);
    }
    MoeWeights& m = layer.moe;
    l.Load(p + "mlp.gate.weight", {E, H}, &m.router);
    l.LoadExperts(p, E, I, H, &m.gate_up, &m.down);
    l.Load(p + "mlp.shared_expert.gate_proj.weight", {Is, H}, &m.shared_gate);
    l.Load(p + "mlp.shared_expert.up_proj.weight", {Is, H}, &m.shared_up);
    l.Load(p + "mlp.shared_expert.down_proj.weight", {H, Is}, &m.shared_down);
    l.Load(p + "mlp.shared_expert_gate.weight", {1, H}, &m.shared_scale);
  }
  if (!l.status().ok()) return l.status();

  // HF: inv_freq = 1 / theta^(arange(0, dim, 2) / dim), all in fp32.
  const int64_t half = c_.rotary_dim / 2;
  inv_freq_.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c_.rotary_dim);
    inv_freq_[i] = 1.0f / std::pow(c_.rope_theta, exponent);
  }
  slot_axis_.assign(half, 0);
  if (c_.mrope_section.size() == 3) {
    for (int64_t i = 0; i < half; ++i) {
      if (i % 3 == 1 && i < 3 * c_.mrope_section[1]) slot_axis_[i] = 1;
      if (i % 3 == 2 && i < 3 * c_.mrope_section[2]) slot_axis_[i] = 2;
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<SequenceState> Qwen35MoeModel::NewState() const {
  auto s = std::make_unique<Qwen35MoeState>();
  s->owner_ = this;
  s->keys_.resize(num_full_);
  s->values_.resize(num_full_);
  s->conv_.assign(num_gdn_, std::vector<float>((c_.conv_kernel - 1) * c_.conv_dim(), 0.0f));
  s->recurrent_.assign(
      num_gdn_,
      std::vector<float>(c_.linear_value_heads * c_.linear_key_dim * c_.linear_value_dim, 0.0f));
  return s;
}

void Qwen35MoeModel::NormAndRotate(const AttnWeights& w, const float* qg, int64_t n,
                                   const RopePositions& rope, float* q, float* new_k) const {
  const int64_t D = c_.head_dim, nh = c_.num_heads, nkv = c_.num_kv_heads;
  const int64_t q_stride = D * (c_.attn_output_gate ? 2 : 1);  // per head: [q | gate]
  const int64_t kv_row = nkv * D;
  // Per-head (1 + w) RMSNorm, then NeoX RoPE on the first rotary_dim dims (pairs i, i + half).
  const int64_t half = c_.rotary_dim / 2;
  std::vector<float> cos_t(half), sin_t(half);
  auto rotate = [&](float* v) {
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = v[i], x2 = v[i + half];
      v[i] = x1 * cos_t[i] - x2 * sin_t[i];
      v[i + half] = x2 * cos_t[i] + x1 * sin_t[i];
    }
  };
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(rope.axis[slot_axis_[i]][t]) * inv_freq_[i];
      cos_t[i] = std::cos(angle);
      sin_t[i] = std::sin(angle);
    }
    for (int64_t h = 0; h < nh; ++h) {
      float* qh = q + (t * nh + h) * D;
      RmsNorm(qg + (t * nh + h) * q_stride, 1, D, w.q_norm.data(), c_.rms_norm_eps, true, qh);
      rotate(qh);
    }
    for (int64_t h = 0; h < nkv; ++h) {
      float* kh = new_k + t * kv_row + h * D;
      RmsNorm(kh, 1, D, w.k_norm.data(), c_.rms_norm_eps, true, kh);
      rotate(kh);
    }
  }
}

void Qwen35MoeModel::CausalAttention(const float* q, int64_t n, const float* keys,
                                     const float* values, int64_t pos0, float* o) const {
  const int64_t D = c_.head_dim, nh = c_.num_heads, nkv = c_.num_kv_heads;
  const int64_t kv_row = nkv * D;
  // q head h reads kv head h / (nh / nkv). Blocks of query rows bound the score buffer
  // ([block][context] floats, at most ~64 MiB).
  constexpr int64_t kMaxScores = int64_t{1} << 24;
  const int64_t block = std::clamp<int64_t>(kMaxScores / (pos0 + n), 1, 256);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> scores(std::min(n, block) * (pos0 + n));
  for (int64_t t0 = 0; t0 < n; t0 += block) {
    const int64_t rows = std::min(block, n - t0);
    const int64_t len = pos0 + t0 + rows;  // keys the last row of the block sees
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t kvh = h / (nh / nkv);
      MatMul(q + (t0 * nh + h) * D, nh * D, keys + kvh * D, kv_row,
             /*b_transposed=*/true, rows, len, D, scores.data(), len);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = scores.data() + r * len;
        const int64_t visible = pos0 + t0 + r + 1;
        for (int64_t s = 0; s < visible; ++s) row[s] *= scale;
        Softmax(row, visible);
        std::fill(row + visible, row + len, 0.0f);
      }
      MatMul(scores.data(), len, values + kvh * D, kv_row, /*b_transposed=*/false, rows, D, len,
             o + (t0 * nh + h) * D, nh * D);
    }
  }
}

void Qwen35MoeModel::Attention(const Layer& layer, const float* x, int64_t n,
                               const RopePositions& rope, Qwen35MoeState* state, float* out) const {
  const AttnWeights& w = layer.attn;
  const int64_t H = c_.hidden_size, D = c_.head_dim, nh = c_.num_heads, nkv = c_.num_kv_heads;
  const int64_t q_stride = D * (c_.attn_output_gate ? 2 : 1);  // per head: [q | gate]
  std::vector<float> qg(n * nh * q_stride);
  Linear(x, n, H, w.q.data(), nh * q_stride, qg.data());
  std::vector<float>& keys = state->keys_[layer.index];
  std::vector<float>& values = state->values_[layer.index];
  const int64_t pos0 = state->position_;
  const int64_t kv_row = nkv * D;
  keys.resize((pos0 + n) * kv_row);
  values.resize((pos0 + n) * kv_row);
  float* new_k = keys.data() + pos0 * kv_row;
  Linear(x, n, H, w.k.data(), kv_row, new_k);
  Linear(x, n, H, w.v.data(), kv_row, values.data() + pos0 * kv_row);
  std::vector<float> q(n * nh * D);
  NormAndRotate(w, qg.data(), n, rope, q.data(), new_k);

  // Causal softmax attention over the cache, then the output gate.
  std::vector<float> o(n * nh * D);
  CausalAttention(q.data(), n, keys.data(), values.data(), pos0, o.data());
  if (c_.attn_output_gate) {
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < nh; ++h) {
        float* oh = o.data() + (t * nh + h) * D;
        const float* gate = qg.data() + (t * nh + h) * q_stride + D;
        for (int64_t d = 0; d < D; ++d) oh[d] *= Sigmoid(gate[d]);
      }
    }
  }
  Linear(o.data(), n, nh * D, w.o.data(), H, out);
}

void Qwen35MoeModel::Moe(const Layer& layer, const float* x, int64_t n, float* out) const {
  const MoeWeights& w = layer.moe;
  const int64_t H = c_.hidden_size, E = c_.num_experts, top = c_.experts_per_token;
  const int64_t I = c_.moe_intermediate, Is = c_.shared_intermediate;

  // Router: softmax over all experts, top-k, renormalise the k weights.
  std::vector<float> probs(n * E);
  Linear(x, n, H, w.router.data(), E, probs.data());
  std::vector<std::vector<std::pair<int64_t, float>>> by_expert(E);  // (token, weight)
  std::vector<int64_t> order(E);
  for (int64_t t = 0; t < n; ++t) {
    float* p = probs.data() + t * E;
    Softmax(p, E);
    for (int64_t e = 0; e < E; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + top, order.end(),
                      [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0;
    for (int64_t i = 0; i < top; ++i) sum += p[order[i]];
    for (int64_t i = 0; i < top; ++i) by_expert[order[i]].emplace_back(t, p[order[i]] / sum);
  }

  // Each expert runs once on the rows routed to it: SwiGLU from the fused gate|up rows.
  std::fill(out, out + n * H, 0.0f);
  std::vector<float> rows, gu, act, y;
  for (int64_t e = 0; e < E; ++e) {
    const auto& routed = by_expert[e];
    const int64_t m = static_cast<int64_t>(routed.size());
    if (m == 0) continue;
    rows.resize(m * H);
    for (int64_t i = 0; i < m; ++i) {
      std::copy(x + routed[i].first * H, x + (routed[i].first + 1) * H, rows.data() + i * H);
    }
    gu.resize(m * 2 * I);
    act.resize(m * I);
    y.resize(m * H);
    Linear(rows.data(), m, H, w.gate_up.data() + e * 2 * I * H, 2 * I, gu.data());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < I; ++j) {
        act[i * I + j] = Silu(gu[i * 2 * I + j]) * gu[i * 2 * I + I + j];
      }
    }
    Linear(act.data(), m, I, w.down.data() + e * H * I, H, y.data());
    for (int64_t i = 0; i < m; ++i) {
      float* o = out + routed[i].first * H;
      const float weight = routed[i].second;
      for (int64_t d = 0; d < H; ++d) o[d] += weight * y[i * H + d];
    }
  }

  // Shared expert, scaled per token by sigmoid(x . shared_expert_gate).
  std::vector<float> sg(n * Is), su(n * Is), sy(n * H), scale(n);
  Linear(x, n, H, w.shared_gate.data(), Is, sg.data());
  Linear(x, n, H, w.shared_up.data(), Is, su.data());
  for (int64_t i = 0; i < n * Is; ++i) sg[i] = Silu(sg[i]) * su[i];
  Linear(sg.data(), n, Is, w.shared_down.data(), H, sy.data());
  Linear(x, n, H, w.shared_scale.data(), 1, scale.data());
  for (int64_t t = 0; t < n; ++t) {
    const float s = Sigmoid(scale[t]);
    for (int64_t d = 0; d < H; ++d) out[t * H + d] += s * sy[t * H + d];
  }
}

absl::StatusOr<Qwen35MoeState*> Qwen35MoeModel::CheckedState(
    SequenceState* base_state, absl::Span<const int32_t> tokens,
    const std::vector<float>* logits) const {
  auto* state = dynamic_cast<Qwen35MoeState*>(base_state);
  if (state == nullptr || state->owner_ != this) {
    return absl::InvalidArgumentError("qwen3_5_moe: the state was not made by this model");
  }
  if (absl::Status s = CheckForwardInput(shape_, state->position_, tokens, logits); !s.ok()) {
    return s;
  }
  return state;
}

absl::Status Qwen35MoeModel::Forward(SequenceState* base_state, absl::Span<const int32_t> tokens,
                                     bool all_logits, std::vector<float>* logits) const {
  absl::StatusOr<Qwen35MoeState*> state = CheckedState(base_state, tokens, logits);
  if (!state.ok()) return state.status();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t H = c_.hidden_size;
  std::vector<float> h(n * H);
  for (int64_t t = 0; t < n; ++t) {
    std::copy(embed_.begin() + tokens[t] * H, embed_.begin() + (tokens[t] + 1) * H,
              h.begin() + t * H);
  }
  std::vector<int64_t> positions(n);
  for (int64_t t = 0; t < n; ++t) positions[t] = (*state)->position_ + t + (*state)->rope_delta_;
  const RopePositions rope{{positions.data(), positions.data(), positions.data()}};
  return Run(*state, h, n, rope, all_logits, logits);
}

absl::Status Qwen35MoeModel::ForwardMultimodal(SequenceState* base_state,
                                               absl::Span<const int32_t> tokens,
                                               const MultimodalInput& input, bool all_logits,
                                               std::vector<float>* logits) const {
  absl::StatusOr<Qwen35MoeState*> state = CheckedState(base_state, tokens, logits);
  if (!state.ok()) return state.status();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t H = c_.hidden_size;
  const model::MropePositions* p = input.positions;
  if (p == nullptr || static_cast<int64_t>(p->t.size()) != n ||
      static_cast<int64_t>(p->h.size()) != n || static_cast<int64_t>(p->w.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("qwen3_5_moe: 3-D positions must cover the ", n, " tokens fed"));
  }
  const int64_t image_tokens = std::count(tokens.begin(), tokens.end(), input.image_token_id);
  if (static_cast<int64_t>(input.image_embeds.size()) != image_tokens * H) {
    return absl::InvalidArgumentError(
        absl::StrCat("qwen3_5_moe: ", image_tokens, " image tokens but ",
                     input.image_embeds.size() / H, " image embedding rows of ", H));
  }
  std::vector<float> h(n * H);
  const float* next_image = input.image_embeds.data();
  for (int64_t t = 0; t < n; ++t) {
    const float* row = embed_.data() + tokens[t] * H;
    if (tokens[t] == input.image_token_id) {
      row = next_image;
      next_image += H;
    }
    std::copy(row, row + H, h.begin() + t * H);
  }
  const RopePositions rope{{p->t.data(), p->h.data(), p->w.data()}};
  absl::Status s = Run(*state, h, n, rope, all_logits, logits);
  if (s.ok()) (*state)->rope_delta_ = p->rope_delta;
  return s;
}

absl::Status Qwen35MoeModel::Run(Qwen35MoeState* state, std::vector<float>& h, int64_t n,
                                 const RopePositions& rope, bool all_logits,
                                 std::vector<float>* logits) const {
  const int64_t H = c_.hidden_size;
  std::vector<float> x(n * H), y(n * H);
  for (const Layer& layer : layers_) {
    RmsNorm(h.data(), n, H, layer.input_norm.data(), c_.rms_norm_eps, true, x.data());
    if (layer.full_attention) {
      Attention(layer, x.data(), n, rope, state, y.data());
    } else {
      GatedDeltaNet(layer.gdn, c_, x.data(), n, &state->conv_[layer.index],
                    &state->recurrent_[layer.index], y.data());
    }
    for (int64_t i = 0; i < n * H; ++i) h[i] += y[i];
    RmsNorm(h.data(), n, H, layer.post_norm.data(), c_.rms_norm_eps, true, x.data());
    Moe(layer, x.data(), n, y.data());
    for (int64_t i = 0; i < n * H; ++i) h[i] += y[i];
  }
  state->position_ += n;

  // Final norm and lm_head only for the rows asked for.
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  RmsNorm(h.data() + first * H, rows, H, final_norm_.data(), c_.rms_norm_eps, true, x.data());
  logits->resize(rows * c_.vocab_size);
  const float* head = c_.tie_word_embeddings ? embed_.data() : lm_head_.data();
  Linear(x.data(), rows, H, head, c_.vocab_size, logits->data());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuModel>> LoadQwen35Moe(const model::Checkpoint& checkpoint,
                                                        const model::qwen35::TextConfig& config,
                                                        const model::ModelShape& shape) {
  auto model = std::make_unique<Qwen35MoeModel>(config, shape);
  if (absl::Status s = model->LoadWeights(checkpoint); !s.ok()) return s;
  return model;
}

}  // namespace tandem::workers::cpu
