// Qwen3.5-MoE on the device: the math of workers/native/qwen35_moe_model.cc (the fp32 CPU
// reference) sequenced over the kernels of kernels.h, with BF16 weights (fp32 routers) and fp32
// activations and state.
//
// Memory layouts (all fp32):
//  - State slot (one sequence, bytes = state_slot_bytes()): for each Gated DeltaNet layer i, in
//    layer order, at i * layer_floats: the conv window [conv_dim][K-1] (padded to 64 floats),
//    then the delta-rule state [Hv][dk][dv] (padded to 64 floats).
//  - KV pool (bytes = blocks * kv_block_bytes()): layer-major. Full-attention layer j owns the
//    contiguous region j * blocks * B .. (j + 1) * blocks * B floats, B = 2 * kKvBlockTokens *
//    kv_heads * head_dim, laid out [block][2][kKvBlockTokens][kv_heads][head_dim] as kernels.h
//    describes. So block b of a sequence is b's sub-block in every layer's region (a block's
//    bytes are not contiguous in the pool; the engine treats blocks as ids only).

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/cuda/cuda_model.h"
#include "workers/cuda/gemm.h"
#include "workers/cuda/kernels.h"
#include "workers/cuda/kernels_model.h"
#include "workers/cuda/model_common.h"
#include "workers/native/qwen35_moe_config.h"

namespace tandem::workers::cuda {
namespace {

using native::qwen35::TextConfig;

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

// One forward pass: n tokens, either consecutive tokens of one sequence (prefill) or one token
// of each of n sequences (decode).
struct Pass {
  int64_t n = 0;
  const int32_t* positions = nullptr;  // device [n]
  bool decode = false;
  // Prefill: the first token's position, the sequence's block table and state slot.
  int64_t start = 0;
  const int32_t* block_table = nullptr;
  float* slot = nullptr;
  // Decode: [n][max_blocks] block tables.
  const int32_t* block_tables = nullptr;
  int64_t max_blocks = 0;
};

class CudaQwen35Model : public CudaModel {
 public:
  CudaQwen35Model(TextConfig config, native::ModelShape shape)
      : c_(std::move(config)), shape_(std::move(shape)) {}

  absl::Status Init(const native::Checkpoint& checkpoint);

  const native::ModelShape& shape() const override { return shape_; }
  int64_t state_slot_bytes() const override { return slot_floats_ * 4; }
  int64_t kv_block_bytes() const override { return num_full_ * kv_layer_block_floats_ * 4; }
  int64_t weight_bytes() const override { return w_.bytes(); }
  absl::Status BindMemory(void* state_slots, int64_t slots, void* kv_blocks,
                          int64_t blocks) override;
  absl::Status ResetSlot(int32_t slot, cudaStream_t stream) override;
  absl::Status Prefill(const int32_t* tokens, int64_t count, int64_t start, const SequenceSlot& seq,
                       float* logits, cudaStream_t stream) override;
  absl::Status Decode(const DecodeBatch& batch, cudaStream_t stream) override;

 private:
  absl::Status LoadWeights(const native::Checkpoint& checkpoint);
  absl::Status AllocateScratch();
  // Embedding, every layer; leaves the residual stream in h_.
  absl::Status Forward(const int32_t* tokens, const Pass& p, cudaStream_t s);
  // x_ -> y_ for the pass's rows.
  absl::Status GatedDeltaNet(const Layer& l, const Pass& p, cudaStream_t s);
  absl::Status Attention(const Layer& l, const Pass& p, cudaStream_t s);
  absl::Status Moe(const Layer& l, const Pass& p, cudaStream_t s);
  // Final norm and lm_head of h_ rows [first, first + rows) into logits [rows][vocab].
  absl::Status Logits(int64_t first, int64_t rows, float* logits, cudaStream_t s);

  float* KvRegion(const Layer& l) const {
    return kv_base_ + l.index * kv_blocks_ * kv_layer_block_floats_;
  }
  const bf16* B(int id) const { return w_.bf16_ptr(id); }
  const float* F(int id) const { return w_.f32_ptr(id); }

  const TextConfig c_;
  const native::ModelShape shape_;
  int64_t num_full_ = 0, num_gdn_ = 0;
  std::vector<Layer> layers_;
  int embed_ = -1, lm_head_ = -1, final_norm_ = -1;
  DeviceWeights w_;
  CublasContext cublas_;

  // Pool geometry (floats).
  int64_t conv_floats_ = 0;   // one GDN layer's conv window, padded
  int64_t layer_floats_ = 0;  // one GDN layer's conv window + delta state, padded
  int64_t slot_floats_ = 0;
  int64_t kv_layer_block_floats_ = 0;
  // Bound pools.
  bool bound_ = false;
  float* state_base_ = nullptr;
  int64_t slots_ = 0;
  float* kv_base_ = nullptr;
  int64_t kv_blocks_ = 0;

  // Scratch, kMaxRows rows each (see AllocateScratch).
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  float *h_ = nullptr, *x_ = nullptr, *y_ = nullptr;
  bf16* xb_ = nullptr;
  int32_t *tokens_ = nullptr, *positions_ = nullptr;
  float *qkv_ = nullptr, *conv_out_ = nullptr, *gq_ = nullptr, *gk_ = nullptr, *gv_ = nullptr;
  float *z_ = nullptr, *a_ = nullptr, *b_ = nullptr, *g_ = nullptr, *beta_ = nullptr;
  float *core_ = nullptr, *normed_ = nullptr;
  float *q_ = nullptr, *gate_ = nullptr, *k_ = nullptr, *v_ = nullptr, *o_ = nullptr;
  float *router_logits_ = nullptr, *route_weights_ = nullptr, *moe_scratch_ = nullptr;
  int32_t* route_ids_ = nullptr;
  float *shared_gu_ = nullptr, *shared_act_ = nullptr, *shared_logit_ = nullptr;
  // Decode indexing: [num_gdn][kMaxDecodeBatch] state pointers and [kMaxDecodeBatch] lengths.
  float** conv_ptrs_ = nullptr;
  float** ssm_ptrs_ = nullptr;
  int32_t* context_lens_ = nullptr;
};

absl::Status CudaQwen35Model::Init(const native::Checkpoint& checkpoint) {
  const int64_t K = c_.conv_kernel;
  conv_floats_ = AlignFloats(c_.conv_dim() * (K - 1));
  layer_floats_ =
      conv_floats_ + AlignFloats(c_.linear_value_heads * c_.linear_key_dim * c_.linear_value_dim);
  kv_layer_block_floats_ = 2 * kKvBlockTokens * c_.num_kv_heads * c_.head_dim;
  RETURN_IF_ERROR(LoadWeights(checkpoint));
  slot_floats_ = num_gdn_ * layer_floats_;
  RETURN_IF_ERROR(w_.Upload());
  RETURN_IF_ERROR(cublas_.Init());
  return AllocateScratch();
}

absl::Status CudaQwen35Model::LoadWeights(const native::Checkpoint& ck) {
  using Rows = DeviceWeights::Rows;
  const int64_t H = c_.hidden_size;
  auto get = [&](const std::string& name,
                 std::vector<int64_t> shape) -> absl::StatusOr<const native::TensorView*> {
    return ck.Get(name, shape);
  };
  auto bf16 = [&](const std::string& name, std::vector<int64_t> shape) -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(const native::TensorView* t, get(name, std::move(shape)));
    return w_.AddBf16({DeviceWeights::All(t)});
  };
  auto f32 = [&](const std::string& name, std::vector<int64_t> shape) -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(const native::TensorView* t, get(name, std::move(shape)));
    return w_.AddF32({DeviceWeights::All(t)});
  };

  // As the CPU reference: model.language_model. in the composite checkpoint, else model.
  std::string prefix = "model.language_model.";
  if (!ck.Has(prefix + "embed_tokens.weight") && ck.Has("model.embed_tokens.weight")) {
    prefix = "model.";
  }
  ASSIGN_OR_RETURN(embed_, bf16(prefix + "embed_tokens.weight", {c_.vocab_size, H}));
  if (c_.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    ASSIGN_OR_RETURN(lm_head_, bf16("lm_head.weight", {c_.vocab_size, H}));
  }
  ASSIGN_OR_RETURN(final_norm_, bf16(prefix + "norm.weight", {H}));

  const int64_t hv = c_.linear_value_heads, D = c_.head_dim, nh = c_.num_heads;
  const int64_t q_stride = D * (c_.attn_output_gate ? 2 : 1);
  const int64_t kv_rows = c_.num_kv_heads * D;
  const int64_t E = c_.num_experts, I = c_.moe_intermediate, Is = c_.shared_intermediate;
  layers_.resize(c_.num_layers);
  for (int64_t i = 0; i < c_.num_layers; ++i) {
    Layer& l = layers_[i];
    const std::string p = absl::StrCat(prefix, "layers.", i, ".");
    l.full_attention = c_.full_attention[i];
    l.index = l.full_attention ? num_full_++ : num_gdn_++;
    ASSIGN_OR_RETURN(l.input_norm, bf16(p + "input_layernorm.weight", {H}));
    ASSIGN_OR_RETURN(l.post_norm, bf16(p + "post_attention_layernorm.weight", {H}));
    if (l.full_attention) {
      ASSIGN_OR_RETURN(const native::TensorView* q,
                       get(p + "self_attn.q_proj.weight", {nh * q_stride, H}));
      std::vector<Rows> q_rows, gate_rows;
      for (int64_t h = 0; h < nh; ++h) {
        q_rows.push_back(Rows{.view = q, .row_begin = h * q_stride, .rows = D});
        gate_rows.push_back(Rows{.view = q, .row_begin = h * q_stride + D, .rows = D});
      }
      l.q = w_.AddBf16(std::move(q_rows));
      if (c_.attn_output_gate) l.gate = w_.AddBf16(std::move(gate_rows));
      ASSIGN_OR_RETURN(l.k, bf16(p + "self_attn.k_proj.weight", {kv_rows, H}));
      ASSIGN_OR_RETURN(l.v, bf16(p + "self_attn.v_proj.weight", {kv_rows, H}));
      ASSIGN_OR_RETURN(l.o, bf16(p + "self_attn.o_proj.weight", {H, nh * D}));
      ASSIGN_OR_RETURN(l.q_norm, bf16(p + "self_attn.q_norm.weight", {D}));
      ASSIGN_OR_RETURN(l.k_norm, bf16(p + "self_attn.k_norm.weight", {D}));
    } else {
      ASSIGN_OR_RETURN(l.in_qkv, bf16(p + "linear_attn.in_proj_qkv.weight", {c_.conv_dim(), H}));
      ASSIGN_OR_RETURN(l.in_z, bf16(p + "linear_attn.in_proj_z.weight", {c_.value_dim(), H}));
      ASSIGN_OR_RETURN(l.in_b, bf16(p + "linear_attn.in_proj_b.weight", {hv, H}));
      ASSIGN_OR_RETURN(l.in_a, bf16(p + "linear_attn.in_proj_a.weight", {hv, H}));
      // [conv_dim, 1, K] is the [channels][K] layout CausalConv1d takes.
      ASSIGN_OR_RETURN(l.conv,
                       bf16(p + "linear_attn.conv1d.weight", {c_.conv_dim(), 1, c_.conv_kernel}));
      ASSIGN_OR_RETURN(l.a_log, f32(p + "linear_attn.A_log", {hv}));
      ASSIGN_OR_RETURN(l.dt_bias, f32(p + "linear_attn.dt_bias", {hv}));
      ASSIGN_OR_RETURN(l.gdn_norm, bf16(p + "linear_attn.norm.weight", {c_.linear_value_dim}));
      ASSIGN_OR_RETURN(l.gdn_out, bf16(p + "linear_attn.out_proj.weight", {H, c_.value_dim()}));
    }
    ASSIGN_OR_RETURN(l.router, f32(p + "mlp.gate.weight", {E, H}));
    ASSIGN_OR_RETURN(l.gate_up, bf16(p + "mlp.experts.gate_up_proj", {E, 2 * I, H}));
    ASSIGN_OR_RETURN(l.down, bf16(p + "mlp.experts.down_proj", {E, H, I}));
    ASSIGN_OR_RETURN(const native::TensorView* sg,
                     get(p + "mlp.shared_expert.gate_proj.weight", {Is, H}));
    ASSIGN_OR_RETURN(const native::TensorView* su,
                     get(p + "mlp.shared_expert.up_proj.weight", {Is, H}));
    // Fused [gate | up] rows, the layout SiluGate takes.
    l.shared_gate_up = w_.AddBf16({DeviceWeights::All(sg), DeviceWeights::All(su)});
    ASSIGN_OR_RETURN(l.shared_down, bf16(p + "mlp.shared_expert.down_proj.weight", {H, Is}));
    ASSIGN_OR_RETURN(l.shared_scale, bf16(p + "mlp.shared_expert_gate.weight", {1, H}));
  }
  return absl::OkStatus();
}

absl::Status CudaQwen35Model::AllocateScratch() {
  const int64_t R = kMaxRows, H = c_.hidden_size, C = c_.conv_dim();
  const int64_t kd = c_.key_dim(), vd = c_.value_dim(), hv = c_.linear_value_heads;
  const int64_t qd = c_.num_heads * c_.head_dim, kvd = c_.num_kv_heads * c_.head_dim;
  const int64_t E = c_.num_experts, top = c_.experts_per_token;
  const int64_t I = c_.moe_intermediate, Is = c_.shared_intermediate;
  const int64_t max_in = std::max({H, vd, qd, Is});
  absl::Status st;
  auto alloc = [&](auto** out, int64_t count, const char* what) {
    if (!st.ok()) return;
    buffers_.push_back(std::make_unique<DeviceBuffer>());
    st = buffers_.back()->Allocate(count * static_cast<int64_t>(sizeof(**out)), what);
    using T = std::remove_reference_t<decltype(**out)>;
    *out = buffers_.back()->as<T>();
  };
  alloc(&h_, R * H, "hidden states");
  alloc(&x_, R * H, "normed hidden states");
  alloc(&y_, R * H, "mixer output");
  alloc(&xb_, R * max_in, "bf16 linear inputs");
  alloc(&tokens_, R, "prefill tokens");
  alloc(&positions_, R, "prefill positions");
  if (num_gdn_ > 0) {
    alloc(&qkv_, R * C, "GDN qkv");
    alloc(&conv_out_, R * C, "GDN conv output");
    alloc(&gq_, R * kd, "GDN q");
    alloc(&gk_, R * kd, "GDN k");
    alloc(&gv_, R * vd, "GDN v");
    alloc(&z_, R * vd, "GDN z");
    alloc(&a_, R * hv, "GDN a");
    alloc(&b_, R * hv, "GDN b");
    alloc(&g_, R * hv, "GDN g");
    alloc(&beta_, R * hv, "GDN beta");
    alloc(&core_, R * vd, "GDN core output");
    alloc(&normed_, R * vd, "GDN normed output");
  }
  if (num_full_ > 0) {
    alloc(&q_, R * qd, "attention q");
    alloc(&gate_, R * qd, "attention gate");
    alloc(&k_, R * kvd, "attention k");
    alloc(&v_, R * kvd, "attention v");
    alloc(&o_, R * qd, "attention output");
  }
  alloc(&router_logits_, R * E, "router logits");
  alloc(&route_ids_, R * top, "routed expert ids");
  alloc(&route_weights_, R * top, "routed expert weights");
  alloc(&moe_scratch_, R * top * I, "MoE scratch");
  alloc(&shared_gu_, R * 2 * Is, "shared expert gate|up");
  alloc(&shared_act_, R * Is, "shared expert activation");
  alloc(&shared_logit_, R, "shared expert gate logit");
  alloc(&conv_ptrs_, std::max<int64_t>(num_gdn_, 1) * kMaxDecodeBatch, "decode conv pointers");
  alloc(&ssm_ptrs_, std::max<int64_t>(num_gdn_, 1) * kMaxDecodeBatch, "decode state pointers");
  alloc(&context_lens_, kMaxDecodeBatch, "decode context lengths");
  return st;
}

absl::Status CudaQwen35Model::BindMemory(void* state_slots, int64_t slots, void* kv_blocks,
                                         int64_t blocks) {
  if (slots < 0 || blocks < 0) {
    return absl::InvalidArgumentError("qwen3_5_moe BindMemory: negative pool size");
  }
  if ((slot_floats_ > 0 && slots > 0 && state_slots == nullptr) ||
      (kv_block_bytes() > 0 && blocks > 0 && kv_blocks == nullptr)) {
    return absl::InvalidArgumentError("qwen3_5_moe BindMemory: null pool");
  }
  state_base_ = static_cast<float*>(state_slots);
  slots_ = slots;
  kv_base_ = static_cast<float*>(kv_blocks);
  kv_blocks_ = blocks;
  bound_ = true;
  return absl::OkStatus();
}

absl::Status CudaQwen35Model::ResetSlot(int32_t slot, cudaStream_t stream) {
  if (!bound_) return absl::FailedPreconditionError("qwen3_5_moe: BindMemory first");
  if (slot < 0 || slot >= slots_) {
    return absl::InvalidArgumentError(
        absl::StrCat("qwen3_5_moe ResetSlot: slot ", slot, " outside [0, ", slots_, ")"));
  }
  if (slot_floats_ == 0) return absl::OkStatus();
  TANDEM_CUDA_RETURN(cudaMemsetAsync(state_base_ + slot * slot_floats_, 0,
                                     static_cast<size_t>(slot_floats_ * 4), stream));
  return absl::OkStatus();
}

absl::Status CudaQwen35Model::Forward(const int32_t* tokens, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden_size;
  const float eps = c_.rms_norm_eps;
  TANDEM_CUDA_RETURN(EmbeddingGather(B(embed_), tokens, n, H, h_, s));
  for (const Layer& l : layers_) {
    TANDEM_CUDA_RETURN(RmsNorm(h_, n, H, B(l.input_norm), eps, /*one_plus_weight=*/true, x_, s));
    if (l.full_attention) {
      RETURN_IF_ERROR(Attention(l, p, s));
    } else {
      RETURN_IF_ERROR(GatedDeltaNet(l, p, s));
    }
    TANDEM_CUDA_RETURN(Add(h_, y_, n * H, h_, s));
    TANDEM_CUDA_RETURN(RmsNorm(h_, n, H, B(l.post_norm), eps, /*one_plus_weight=*/true, x_, s));
    RETURN_IF_ERROR(Moe(l, p, s));
    TANDEM_CUDA_RETURN(Add(h_, y_, n * H, h_, s));
  }
  return absl::OkStatus();
}

absl::Status CudaQwen35Model::GatedDeltaNet(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden_size, C = c_.conv_dim(), K = c_.conv_kernel;
  const int64_t kh = c_.linear_key_heads, hv = c_.linear_value_heads;
  const int64_t dk = c_.linear_key_dim, dv = c_.linear_value_dim;
  const int64_t kd = c_.key_dim(), vd = c_.value_dim();
  cublasHandle_t cb = cublas_.handle();

  TANDEM_CUDA_RETURN(CastToBf16(x_, n * H, xb_, s));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.in_qkv), C, qkv_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.in_z), vd, z_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.in_b), hv, b_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.in_a), hv, a_));

  // Causal depthwise conv (no bias) + silu over the q | k | v channels, then split them.
  float* conv_state = p.decode ? nullptr : p.slot + l.index * layer_floats_;
  if (p.decode) {
    TANDEM_CUDA_RETURN(CausalConv1dStep(qkv_, n, C, K, B(l.conv), nullptr,
                                        conv_ptrs_ + l.index * kMaxDecodeBatch,
                                        /*silu=*/true, conv_out_, s));
  } else {
    TANDEM_CUDA_RETURN(
        CausalConv1d(qkv_, n, C, K, B(l.conv), nullptr, conv_state, /*silu=*/true, conv_out_, s));
  }
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
                                          ssm_ptrs_ + l.index * kMaxDecodeBatch, core_, s));
  } else {
    TANDEM_CUDA_RETURN(GatedDeltaRule(gq_, gk_, gv_, g_, beta_, n, kh, hv, dk, dv,
                                      conv_state + conv_floats_, core_, /*chunked=*/true, s));
  }
  // Gated RMSNorm per (token, value head) over dv: norm (plain weight) times silu(z).
  TANDEM_CUDA_RETURN(
      GatedRmsNorm(core_, z_, n * hv, dv, B(l.gdn_norm), c_.rms_norm_eps, normed_, s));
  return Linear(cb, normed_, n, vd, B(l.gdn_out), H, y_, xb_, s);
}

absl::Status CudaQwen35Model::Attention(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden_size, D = c_.head_dim;
  const int64_t nh = c_.num_heads, nkv = c_.num_kv_heads;
  const float eps = c_.rms_norm_eps;
  cublasHandle_t cb = cublas_.handle();

  TANDEM_CUDA_RETURN(CastToBf16(x_, n * H, xb_, s));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.q), nh * D, q_));
  if (c_.attn_output_gate) RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.gate), nh * D, gate_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.k), nkv * D, k_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.v), nkv * D, v_));
  // Per-head (1 + w) RMSNorm, then NeoX RoPE on the first rotary_dim dims.
  TANDEM_CUDA_RETURN(RmsNorm(q_, n * nh, D, B(l.q_norm), eps, /*one_plus_weight=*/true, q_, s));
  TANDEM_CUDA_RETURN(RmsNorm(k_, n * nkv, D, B(l.k_norm), eps, /*one_plus_weight=*/true, k_, s));
  TANDEM_CUDA_RETURN(RotaryEmbedding(q_, p.positions, n, nh, D, c_.rotary_dim, c_.rope_theta, s));
  TANDEM_CUDA_RETURN(RotaryEmbedding(k_, p.positions, n, nkv, D, c_.rotary_dim, c_.rope_theta, s));

  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  float* kv = KvRegion(l);
  if (p.decode) {
    TANDEM_CUDA_RETURN(
        KvCacheWriteBatch(k_, v_, n, p.positions, nkv, D, p.block_tables, p.max_blocks, kv, s));
    TANDEM_CUDA_RETURN(AttentionDecode(q_, n, nh, nkv, D, scale, context_lens_, p.block_tables,
                                       p.max_blocks, kv, o_, s));
  } else {
    TANDEM_CUDA_RETURN(KvCacheWrite(k_, v_, n, p.start, nkv, D, p.block_table, kv, s));
    TANDEM_CUDA_RETURN(
        AttentionPrefill(q_, n, p.start, nh, nkv, D, scale, p.block_table, kv, o_, s));
  }
  if (c_.attn_output_gate) TANDEM_CUDA_RETURN(SigmoidMul(o_, gate_, n * nh * D, s));
  return Linear(cb, o_, n, nh * D, B(l.o), H, y_, xb_, s);
}

absl::Status CudaQwen35Model::Moe(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden_size, E = c_.num_experts, top = c_.experts_per_token;
  const int64_t I = c_.moe_intermediate, Is = c_.shared_intermediate;
  cublasHandle_t cb = cublas_.handle();

  // Router in fp32: softmax over the experts, top-k, renormalised.
  RETURN_IF_ERROR(LinearF32(cb, x_, n, H, F(l.router), E, router_logits_));
  TANDEM_CUDA_RETURN(RouteSoftmaxTopK(router_logits_, n, E, top, route_ids_, route_weights_, s));

  // Shared expert, scaled per token by sigmoid(x . shared_expert_gate): y = that, first.
  TANDEM_CUDA_RETURN(CastToBf16(x_, n * H, xb_, s));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.shared_gate_up), 2 * Is, shared_gu_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.shared_scale), 1, shared_logit_));
  TANDEM_CUDA_RETURN(SiluGate(shared_gu_, n, Is, shared_act_, s));
  RETURN_IF_ERROR(Linear(cb, shared_act_, n, Is, B(l.shared_down), H, y_, xb_, s));
  TANDEM_CUDA_RETURN(SigmoidScaleRows(y_, shared_logit_, n, H, y_, s));
  // Routed experts accumulate into y.
  return CudaStatus(MoeExperts(x_, n, H, route_ids_, route_weights_, top, B(l.gate_up), B(l.down),
                               I, /*swiglu=*/true, moe_scratch_, y_, s),
                    "MoeExperts");
}

absl::Status CudaQwen35Model::Logits(int64_t first, int64_t rows, float* logits, cudaStream_t s) {
  const int64_t H = c_.hidden_size;
  TANDEM_CUDA_RETURN(RmsNorm(h_ + first * H, rows, H, B(final_norm_), c_.rms_norm_eps,
                             /*one_plus_weight=*/true, x_, s));
  return Linear(cublas_.handle(), x_, rows, H, B(lm_head_), c_.vocab_size, logits, xb_, s);
}

absl::Status CudaQwen35Model::Prefill(const int32_t* tokens, int64_t count, int64_t start,
                                      const SequenceSlot& seq, float* logits, cudaStream_t stream) {
  if (!bound_) return absl::FailedPreconditionError("qwen3_5_moe: BindMemory first");
  if (tokens == nullptr || count <= 0 || logits == nullptr) {
    return absl::InvalidArgumentError("qwen3_5_moe Prefill: no tokens or no logits buffer");
  }
  if (start < 0 || start + count > c_.max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("qwen3_5_moe Prefill: positions ", start, "..", start + count - 1,
                     " outside max_position_embeddings ", c_.max_positions));
  }
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("qwen3_5_moe Prefill: token ", i, " has id ",
                                                     tokens[i], ", outside [0, ", c_.vocab_size,
                                                     ")"));
    }
  }
  if (num_gdn_ > 0 && (seq.state_slot < 0 || seq.state_slot >= slots_)) {
    return absl::InvalidArgumentError(absl::StrCat("qwen3_5_moe Prefill: state slot ",
                                                   seq.state_slot, " outside [0, ", slots_, ")"));
  }
  if (num_full_ > 0 && (seq.block_table == nullptr ||
                        static_cast<int64_t>(seq.blocks.size()) * kKvBlockTokens < start + count)) {
    return absl::InvalidArgumentError(absl::StrCat("qwen3_5_moe Prefill: ", seq.blocks.size(),
                                                   " KV blocks do not cover ", start + count,
                                                   " tokens"));
  }
  RETURN_IF_ERROR(cublas_.Bind(stream));
  float* slot = num_gdn_ > 0 ? state_base_ + seq.state_slot * slot_floats_ : nullptr;
  int64_t last_rows = 0;
  for (int64_t c0 = 0; c0 < count; c0 += kMaxPrefillChunk) {
    const int64_t n = std::min(kMaxPrefillChunk, count - c0);
    // Stream-ordered after the previous chunk's reads of tokens_.
    TANDEM_CUDA_RETURN(cudaMemcpyAsync(tokens_, tokens + c0, static_cast<size_t>(n * 4),
                                       cudaMemcpyHostToDevice, stream));
    TANDEM_CUDA_RETURN(FillPositions(positions_, n, start + c0, stream));
    Pass p;
    p.n = n;
    p.positions = positions_;
    p.start = start + c0;
    p.block_table = seq.block_table;
    p.slot = slot;
    RETURN_IF_ERROR(Forward(tokens_, p, stream));
    last_rows = n;
  }
  RETURN_IF_ERROR(Logits(last_rows - 1, 1, logits, stream));
  // The host token array must outlive the copies; also surfaces asynchronous errors here.
  TANDEM_CUDA_RETURN(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status CudaQwen35Model::Decode(const DecodeBatch& batch, cudaStream_t stream) {
  if (!bound_) return absl::FailedPreconditionError("qwen3_5_moe: BindMemory first");
  if (batch.batch <= 0 || batch.batch > kMaxDecodeBatch) {
    return absl::InvalidArgumentError(absl::StrCat("qwen3_5_moe Decode: batch ", batch.batch,
                                                   " outside [1, ", kMaxDecodeBatch, "]"));
  }
  if (batch.tokens == nullptr || batch.positions == nullptr || batch.logits == nullptr ||
      (num_gdn_ > 0 && batch.state_slots == nullptr) ||
      (num_full_ > 0 && (batch.block_tables == nullptr || batch.max_blocks <= 0))) {
    return absl::InvalidArgumentError("qwen3_5_moe Decode: missing batch arrays");
  }
  RETURN_IF_ERROR(cublas_.Bind(stream));
  TANDEM_CUDA_RETURN(BuildDecodeIndex(
      batch.state_slots, batch.positions, batch.batch, state_base_, slot_floats_, layer_floats_,
      conv_floats_, num_gdn_, kMaxDecodeBatch, conv_ptrs_, ssm_ptrs_, context_lens_, stream));
  Pass p;
  p.n = batch.batch;
  p.positions = batch.positions;
  p.decode = true;
  p.block_tables = batch.block_tables;
  p.max_blocks = batch.max_blocks;
  RETURN_IF_ERROR(Forward(batch.tokens, p, stream));
  return Logits(0, batch.batch, batch.logits, stream);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaQwen35Moe(const native::Checkpoint& checkpoint,
                                                             const nlohmann::json& config) {
  auto parsed = native::qwen35::ParseConfig(config);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(checkpoint.dir(), ": ", parsed.status().message()));
  }
  const TextConfig& c = *parsed;
  // The same ModelShape the CPU reference reports.
  int64_t full = 0;
  for (bool f : c.full_attention) full += f ? 1 : 0;
  const int64_t gdn = c.num_layers - full;
  native::ModelShape shape;
  shape.architecture = "qwen3_5_moe";
  shape.vocab_size = static_cast<int32_t>(c.vocab_size);
  shape.hidden_size = static_cast<int32_t>(c.hidden_size);
  shape.num_layers = static_cast<int32_t>(c.num_layers);
  shape.max_positions = static_cast<int32_t>(c.max_positions);
  shape.kv_bytes_per_token = full * 2 * c.num_kv_heads * c.head_dim * 4;
  shape.state_bytes = gdn *
                      ((c.conv_kernel - 1) * c.conv_dim() +
                       c.linear_value_heads * c.linear_key_dim * c.linear_value_dim) *
                      4;
  shape.eos_token_ids = c.eos_token_ids;
  auto model = std::make_unique<CudaQwen35Model>(c, std::move(shape));
  RETURN_IF_ERROR(model->Init(checkpoint));
  return std::unique_ptr<CudaModel>(std::move(model));
}

}  // namespace tandem::workers::cuda
