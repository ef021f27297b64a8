// Nemotron-H on the device: the math of workers/native/nemotron_h_model.cc (the fp32 CPU
// reference) sequenced over the kernels of kernels.h, with BF16 weights (fp32 router, A, D,
// dt_bias and correction bias) and fp32 activations and state.
//
// Memory layouts (all fp32):
//  - State slot (one sequence, bytes = state_slot_bytes()): for each Mamba layer i, in layer
//    order, at i * layer_floats: the conv window [conv_dim][K-1] (padded to 64 floats), then the
//    SSM state [heads][head_dim][state_size] (padded to 64 floats).
//  - KV pool (bytes = blocks * kv_block_bytes()): layer-major, as in cuda_qwen35_model.cc:
//    attention layer j owns floats j * blocks * B .. (j + 1) * blocks * B, B = 2 *
//    kKvBlockTokens * kv_heads * head_dim, laid out [block][2][kKvBlockTokens][kv_heads]
//    [head_dim].

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
#include "workers/native/nemotron_h_config.h"

namespace tandem::workers::cuda {
namespace {

using native::nemotron_h::Config;
using native::nemotron_h::LayerKind;

// Chunk length of the chunked SSD prefill (the result does not depend on it beyond rounding).
constexpr int64_t kSsdChunk = 64;

// Piece ids in DeviceWeights (-1: absent).
struct Layer {
  LayerKind kind = LayerKind::kMamba;
  int64_t index = 0;  // among the layers of its kind: state piece or KV region
  int norm = -1;
  // Mamba-2: in_proj's z | xBC | dt row ranges as three pieces.
  int in_z = -1, in_xbc = -1, in_dt = -1, conv_w = -1, conv_b = -1;
  int dt_bias = -1, a = -1, d = -1;  // fp32; a = -exp(A_log)
  int m_norm = -1, out_proj = -1;
  // Attention.
  int q = -1, k = -1, v = -1, o = -1;
  // MoE (router and bias fp32) and the dense MLP.
  int router = -1, router_bias = -1, experts_up = -1, experts_down = -1;
  int shared_up = -1, shared_down = -1;
  int mlp_up = -1, mlp_down = -1;
};

// One forward pass: see cuda_qwen35_model.cc.
struct Pass {
  int64_t n = 0;
  const int32_t* positions = nullptr;
  bool decode = false;
  int64_t start = 0;
  const int32_t* block_table = nullptr;
  float* slot = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t max_blocks = 0;
};

class CudaNemotronHModel : public CudaModel {
 public:
  CudaNemotronHModel(Config config, native::ModelShape shape)
      : c_(std::move(config)), shape_(std::move(shape)) {}

  absl::Status Init(const native::Checkpoint& checkpoint);

  const native::ModelShape& shape() const override { return shape_; }
  int64_t state_slot_bytes() const override { return slot_floats_ * 4; }
  int64_t kv_block_bytes() const override { return num_attn_ * kv_layer_block_floats_ * 4; }
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
  absl::Status Forward(const int32_t* tokens, const Pass& p, cudaStream_t s);
  // x_ -> y_ for the pass's rows.
  absl::Status Mamba(const Layer& l, const Pass& p, cudaStream_t s);
  absl::Status Attention(const Layer& l, const Pass& p, cudaStream_t s);
  absl::Status Moe(const Layer& l, const Pass& p, cudaStream_t s);
  // y_ = down(relu(up(x_))^2).
  absl::Status Mlp(int up, int down, int64_t inter, int64_t n, cudaStream_t s);
  absl::Status Logits(int64_t first, int64_t rows, float* logits, cudaStream_t s);

  float* KvRegion(const Layer& l) const {
    return kv_base_ + l.index * kv_blocks_ * kv_layer_block_floats_;
  }
  const bf16* B(int id) const { return w_.bf16_ptr(id); }
  const float* F(int id) const { return w_.f32_ptr(id); }

  const Config c_;
  const native::ModelShape shape_;
  int64_t num_mamba_ = 0, num_attn_ = 0;
  std::vector<Layer> layers_;
  int embed_ = -1, lm_head_ = -1, norm_f_ = -1;
  DeviceWeights w_;
  CublasContext cublas_;

  int64_t conv_floats_ = 0, layer_floats_ = 0, slot_floats_ = 0, kv_layer_block_floats_ = 0;
  bool bound_ = false;
  float* state_base_ = nullptr;
  int64_t slots_ = 0;
  float* kv_base_ = nullptr;
  int64_t kv_blocks_ = 0;

  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  float *h_ = nullptr, *x_ = nullptr, *y_ = nullptr;
  bf16* xb_ = nullptr;
  int32_t *tokens_ = nullptr, *positions_ = nullptr;
  // Mamba.
  float *z_ = nullptr, *xbc_ = nullptr, *dt_raw_ = nullptr, *conv_out_ = nullptr;
  float *xs_ = nullptr, *bs_ = nullptr, *cs_ = nullptr, *dt_ = nullptr, *ys_ = nullptr;
  float* normed_ = nullptr;
  // Attention.
  float *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *o_ = nullptr;
  // MoE / MLP.
  float *router_logits_ = nullptr, *route_weights_ = nullptr, *moe_scratch_ = nullptr;
  int32_t* route_ids_ = nullptr;
  float* mid_ = nullptr;
  // Decode indexing.
  float** conv_ptrs_ = nullptr;
  float** ssm_ptrs_ = nullptr;
  int32_t* context_lens_ = nullptr;
};

absl::Status CudaNemotronHModel::Init(const native::Checkpoint& checkpoint) {
  if (c_.Has(LayerKind::kMoe) && !c_.norm_topk) {
    return absl::UnimplementedError(absl::StrCat(
        checkpoint.dir(), ": norm_topk_prob false is not supported by the CUDA engine"));
  }
  conv_floats_ = AlignFloats(c_.conv_dim() * (c_.conv_kernel - 1));
  layer_floats_ = conv_floats_ + AlignFloats(c_.m_heads * c_.m_head_dim * c_.state);
  kv_layer_block_floats_ = 2 * kKvBlockTokens * c_.kv_heads * c_.head_dim;
  RETURN_IF_ERROR(LoadWeights(checkpoint));
  slot_floats_ = num_mamba_ * layer_floats_;
  RETURN_IF_ERROR(w_.Upload());
  RETURN_IF_ERROR(cublas_.Init());
  return AllocateScratch();
}

absl::Status CudaNemotronHModel::LoadWeights(const native::Checkpoint& ck) {
  using Rows = DeviceWeights::Rows;
  const int64_t h = c_.hidden;
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

  // Some NVIDIA remote-code exports name the embedding in the singular (as the CPU reference).
  const std::string embed_name =
      !ck.Has("backbone.embeddings.weight") && ck.Has("backbone.embedding.weight")
          ? "backbone.embedding.weight"
          : "backbone.embeddings.weight";
  ASSIGN_OR_RETURN(embed_, bf16(embed_name, {c_.vocab, h}));
  ASSIGN_OR_RETURN(norm_f_, bf16("backbone.norm_f.weight", {h}));
  if (c_.tie_embeddings) {
    lm_head_ = embed_;
  } else {
    ASSIGN_OR_RETURN(lm_head_, bf16("lm_head.weight", {c_.vocab, h}));
  }

  int64_t counts[4] = {0, 0, 0, 0};
  layers_.resize(c_.kinds.size());
  for (size_t i = 0; i < c_.kinds.size(); ++i) {
    Layer& l = layers_[i];
    l.kind = c_.kinds[i];
    l.index = counts[static_cast<int>(l.kind)]++;
    const std::string p = absl::StrCat("backbone.layers.", i, ".");
    const std::string m = p + "mixer.";
    ASSIGN_OR_RETURN(l.norm, bf16(p + "norm.weight", {h}));
    switch (l.kind) {
      case LayerKind::kMamba: {
        const int64_t di = c_.d_inner(), cd = c_.conv_dim(), nh = c_.m_heads;
        ASSIGN_OR_RETURN(const native::TensorView* in,
                         get(m + "in_proj.weight", {c_.in_proj_rows(), h}));
        l.in_z = w_.AddBf16({Rows{.view = in, .row_begin = 0, .rows = di}});
        l.in_xbc = w_.AddBf16({Rows{.view = in, .row_begin = di, .rows = cd}});
        l.in_dt = w_.AddBf16({Rows{.view = in, .row_begin = di + cd, .rows = nh}});
        // [conv_dim, 1, K] is the [channels][K] layout CausalConv1d takes.
        ASSIGN_OR_RETURN(l.conv_w, bf16(m + "conv1d.weight", {cd, 1, c_.conv_kernel}));
        if (c_.conv_bias) {
          ASSIGN_OR_RETURN(l.conv_b, bf16(m + "conv1d.bias", {cd}));
        }
        ASSIGN_OR_RETURN(l.dt_bias, f32(m + "dt_bias", {nh}));
        ASSIGN_OR_RETURN(const native::TensorView* a_log, get(m + "A_log", {nh}));
        l.a = w_.AddF32({DeviceWeights::All(a_log)}, [](float v) { return -std::exp(v); });
        ASSIGN_OR_RETURN(l.d, f32(m + "D", {nh}));
        ASSIGN_OR_RETURN(l.m_norm, bf16(m + "norm.weight", {di}));
        ASSIGN_OR_RETURN(l.out_proj, bf16(m + "out_proj.weight", {h, di}));
        break;
      }
      case LayerKind::kAttention: {
        const int64_t qd = c_.heads * c_.head_dim, kvd = c_.kv_heads * c_.head_dim;
        ASSIGN_OR_RETURN(l.q, bf16(m + "q_proj.weight", {qd, h}));
        ASSIGN_OR_RETURN(l.k, bf16(m + "k_proj.weight", {kvd, h}));
        ASSIGN_OR_RETURN(l.v, bf16(m + "v_proj.weight", {kvd, h}));
        ASSIGN_OR_RETURN(l.o, bf16(m + "o_proj.weight", {h, qd}));
        break;
      }
      case LayerKind::kMoe: {
        ASSIGN_OR_RETURN(l.router, f32(m + "gate.weight", {c_.experts, h}));
        ASSIGN_OR_RETURN(l.router_bias, f32(m + "gate.e_score_correction_bias", {c_.experts}));
        // Per-expert tensors stacked into [experts][inter][hidden] and [experts][hidden][inter].
        std::vector<Rows> ups, downs;
        for (int64_t e = 0; e < c_.experts; ++e) {
          const std::string ep = absl::StrCat(m, "experts.", e, ".");
          ASSIGN_OR_RETURN(const native::TensorView* up,
                           get(ep + "up_proj.weight", {c_.moe_inter, h}));
          ASSIGN_OR_RETURN(const native::TensorView* down,
                           get(ep + "down_proj.weight", {h, c_.moe_inter}));
          ups.push_back(DeviceWeights::All(up));
          downs.push_back(DeviceWeights::All(down));
        }
        l.experts_up = w_.AddBf16(std::move(ups));
        l.experts_down = w_.AddBf16(std::move(downs));
        ASSIGN_OR_RETURN(l.shared_up,
                         bf16(m + "shared_experts.up_proj.weight", {c_.shared_inter, h}));
        ASSIGN_OR_RETURN(l.shared_down,
                         bf16(m + "shared_experts.down_proj.weight", {h, c_.shared_inter}));
        break;
      }
      case LayerKind::kMlp: {
        ASSIGN_OR_RETURN(l.mlp_up, bf16(m + "up_proj.weight", {c_.mlp_inter, h}));
        ASSIGN_OR_RETURN(l.mlp_down, bf16(m + "down_proj.weight", {h, c_.mlp_inter}));
        break;
      }
    }
  }
  num_mamba_ = counts[static_cast<int>(LayerKind::kMamba)];
  num_attn_ = counts[static_cast<int>(LayerKind::kAttention)];
  return absl::OkStatus();
}

absl::Status CudaNemotronHModel::AllocateScratch() {
  const int64_t R = kMaxRows, H = c_.hidden;
  const int64_t di = c_.d_inner(), cd = c_.conv_dim(), nh = c_.m_heads;
  const int64_t gn = c_.groups * c_.state;
  const int64_t qd = c_.heads * c_.head_dim, kvd = c_.kv_heads * c_.head_dim;
  const int64_t inter = std::max({c_.shared_inter, c_.mlp_inter, int64_t{1}});
  const int64_t max_in = std::max({H, di, qd, inter});
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
  if (num_mamba_ > 0) {
    alloc(&z_, R * di, "Mamba z");
    alloc(&xbc_, R * cd, "Mamba xBC");
    alloc(&dt_raw_, R * nh, "Mamba dt projection");
    alloc(&conv_out_, R * cd, "Mamba conv output");
    alloc(&xs_, R * di, "Mamba x");
    alloc(&bs_, R * gn, "Mamba B");
    alloc(&cs_, R * gn, "Mamba C");
    alloc(&dt_, R * nh, "Mamba dt");
    alloc(&ys_, R * di, "Mamba SSD output");
    alloc(&normed_, R * di, "Mamba normed output");
  }
  if (num_attn_ > 0) {
    alloc(&q_, R * qd, "attention q");
    alloc(&k_, R * kvd, "attention k");
    alloc(&v_, R * kvd, "attention v");
    alloc(&o_, R * qd, "attention output");
  }
  if (c_.Has(LayerKind::kMoe)) {
    alloc(&router_logits_, R * c_.experts, "router logits");
    alloc(&route_ids_, R * c_.top_k, "routed expert ids");
    alloc(&route_weights_, R * c_.top_k, "routed expert weights");
    alloc(&moe_scratch_, R * c_.top_k * c_.moe_inter, "MoE scratch");
  }
  alloc(&mid_, R * inter, "MLP activation");
  alloc(&conv_ptrs_, std::max<int64_t>(num_mamba_, 1) * kMaxDecodeBatch, "decode conv pointers");
  alloc(&ssm_ptrs_, std::max<int64_t>(num_mamba_, 1) * kMaxDecodeBatch, "decode state pointers");
  alloc(&context_lens_, kMaxDecodeBatch, "decode context lengths");
  return st;
}

absl::Status CudaNemotronHModel::BindMemory(void* state_slots, int64_t slots, void* kv_blocks,
                                            int64_t blocks) {
  if (slots < 0 || blocks < 0) {
    return absl::InvalidArgumentError("nemotron_h BindMemory: negative pool size");
  }
  if ((slot_floats_ > 0 && slots > 0 && state_slots == nullptr) ||
      (kv_block_bytes() > 0 && blocks > 0 && kv_blocks == nullptr)) {
    return absl::InvalidArgumentError("nemotron_h BindMemory: null pool");
  }
  state_base_ = static_cast<float*>(state_slots);
  slots_ = slots;
  kv_base_ = static_cast<float*>(kv_blocks);
  kv_blocks_ = blocks;
  bound_ = true;
  return absl::OkStatus();
}

absl::Status CudaNemotronHModel::ResetSlot(int32_t slot, cudaStream_t stream) {
  if (!bound_) return absl::FailedPreconditionError("nemotron_h: BindMemory first");
  if (slot < 0 || slot >= slots_) {
    return absl::InvalidArgumentError(
        absl::StrCat("nemotron_h ResetSlot: slot ", slot, " outside [0, ", slots_, ")"));
  }
  if (slot_floats_ == 0) return absl::OkStatus();
  TANDEM_CUDA_RETURN(cudaMemsetAsync(state_base_ + slot * slot_floats_, 0,
                                     static_cast<size_t>(slot_floats_ * 4), stream));
  return absl::OkStatus();
}

absl::Status CudaNemotronHModel::Forward(const int32_t* tokens, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden;
  TANDEM_CUDA_RETURN(EmbeddingGather(B(embed_), tokens, n, H, h_, s));
  for (const Layer& l : layers_) {
    TANDEM_CUDA_RETURN(RmsNorm(h_, n, H, B(l.norm), c_.eps, /*one_plus_weight=*/false, x_, s));
    switch (l.kind) {
      case LayerKind::kMamba:
        RETURN_IF_ERROR(Mamba(l, p, s));
        break;
      case LayerKind::kAttention:
        RETURN_IF_ERROR(Attention(l, p, s));
        break;
      case LayerKind::kMoe:
        RETURN_IF_ERROR(Moe(l, p, s));
        break;
      case LayerKind::kMlp:
        RETURN_IF_ERROR(Mlp(l.mlp_up, l.mlp_down, c_.mlp_inter, n, s));
        break;
    }
    TANDEM_CUDA_RETURN(Add(h_, y_, n * H, h_, s));
  }
  return absl::OkStatus();
}

absl::Status CudaNemotronHModel::Mamba(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden, di = c_.d_inner(), cd = c_.conv_dim();
  const int64_t K = c_.conv_kernel, nh = c_.m_heads, hp = c_.m_head_dim, ns = c_.state;
  const int64_t gn = c_.groups * ns;
  cublasHandle_t cb = cublas_.handle();

  TANDEM_CUDA_RETURN(CastToBf16(x_, n * H, xb_, s));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.in_z), di, z_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.in_xbc), cd, xbc_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.in_dt), nh, dt_raw_));

  // Causal depthwise conv (+ bias) and silu over xBC, then split x | B | C.
  const bf16* bias = l.conv_b >= 0 ? B(l.conv_b) : nullptr;
  float* conv_state = p.decode ? nullptr : p.slot + l.index * layer_floats_;
  if (p.decode) {
    TANDEM_CUDA_RETURN(CausalConv1dStep(xbc_, n, cd, K, B(l.conv_w), bias,
                                        conv_ptrs_ + l.index * kMaxDecodeBatch, /*silu=*/true,
                                        conv_out_, s));
  } else {
    TANDEM_CUDA_RETURN(
        CausalConv1d(xbc_, n, cd, K, B(l.conv_w), bias, conv_state, /*silu=*/true, conv_out_, s));
  }
  TANDEM_CUDA_RETURN(CopyColumns(conv_out_, n, cd, di, xs_, di, s));
  TANDEM_CUDA_RETURN(CopyColumns(conv_out_ + di, n, cd, gn, bs_, gn, s));
  TANDEM_CUDA_RETURN(CopyColumns(conv_out_ + di + gn, n, cd, gn, cs_, gn, s));
  // dt = clamp(softplus(dt + dt_bias), time_step_limit); (0, inf) by default: no clamp.
  TANDEM_CUDA_RETURN(MambaDt(dt_raw_, n, nh, F(l.dt_bias), c_.dt_min, c_.dt_max, dt_, s));
  if (p.decode) {
    TANDEM_CUDA_RETURN(MambaSsdStep(xs_, dt_, F(l.a), bs_, cs_, F(l.d), n, nh, hp, c_.groups, ns,
                                    ssm_ptrs_ + l.index * kMaxDecodeBatch, ys_, s));
  } else {
    TANDEM_CUDA_RETURN(MambaSsd(xs_, dt_, F(l.a), bs_, cs_, F(l.d), n, nh, hp, c_.groups, ns,
                                kSsdChunk, conv_state + conv_floats_, ys_, s));
  }
  // y * silu(z) first, then RMSNorm per group of d_inner / n_groups.
  TANDEM_CUDA_RETURN(
      GroupedGatedRmsNorm(ys_, z_, n, di, c_.groups, B(l.m_norm), c_.eps, normed_, s));
  return Linear(cb, normed_, n, di, B(l.out_proj), H, y_, xb_, s);
}

absl::Status CudaNemotronHModel::Attention(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden, D = c_.head_dim;
  const int64_t nh = c_.heads, nkv = c_.kv_heads;
  cublasHandle_t cb = cublas_.handle();
  TANDEM_CUDA_RETURN(CastToBf16(x_, n * H, xb_, s));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.q), nh * D, q_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.k), nkv * D, k_));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(l.v), nkv * D, v_));
  // No RoPE: keys are cached as projected.
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
  return Linear(cb, o_, n, nh * D, B(l.o), H, y_, xb_, s);
}

absl::Status CudaNemotronHModel::Mlp(int up, int down, int64_t inter, int64_t n, cudaStream_t s) {
  const int64_t H = c_.hidden;
  cublasHandle_t cb = cublas_.handle();
  RETURN_IF_ERROR(Linear(cb, x_, n, H, B(up), inter, mid_, xb_, s));
  TANDEM_CUDA_RETURN(Relu2(mid_, n * inter, mid_, s));
  return Linear(cb, mid_, n, inter, B(down), H, y_, xb_, s);
}

absl::Status CudaNemotronHModel::Moe(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden;
  // Router in fp32: sigmoid scores, the correction bias only selects, weights normalised and
  // scaled by routed_scaling_factor.
  RETURN_IF_ERROR(LinearF32(cublas_.handle(), x_, n, H, F(l.router), c_.experts, router_logits_));
  TANDEM_CUDA_RETURN(RouteSigmoidTopK(router_logits_, F(l.router_bias), n, c_.experts, c_.top_k,
                                      c_.routed_scale, route_ids_, route_weights_, s));
  // The shared expert (unscaled) writes y; the routed experts accumulate into it.
  RETURN_IF_ERROR(Mlp(l.shared_up, l.shared_down, c_.shared_inter, n, s));
  return CudaStatus(
      MoeExperts(x_, n, H, route_ids_, route_weights_, c_.top_k, B(l.experts_up), B(l.experts_down),
                 c_.moe_inter, /*swiglu=*/false, moe_scratch_, y_, s),
      "MoeExperts");
}

absl::Status CudaNemotronHModel::Logits(int64_t first, int64_t rows, float* logits,
                                        cudaStream_t s) {
  const int64_t H = c_.hidden;
  TANDEM_CUDA_RETURN(RmsNorm(h_ + first * H, rows, H, B(norm_f_), c_.eps,
                             /*one_plus_weight=*/false, x_, s));
  return Linear(cublas_.handle(), x_, rows, H, B(lm_head_), c_.vocab, logits, xb_, s);
}

absl::Status CudaNemotronHModel::Prefill(const int32_t* tokens, int64_t count, int64_t start,
                                         const SequenceSlot& seq, float* logits,
                                         cudaStream_t stream) {
  if (!bound_) return absl::FailedPreconditionError("nemotron_h: BindMemory first");
  if (tokens == nullptr || count <= 0 || logits == nullptr) {
    return absl::InvalidArgumentError("nemotron_h Prefill: no tokens or no logits buffer");
  }
  if (start < 0 || start + count > c_.max_positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("nemotron_h Prefill: positions ", start, "..", start + count - 1,
                     " outside max_position_embeddings ", c_.max_positions));
  }
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c_.vocab) {
      return absl::InvalidArgumentError(absl::StrCat("nemotron_h Prefill: token ", i, " has id ",
                                                     tokens[i], ", outside [0, ", c_.vocab, ")"));
    }
  }
  if (num_mamba_ > 0 && (seq.state_slot < 0 || seq.state_slot >= slots_)) {
    return absl::InvalidArgumentError(absl::StrCat("nemotron_h Prefill: state slot ",
                                                   seq.state_slot, " outside [0, ", slots_, ")"));
  }
  if (num_attn_ > 0 && (seq.block_table == nullptr ||
                        static_cast<int64_t>(seq.blocks.size()) * kKvBlockTokens < start + count)) {
    return absl::InvalidArgumentError(absl::StrCat("nemotron_h Prefill: ", seq.blocks.size(),
                                                   " KV blocks do not cover ", start + count,
                                                   " tokens"));
  }
  RETURN_IF_ERROR(cublas_.Bind(stream));
  float* slot = num_mamba_ > 0 ? state_base_ + seq.state_slot * slot_floats_ : nullptr;
  int64_t last_rows = 0;
  for (int64_t c0 = 0; c0 < count; c0 += kMaxPrefillChunk) {
    const int64_t n = std::min(kMaxPrefillChunk, count - c0);
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
  TANDEM_CUDA_RETURN(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status CudaNemotronHModel::Decode(const DecodeBatch& batch, cudaStream_t stream) {
  if (!bound_) return absl::FailedPreconditionError("nemotron_h: BindMemory first");
  if (batch.batch <= 0 || batch.batch > kMaxDecodeBatch) {
    return absl::InvalidArgumentError(absl::StrCat("nemotron_h Decode: batch ", batch.batch,
                                                   " outside [1, ", kMaxDecodeBatch, "]"));
  }
  if (batch.tokens == nullptr || batch.positions == nullptr || batch.logits == nullptr ||
      (num_mamba_ > 0 && batch.state_slots == nullptr) ||
      (num_attn_ > 0 && (batch.block_tables == nullptr || batch.max_blocks <= 0))) {
    return absl::InvalidArgumentError("nemotron_h Decode: missing batch arrays");
  }
  RETURN_IF_ERROR(cublas_.Bind(stream));
  TANDEM_CUDA_RETURN(BuildDecodeIndex(
      batch.state_slots, batch.positions, batch.batch, state_base_, slot_floats_, layer_floats_,
      conv_floats_, num_mamba_, kMaxDecodeBatch, conv_ptrs_, ssm_ptrs_, context_lens_, stream));
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

absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaNemotronH(const native::Checkpoint& checkpoint,
                                                             const nlohmann::json& config) {
  ASSIGN_OR_RETURN(Config c, native::nemotron_h::ParseConfig(config, checkpoint.dir()));
  // The same ModelShape the CPU reference reports.
  native::ModelShape shape;
  shape.architecture = "nemotron_h";
  shape.vocab_size = static_cast<int32_t>(c.vocab);
  shape.hidden_size = static_cast<int32_t>(c.hidden);
  shape.num_layers = static_cast<int32_t>(c.kinds.size());
  shape.max_positions = static_cast<int32_t>(c.max_positions);
  shape.kv_bytes_per_token = c.Count(LayerKind::kAttention) * 2 * c.kv_heads * c.head_dim * 4;
  shape.state_bytes = c.Count(LayerKind::kMamba) *
                      (c.conv_dim() * c.conv_kernel + c.m_heads * c.m_head_dim * c.state) * 4;
  shape.eos_token_ids = c.eos;
  auto model = std::make_unique<CudaNemotronHModel>(std::move(c), std::move(shape));
  RETURN_IF_ERROR(model->Init(checkpoint));
  return std::unique_ptr<CudaModel>(std::move(model));
}

}  // namespace tandem::workers::cuda
