// Qwen3.5-MoE on the device: the math of workers/cpu/qwen35_moe_model.cc (the fp32 CPU
// reference) sequenced over the kernels of kernels.h, with BF16 weights (fp32 routers) and fp32
// activations and state. The layers only: CudaHybridModel (cuda_hybrid_model.h) runs the passes
// and owns the memory. A state slot holds, per Gated DeltaNet layer, its conv window and its
// delta-rule state [Hv][dk][dv]; the KV pool one region per full-attention layer.

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/cuda/cuda_hybrid_model.h"
#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/cuda_model.h"
#include "workers/cuda/gemm.h"
#include "workers/cuda/kernels_model.h"
#include "workers/cuda/model_common.h"
#include "workers/cuda/scratch_buffers.h"
#include "workers/model/qwen35_moe_config.h"

namespace tandem::workers::cuda {

using model::qwen35::TextConfig;

template <>
HybridLayout ConfiguredHybridModel<TextConfig>::LayoutOf(const TextConfig& c) {
  const int64_t full = std::count(c.full_attention.begin(), c.full_attention.end(), true);
  HybridLayout layout;
  layout.recurrent_layers = c.num_layers - full;
  layout.conv_channels = c.conv_dim();
  layout.conv_kernel = c.conv_kernel;
  layout.state_floats = c.linear_value_heads * c.linear_key_dim * c.linear_value_dim;
  layout.attention_layers = full;
  layout.attention_heads = c.num_heads;
  layout.kv_heads = c.num_kv_heads;
  layout.head_dim = c.head_dim;
  layout.norm_eps = c.rms_norm_eps;
  layout.norm_one_plus_weight = true;
  layout.tied_embeddings = c.tie_word_embeddings;
  layout.image_inputs = true;
  layout.max_linear_input =
      std::max({c.value_dim(), c.num_heads * c.head_dim, c.shared_intermediate});
  return layout;
}

namespace {

// Piece ids in DeviceWeights (-1: absent).
struct Layer {
  bool full_attention = false;
  int64_t index = 0;  // among the layers of its kind: GDN state piece or KV region
  int input_norm = -1, post_norm = -1;
  // Gated DeltaNet.
  int in_qkv = -1, in_z = -1, in_b = -1, in_a = -1, conv = -1;
  int a_log = -1, dt_bias = -1;  // fp32
  int gdn_norm = -1, gdn_out = -1;
  // Gated attention: q_proj's per-head [q | gate] rows regrouped into q and gate pieces.
  int q = -1, gate = -1, k = -1, v = -1, o = -1, q_norm = -1, k_norm = -1;
  // MoE.
  int router = -1;  // fp32
  int gate_up = -1, down = -1, shared_gate_up = -1, shared_down = -1, shared_scale = -1;
};

class CudaQwen35Model final : public ConfiguredHybridModel<TextConfig> {
 public:
  using ConfiguredHybridModel::ConfiguredHybridModel;

 private:
  absl::Status LoadWeights(const model::Checkpoint& checkpoint) override;
  absl::Status LoadLayer(const model::Checkpoint& ck, const std::string& prefix, Layer* l);
  void AllocateLayerScratch(ScratchBuffers& scratch) override;
  absl::Status ForwardLayers(const Pass& p, cudaStream_t s) override;
  // x() -> y() for the pass's rows.
  absl::Status GatedDeltaNet(const Layer& l, const Pass& p, cudaStream_t s);
  absl::Status Attention(const Layer& l, const Pass& p, cudaStream_t s);
  // q_ and k_ rotated by the pass's 3-D (t, h, w) positions (an image prompt's prefill).
  absl::Status MultimodalRope(const Pass& p, cudaStream_t s);
  absl::Status Moe(const Layer& l, const Pass& p, cudaStream_t s);

  std::vector<Layer> layers_;

  // Scratch, kMaxRows rows each (see AllocateLayerScratch).
  float *qkv_ = nullptr, *conv_out_ = nullptr, *gq_ = nullptr, *gk_ = nullptr, *gv_ = nullptr;
  float *z_ = nullptr, *a_ = nullptr, *b_ = nullptr, *g_ = nullptr, *beta_ = nullptr;
  float *core_ = nullptr, *normed_ = nullptr;
  float *q_ = nullptr, *gate_ = nullptr, *k_ = nullptr, *v_ = nullptr, *o_ = nullptr;
  float *router_logits_ = nullptr, *route_weights_ = nullptr, *moe_scratch_ = nullptr;
  int32_t* route_ids_ = nullptr;
  float *shared_gu_ = nullptr, *shared_act_ = nullptr, *shared_logit_ = nullptr;
};

absl::Status CudaQwen35Model::LoadWeights(const model::Checkpoint& ck) {
  // As the CPU reference: model.language_model. in the composite checkpoint, else model.
  std::string prefix = "model.language_model.";
  if (!ck.Has(prefix + "embed_tokens.weight") && ck.Has("model.embed_tokens.weight")) {
    prefix = "model.";
  }
  RETURN_IF_ERROR(LoadEmbeddingAndHead(ck, prefix + "embed_tokens.weight", prefix + "norm.weight"));
  int64_t num_full = 0, num_gdn = 0;
  layers_.resize(c_.num_layers);
  for (int64_t i = 0; i < c_.num_layers; ++i) {
    Layer& l = layers_[i];
    l.full_attention = c_.full_attention[i];
    l.index = l.full_attention ? num_full++ : num_gdn++;
    RETURN_IF_ERROR(LoadLayer(ck, absl::StrCat(prefix, "layers.", i, "."), &l));
  }
  return absl::OkStatus();
}

absl::Status CudaQwen35Model::LoadLayer(const model::Checkpoint& ck, const std::string& p,
                                        Layer* l) {
  using Rows = DeviceWeights::Rows;
  DeviceWeights& w = weights();
  const PieceLoader load{ck, w};
  const int64_t H = c_.hidden_size;
  const int64_t hv = c_.linear_value_heads, D = c_.head_dim, nh = c_.num_heads;
  const int64_t q_stride = D * (c_.attn_output_gate ? 2 : 1);
  const int64_t kv_rows = c_.num_kv_heads * D;
  const int64_t E = c_.num_experts, I = c_.moe_intermediate, Is = c_.shared_intermediate;
  ASSIGN_OR_RETURN(l->input_norm, load.Bf16(p + "input_layernorm.weight", {H}));
  ASSIGN_OR_RETURN(l->post_norm, load.Bf16(p + "post_attention_layernorm.weight", {H}));
  if (l->full_attention) {
    ASSIGN_OR_RETURN(const model::TensorView* q,
                     ck.Get(p + "self_attn.q_proj.weight", {nh * q_stride, H}));
    std::vector<Rows> q_rows, gate_rows;
    for (int64_t h = 0; h < nh; ++h) {
      q_rows.push_back(Rows{.view = q, .row_begin = h * q_stride, .rows = D});
      gate_rows.push_back(Rows{.view = q, .row_begin = h * q_stride + D, .rows = D});
    }
    l->q = w.AddBf16(std::move(q_rows));
    if (c_.attn_output_gate) l->gate = w.AddBf16(std::move(gate_rows));
    ASSIGN_OR_RETURN(l->k, load.Bf16(p + "self_attn.k_proj.weight", {kv_rows, H}));
    ASSIGN_OR_RETURN(l->v, load.Bf16(p + "self_attn.v_proj.weight", {kv_rows, H}));
    ASSIGN_OR_RETURN(l->o, load.Bf16(p + "self_attn.o_proj.weight", {H, nh * D}));
    ASSIGN_OR_RETURN(l->q_norm, load.Bf16(p + "self_attn.q_norm.weight", {D}));
    ASSIGN_OR_RETURN(l->k_norm, load.Bf16(p + "self_attn.k_norm.weight", {D}));
  } else {
    ASSIGN_OR_RETURN(l->in_qkv,
                     load.Bf16(p + "linear_attn.in_proj_qkv.weight", {c_.conv_dim(), H}));
    ASSIGN_OR_RETURN(l->in_z, load.Bf16(p + "linear_attn.in_proj_z.weight", {c_.value_dim(), H}));
    ASSIGN_OR_RETURN(l->in_b, load.Bf16(p + "linear_attn.in_proj_b.weight", {hv, H}));
    ASSIGN_OR_RETURN(l->in_a, load.Bf16(p + "linear_attn.in_proj_a.weight", {hv, H}));
    // [conv_dim, 1, K] is the [channels][K] layout CausalConv1d takes.
    ASSIGN_OR_RETURN(
        l->conv, load.Bf16(p + "linear_attn.conv1d.weight", {c_.conv_dim(), 1, c_.conv_kernel}));
    ASSIGN_OR_RETURN(l->a_log, load.F32(p + "linear_attn.A_log", {hv}));
    ASSIGN_OR_RETURN(l->dt_bias, load.F32(p + "linear_attn.dt_bias", {hv}));
    ASSIGN_OR_RETURN(l->gdn_norm, load.Bf16(p + "linear_attn.norm.weight", {c_.linear_value_dim}));
    ASSIGN_OR_RETURN(l->gdn_out, load.Bf16(p + "linear_attn.out_proj.weight", {H, c_.value_dim()}));
  }
  ASSIGN_OR_RETURN(l->router, load.F32(p + "mlp.gate.weight", {E, H}));
  ASSIGN_OR_RETURN(l->gate_up, load.Bf16(p + "mlp.experts.gate_up_proj", {E, 2 * I, H}));
  ASSIGN_OR_RETURN(l->down, load.Bf16(p + "mlp.experts.down_proj", {E, H, I}));
  ASSIGN_OR_RETURN(const model::TensorView* sg,
                   ck.Get(p + "mlp.shared_expert.gate_proj.weight", {Is, H}));
  ASSIGN_OR_RETURN(const model::TensorView* su,
                   ck.Get(p + "mlp.shared_expert.up_proj.weight", {Is, H}));
  // Fused [gate | up] rows, the layout SiluGate takes.
  l->shared_gate_up = w.AddBf16({DeviceWeights::All(sg), DeviceWeights::All(su)});
  ASSIGN_OR_RETURN(l->shared_down, load.Bf16(p + "mlp.shared_expert.down_proj.weight", {H, Is}));
  ASSIGN_OR_RETURN(l->shared_scale, load.Bf16(p + "mlp.shared_expert_gate.weight", {1, H}));
  return absl::OkStatus();
}

void CudaQwen35Model::AllocateLayerScratch(ScratchBuffers& scratch) {
  const int64_t R = kMaxRows, C = c_.conv_dim();
  const int64_t kd = c_.key_dim(), vd = c_.value_dim(), hv = c_.linear_value_heads;
  const int64_t qd = c_.num_heads * c_.head_dim, kvd = c_.num_kv_heads * c_.head_dim;
  const int64_t E = c_.num_experts, top = c_.experts_per_token;
  const int64_t I = c_.moe_intermediate, Is = c_.shared_intermediate;
  const bool any_gdn = std::find(c_.full_attention.begin(), c_.full_attention.end(), false) !=
                       c_.full_attention.end();
  const bool any_full = std::find(c_.full_attention.begin(), c_.full_attention.end(), true) !=
                        c_.full_attention.end();
  if (any_gdn) {
    scratch.Allocate(&qkv_, R * C, "GDN qkv");
    scratch.Allocate(&conv_out_, R * C, "GDN conv output");
    scratch.Allocate(&gq_, R * kd, "GDN q");
    scratch.Allocate(&gk_, R * kd, "GDN k");
    scratch.Allocate(&gv_, R * vd, "GDN v");
    scratch.Allocate(&z_, R * vd, "GDN z");
    scratch.Allocate(&a_, R * hv, "GDN a");
    scratch.Allocate(&b_, R * hv, "GDN b");
    scratch.Allocate(&g_, R * hv, "GDN g");
    scratch.Allocate(&beta_, R * hv, "GDN beta");
    scratch.Allocate(&core_, R * vd, "GDN core output");
    scratch.Allocate(&normed_, R * vd, "GDN normed output");
  }
  if (any_full) {
    scratch.Allocate(&q_, R * qd, "attention q");
    scratch.Allocate(&gate_, R * qd, "attention gate");
    scratch.Allocate(&k_, R * kvd, "attention k");
    scratch.Allocate(&v_, R * kvd, "attention v");
    scratch.Allocate(&o_, R * qd, "attention output");
  }
  scratch.Allocate(&router_logits_, R * E, "router logits");
  scratch.Allocate(&route_ids_, R * top, "routed expert ids");
  scratch.Allocate(&route_weights_, R * top, "routed expert weights");
  scratch.Allocate(&moe_scratch_, R * top * I, "MoE scratch");
  scratch.Allocate(&shared_gu_, R * 2 * Is, "shared expert gate|up");
  scratch.Allocate(&shared_act_, R * Is, "shared expert activation");
  scratch.Allocate(&shared_logit_, R, "shared expert gate logit");
}

absl::Status CudaQwen35Model::ForwardLayers(const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden_size;
  const float eps = c_.rms_norm_eps;
  for (const Layer& l : layers_) {
    TANDEM_CUDA_RETURN(RmsNorm(h(), n, H, B(l.input_norm), eps, /*one_plus_weight=*/true, x(), s));
    if (l.full_attention) {
      RETURN_IF_ERROR(Attention(l, p, s));
    } else {
      RETURN_IF_ERROR(GatedDeltaNet(l, p, s));
    }
    TANDEM_CUDA_RETURN(Add(h(), y(), n * H, h(), s));
    TANDEM_CUDA_RETURN(RmsNorm(h(), n, H, B(l.post_norm), eps, /*one_plus_weight=*/true, x(), s));
    RETURN_IF_ERROR(Moe(l, p, s));
    TANDEM_CUDA_RETURN(Add(h(), y(), n * H, h(), s));
  }
  return absl::OkStatus();
}

absl::Status CudaQwen35Model::GatedDeltaNet(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden_size, C = c_.conv_dim();
  const int64_t kh = c_.linear_key_heads, hv = c_.linear_value_heads;
  const int64_t dk = c_.linear_key_dim, dv = c_.linear_value_dim;
  const int64_t kd = c_.key_dim(), vd = c_.value_dim();
  cublasHandle_t cb = cublas();

  TANDEM_CUDA_RETURN(CastToBf16(x(), n * H, xb(), s));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.in_qkv), C, qkv_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.in_z), vd, z_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.in_b), hv, b_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.in_a), hv, a_));

  // Causal depthwise conv (no bias) + silu over the q | k | v channels, then split them.
  RETURN_IF_ERROR(CausalConv(p, l.index, qkv_, B(l.conv), /*bias=*/nullptr, conv_out_, s));
  TANDEM_CUDA_RETURN(CopyColumns(conv_out_, n, C, kd, gq_, kd, s));
  TANDEM_CUDA_RETURN(CopyColumns(conv_out_ + kd, n, C, kd, gk_, kd, s));
  TANDEM_CUDA_RETURN(CopyColumns(conv_out_ + 2 * kd, n, C, vd, gv_, vd, s));
  // L2-normalise q and k per key head (eps 1e-6 inside the rsqrt, as FLA); q also 1/sqrt(dk).
  TANDEM_CUDA_RETURN(
      L2NormScale(gq_, n * kh, dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(dk)), s));
  TANDEM_CUDA_RETURN(L2NormScale(gk_, n * kh, dk, 1e-6f, 1.0f, s));
  TANDEM_CUDA_RETURN(GdnGates(a_, b_, n, hv, F(l.a_log), F(l.dt_bias), g_, beta_, s));

  if (p.decode) {
    TANDEM_CUDA_RETURN(GatedDeltaRuleStep(gq_, gk_, gv_, g_, beta_, n, kh, hv, dk, dv,
                                          DecodeStates(l.index), core_, s));
  } else {
    TANDEM_CUDA_RETURN(GatedDeltaRule(gq_, gk_, gv_, g_, beta_, n, kh, hv, dk, dv,
                                      PrefillState(p, l.index), core_, /*chunked=*/true, s));
  }
  // Gated RMSNorm per (token, value head) over dv: norm (plain weight) times silu(z).
  TANDEM_CUDA_RETURN(
      GatedRmsNorm(core_, z_, n * hv, dv, B(l.gdn_norm), c_.rms_norm_eps, normed_, s));
  return Linear(cb, normed_, n, vd, B(l.gdn_out), H, y(), xb(), s);
}

absl::Status CudaQwen35Model::Attention(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden_size, D = c_.head_dim;
  const int64_t nh = c_.num_heads, nkv = c_.num_kv_heads;
  const float eps = c_.rms_norm_eps;
  cublasHandle_t cb = cublas();

  TANDEM_CUDA_RETURN(CastToBf16(x(), n * H, xb(), s));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.q), nh * D, q_));
  if (c_.attn_output_gate) RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.gate), nh * D, gate_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.k), nkv * D, k_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.v), nkv * D, v_));
  // Per-head (1 + w) RMSNorm, then NeoX RoPE on the first rotary_dim dims.
  TANDEM_CUDA_RETURN(RmsNorm(q_, n * nh, D, B(l.q_norm), eps, /*one_plus_weight=*/true, q_, s));
  TANDEM_CUDA_RETURN(RmsNorm(k_, n * nkv, D, B(l.k_norm), eps, /*one_plus_weight=*/true, k_, s));
  if (p.mrope_positions != nullptr) {
    RETURN_IF_ERROR(MultimodalRope(p, s));
  } else {
    TANDEM_CUDA_RETURN(
        RotaryEmbedding(q_, p.rope_positions, n, nh, D, c_.rotary_dim, c_.rope_theta, s));
    TANDEM_CUDA_RETURN(
        RotaryEmbedding(k_, p.rope_positions, n, nkv, D, c_.rotary_dim, c_.rope_theta, s));
  }
  RETURN_IF_ERROR(CachedAttention(p, l.index, q_, k_, v_, nh, o_, s));
  if (c_.attn_output_gate) TANDEM_CUDA_RETURN(SigmoidMul(o_, gate_, n * nh * D, s));
  return Linear(cb, o_, n, nh * D, B(l.o), H, y(), xb(), s);
}

absl::Status CudaQwen35Model::MultimodalRope(const Pass& p, cudaStream_t s) {
  // Sections [t, h, w] in frequency slots; none: every slot reads t (config comment).
  const int32_t sh = c_.mrope_section.size() == 3 ? c_.mrope_section[1] : 0;
  const int32_t sw = c_.mrope_section.size() == 3 ? c_.mrope_section[2] : 0;
  const int64_t n = p.n, D = c_.head_dim;
  const int64_t nh = c_.num_heads, nkv = c_.num_kv_heads;
  TANDEM_CUDA_RETURN(MropeRotaryEmbedding(q_, p.mrope_positions, p.mrope_stride, n, nh, D,
                                          c_.rotary_dim, c_.rope_theta, sh, sw, s));
  TANDEM_CUDA_RETURN(MropeRotaryEmbedding(k_, p.mrope_positions, p.mrope_stride, n, nkv, D,
                                          c_.rotary_dim, c_.rope_theta, sh, sw, s));
  return absl::OkStatus();
}

absl::Status CudaQwen35Model::Moe(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden_size, E = c_.num_experts, top = c_.experts_per_token;
  const int64_t I = c_.moe_intermediate, Is = c_.shared_intermediate;
  cublasHandle_t cb = cublas();

  // Router in fp32: softmax over the experts, top-k, renormalised.
  RETURN_IF_ERROR(LinearF32(cb, x(), n, H, F(l.router), E, router_logits_));
  TANDEM_CUDA_RETURN(RouteSoftmaxTopK(router_logits_, n, E, top, route_ids_, route_weights_, s));

  // Shared expert, scaled per token by sigmoid(x . shared_expert_gate): y = that, first.
  TANDEM_CUDA_RETURN(CastToBf16(x(), n * H, xb(), s));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.shared_gate_up), 2 * Is, shared_gu_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.shared_scale), 1, shared_logit_));
  TANDEM_CUDA_RETURN(SiluGate(shared_gu_, n, Is, shared_act_, s));
  RETURN_IF_ERROR(Linear(cb, shared_act_, n, Is, B(l.shared_down), H, y(), xb(), s));
  TANDEM_CUDA_RETURN(SigmoidScaleRows(y(), shared_logit_, n, H, y(), s));
  // Routed experts accumulate into y.
  return CudaStatus(MoeExperts(x(), n, H, route_ids_, route_weights_, top, B(l.gate_up), B(l.down),
                               I, /*swiglu=*/true, moe_scratch_, y(), s),
                    "MoeExperts");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaQwen35Moe(const model::Checkpoint& checkpoint,
                                                             const TextConfig& config,
                                                             const model::ModelShape& shape) {
  return LoadHybridModel<CudaQwen35Model>(checkpoint, config, shape);
}

}  // namespace tandem::workers::cuda
