// Nemotron-H on the device: the math of workers/cpu/nemotron_h_model.cc (the fp32 CPU
// reference) sequenced over the kernels of kernels.h, with BF16 weights (fp32 router, A, D,
// dt_bias and correction bias) and fp32 activations and state. The layers only:
// CudaHybridModel (cuda_hybrid_model.h) runs the passes and owns the memory. A state slot holds,
// per Mamba layer, its conv window and its SSM state [heads][head_dim][state_size]; the KV pool
// one region per attention layer.

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
#include "workers/model/nemotron_h_config.h"

namespace tandem::workers::cuda {

using model::nemotron_h::Config;
using model::nemotron_h::LayerKind;

template <>
HybridLayout ConfiguredHybridModel<Config>::LayoutOf(const Config& c) {
  const int64_t inter = std::max({c.shared_inter, c.mlp_inter, int64_t{1}});
  HybridLayout layout;
  layout.recurrent_layers = c.Count(LayerKind::kMamba);
  layout.conv_channels = c.conv_dim();
  layout.conv_kernel = c.conv_kernel;
  layout.state_floats = c.m_heads * c.m_head_dim * c.state;
  layout.attention_layers = c.Count(LayerKind::kAttention);
  layout.attention_heads = c.heads;
  layout.kv_heads = c.kv_heads;
  layout.head_dim = c.head_dim;
  layout.norm_eps = c.eps;
  layout.norm_one_plus_weight = false;
  layout.tied_embeddings = c.tie_embeddings;
  layout.max_linear_input = std::max({c.d_inner(), c.heads * c.head_dim, inter});
  return layout;
}

namespace {

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

class CudaNemotronHModel final : public ConfiguredHybridModel<Config> {
 public:
  using ConfiguredHybridModel::ConfiguredHybridModel;

 private:
  absl::Status LoadWeights(const model::Checkpoint& checkpoint) override;
  absl::Status LoadLayer(const model::Checkpoint& ck, int64_t i, Layer* l);
  void AllocateLayerScratch(ScratchBuffers& scratch) override;
  absl::Status ForwardLayers(const Pass& p, cudaStream_t s) override;
  // x() -> y() for the pass's rows.
  absl::Status Mamba(const Layer& l, const Pass& p, cudaStream_t s);
  absl::Status Attention(const Layer& l, const Pass& p, cudaStream_t s);
  absl::Status Moe(const Layer& l, const Pass& p, cudaStream_t s);
  // y() = down(relu(up(x()))^2).
  absl::Status Mlp(int up, int down, int64_t inter, int64_t n, cudaStream_t s);

  std::vector<Layer> layers_;

  // Scratch, kMaxRows rows each (see AllocateLayerScratch).
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
};

absl::Status CudaNemotronHModel::LoadWeights(const model::Checkpoint& ck) {
  // Some NVIDIA remote-code exports name the embedding in the singular (as the CPU reference).
  const std::string embed_name =
      !ck.Has("backbone.embeddings.weight") && ck.Has("backbone.embedding.weight")
          ? "backbone.embedding.weight"
          : "backbone.embeddings.weight";
  RETURN_IF_ERROR(LoadEmbeddingAndHead(ck, embed_name, "backbone.norm_f.weight"));
  int64_t counts[4] = {0, 0, 0, 0};
  layers_.resize(c_.kinds.size());
  for (size_t i = 0; i < c_.kinds.size(); ++i) {
    Layer& l = layers_[i];
    l.kind = c_.kinds[i];
    l.index = counts[static_cast<int>(l.kind)]++;
    RETURN_IF_ERROR(LoadLayer(ck, static_cast<int64_t>(i), &l));
  }
  return absl::OkStatus();
}

absl::Status CudaNemotronHModel::LoadLayer(const model::Checkpoint& ck, int64_t i, Layer* l) {
  using Rows = DeviceWeights::Rows;
  DeviceWeights& w = weights();
  const PieceLoader load{ck, w};
  const int64_t h = c_.hidden;
  const std::string p = absl::StrCat("backbone.layers.", i, ".");
  const std::string m = p + "mixer.";
  ASSIGN_OR_RETURN(l->norm, load.Bf16(p + "norm.weight", {h}));
  switch (l->kind) {
    case LayerKind::kMamba: {
      const int64_t di = c_.d_inner(), cd = c_.conv_dim(), nh = c_.m_heads;
      ASSIGN_OR_RETURN(const model::TensorView* in,
                       ck.Get(m + "in_proj.weight", {c_.in_proj_rows(), h}));
      l->in_z = w.AddBf16({Rows{.view = in, .row_begin = 0, .rows = di}});
      l->in_xbc = w.AddBf16({Rows{.view = in, .row_begin = di, .rows = cd}});
      l->in_dt = w.AddBf16({Rows{.view = in, .row_begin = di + cd, .rows = nh}});
      // [conv_dim, 1, K] is the [channels][K] layout CausalConv1d takes.
      ASSIGN_OR_RETURN(l->conv_w, load.Bf16(m + "conv1d.weight", {cd, 1, c_.conv_kernel}));
      if (c_.conv_bias) {
        ASSIGN_OR_RETURN(l->conv_b, load.Bf16(m + "conv1d.bias", {cd}));
      }
      ASSIGN_OR_RETURN(l->dt_bias, load.F32(m + "dt_bias", {nh}));
      ASSIGN_OR_RETURN(const model::TensorView* a_log, ck.Get(m + "A_log", {nh}));
      l->a = w.AddF32({DeviceWeights::All(a_log)}, [](float v) { return -std::exp(v); });
      ASSIGN_OR_RETURN(l->d, load.F32(m + "D", {nh}));
      ASSIGN_OR_RETURN(l->m_norm, load.Bf16(m + "norm.weight", {di}));
      ASSIGN_OR_RETURN(l->out_proj, load.Bf16(m + "out_proj.weight", {h, di}));
      return absl::OkStatus();
    }
    case LayerKind::kAttention: {
      const int64_t qd = c_.heads * c_.head_dim, kvd = c_.kv_heads * c_.head_dim;
      ASSIGN_OR_RETURN(l->q, load.Bf16(m + "q_proj.weight", {qd, h}));
      ASSIGN_OR_RETURN(l->k, load.Bf16(m + "k_proj.weight", {kvd, h}));
      ASSIGN_OR_RETURN(l->v, load.Bf16(m + "v_proj.weight", {kvd, h}));
      ASSIGN_OR_RETURN(l->o, load.Bf16(m + "o_proj.weight", {h, qd}));
      return absl::OkStatus();
    }
    case LayerKind::kMoe: {
      ASSIGN_OR_RETURN(l->router, load.F32(m + "gate.weight", {c_.experts, h}));
      ASSIGN_OR_RETURN(l->router_bias, load.F32(m + "gate.e_score_correction_bias", {c_.experts}));
      // Per-expert tensors stacked into [experts][inter][hidden] and [experts][hidden][inter].
      std::vector<Rows> ups, downs;
      for (int64_t e = 0; e < c_.experts; ++e) {
        const std::string ep = absl::StrCat(m, "experts.", e, ".");
        ASSIGN_OR_RETURN(const model::TensorView* up,
                         ck.Get(ep + "up_proj.weight", {c_.moe_inter, h}));
        ASSIGN_OR_RETURN(const model::TensorView* down,
                         ck.Get(ep + "down_proj.weight", {h, c_.moe_inter}));
        ups.push_back(DeviceWeights::All(up));
        downs.push_back(DeviceWeights::All(down));
      }
      l->experts_up = w.AddBf16(std::move(ups));
      l->experts_down = w.AddBf16(std::move(downs));
      ASSIGN_OR_RETURN(l->shared_up,
                       load.Bf16(m + "shared_experts.up_proj.weight", {c_.shared_inter, h}));
      ASSIGN_OR_RETURN(l->shared_down,
                       load.Bf16(m + "shared_experts.down_proj.weight", {h, c_.shared_inter}));
      return absl::OkStatus();
    }
    case LayerKind::kMlp: {
      ASSIGN_OR_RETURN(l->mlp_up, load.Bf16(m + "up_proj.weight", {c_.mlp_inter, h}));
      ASSIGN_OR_RETURN(l->mlp_down, load.Bf16(m + "down_proj.weight", {h, c_.mlp_inter}));
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

void CudaNemotronHModel::AllocateLayerScratch(ScratchBuffers& scratch) {
  const int64_t R = kMaxRows;
  const int64_t di = c_.d_inner(), cd = c_.conv_dim(), nh = c_.m_heads;
  const int64_t gn = c_.groups * c_.state;
  const int64_t qd = c_.heads * c_.head_dim, kvd = c_.kv_heads * c_.head_dim;
  const int64_t inter = std::max({c_.shared_inter, c_.mlp_inter, int64_t{1}});
  if (c_.Has(LayerKind::kMamba)) {
    scratch.Allocate(&z_, R * di, "Mamba z");
    scratch.Allocate(&xbc_, R * cd, "Mamba xBC");
    scratch.Allocate(&dt_raw_, R * nh, "Mamba dt projection");
    scratch.Allocate(&conv_out_, R * cd, "Mamba conv output");
    scratch.Allocate(&xs_, R * di, "Mamba x");
    scratch.Allocate(&bs_, R * gn, "Mamba B");
    scratch.Allocate(&cs_, R * gn, "Mamba C");
    scratch.Allocate(&dt_, R * nh, "Mamba dt");
    scratch.Allocate(&ys_, R * di, "Mamba SSD output");
    scratch.Allocate(&normed_, R * di, "Mamba normed output");
  }
  if (c_.Has(LayerKind::kAttention)) {
    scratch.Allocate(&q_, R * qd, "attention q");
    scratch.Allocate(&k_, R * kvd, "attention k");
    scratch.Allocate(&v_, R * kvd, "attention v");
    scratch.Allocate(&o_, R * qd, "attention output");
  }
  if (c_.Has(LayerKind::kMoe)) {
    scratch.Allocate(&router_logits_, R * c_.experts, "router logits");
    scratch.Allocate(&route_ids_, R * c_.top_k, "routed expert ids");
    scratch.Allocate(&route_weights_, R * c_.top_k, "routed expert weights");
    scratch.Allocate(&moe_scratch_, R * c_.top_k * c_.moe_inter, "MoE scratch");
  }
  scratch.Allocate(&mid_, R * inter, "MLP activation");
}

absl::Status CudaNemotronHModel::ForwardLayers(const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden;
  for (const Layer& l : layers_) {
    TANDEM_CUDA_RETURN(RmsNorm(h(), n, H, B(l.norm), c_.eps, /*one_plus_weight=*/false, x(), s));
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
    TANDEM_CUDA_RETURN(Add(h(), y(), n * H, h(), s));
  }
  return absl::OkStatus();
}

absl::Status CudaNemotronHModel::Mamba(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden, di = c_.d_inner(), cd = c_.conv_dim();
  const int64_t nh = c_.m_heads, hp = c_.m_head_dim, ns = c_.state;
  const int64_t gn = c_.groups * ns;
  cublasHandle_t cb = cublas();

  TANDEM_CUDA_RETURN(CastToBf16(x(), n * H, xb(), s));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.in_z), di, z_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.in_xbc), cd, xbc_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.in_dt), nh, dt_raw_));

  // Causal depthwise conv (+ bias) and silu over xBC, then split x | B | C.
  const bf16* bias = l.conv_b >= 0 ? B(l.conv_b) : nullptr;
  RETURN_IF_ERROR(CausalConv(p, l.index, xbc_, B(l.conv_w), bias, conv_out_, s));
  TANDEM_CUDA_RETURN(CopyColumns(conv_out_, n, cd, di, xs_, di, s));
  TANDEM_CUDA_RETURN(CopyColumns(conv_out_ + di, n, cd, gn, bs_, gn, s));
  TANDEM_CUDA_RETURN(CopyColumns(conv_out_ + di + gn, n, cd, gn, cs_, gn, s));
  // dt = clamp(softplus(dt + dt_bias), time_step_limit); (0, inf) by default: no clamp.
  TANDEM_CUDA_RETURN(MambaDt(dt_raw_, n, nh, F(l.dt_bias), c_.dt_min, c_.dt_max, dt_, s));
  if (p.decode) {
    TANDEM_CUDA_RETURN(MambaSsdStep(xs_, dt_, F(l.a), bs_, cs_, F(l.d), n, nh, hp, c_.groups, ns,
                                    DecodeStates(l.index), ys_, s));
  } else {
    TANDEM_CUDA_RETURN(MambaSsd(xs_, dt_, F(l.a), bs_, cs_, F(l.d), n, nh, hp, c_.groups, ns,
                                kSsdChunk, PrefillState(p, l.index), ys_, s));
  }
  // y * silu(z) first, then RMSNorm per group of d_inner / n_groups.
  TANDEM_CUDA_RETURN(
      GroupedGatedRmsNorm(ys_, z_, n, di, c_.groups, B(l.m_norm), c_.eps, normed_, s));
  return Linear(cb, normed_, n, di, B(l.out_proj), H, y(), xb(), s);
}

absl::Status CudaNemotronHModel::Attention(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden, D = c_.head_dim;
  const int64_t nh = c_.heads, nkv = c_.kv_heads;
  cublasHandle_t cb = cublas();
  TANDEM_CUDA_RETURN(CastToBf16(x(), n * H, xb(), s));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.q), nh * D, q_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.k), nkv * D, k_));
  RETURN_IF_ERROR(LinearBf16(cb, xb(), n, H, B(l.v), nkv * D, v_));
  // No RoPE: keys are cached as projected.
  RETURN_IF_ERROR(CachedAttention(p, l.index, q_, k_, v_, nh, o_, s));
  return Linear(cb, o_, n, nh * D, B(l.o), H, y(), xb(), s);
}

absl::Status CudaNemotronHModel::Mlp(int up, int down, int64_t inter, int64_t n, cudaStream_t s) {
  const int64_t H = c_.hidden;
  cublasHandle_t cb = cublas();
  RETURN_IF_ERROR(Linear(cb, x(), n, H, B(up), inter, mid_, xb(), s));
  TANDEM_CUDA_RETURN(Relu2(mid_, n * inter, mid_, s));
  return Linear(cb, mid_, n, inter, B(down), H, y(), xb(), s);
}

absl::Status CudaNemotronHModel::Moe(const Layer& l, const Pass& p, cudaStream_t s) {
  const int64_t n = p.n, H = c_.hidden;
  // Router in fp32: sigmoid scores, the correction bias only selects, weights normalised and
  // scaled by routed_scaling_factor.
  RETURN_IF_ERROR(LinearF32(cublas(), x(), n, H, F(l.router), c_.experts, router_logits_));
  TANDEM_CUDA_RETURN(RouteSigmoidTopK(router_logits_, F(l.router_bias), n, c_.experts, c_.top_k,
                                      c_.routed_scale, route_ids_, route_weights_, s));
  // The shared expert (unscaled) writes y; the routed experts accumulate into it.
  RETURN_IF_ERROR(Mlp(l.shared_up, l.shared_down, c_.shared_inter, n, s));
  return CudaStatus(
      MoeExperts(x(), n, H, route_ids_, route_weights_, c_.top_k, B(l.experts_up),
                 B(l.experts_down), c_.moe_inter, /*swiglu=*/false, moe_scratch_, y(), s),
      "MoeExperts");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaNemotronH(const model::Checkpoint& checkpoint,
                                                             const Config& config,
                                                             const model::ModelShape& shape) {
  if (config.Has(LayerKind::kMoe) && !config.norm_topk) {
    return absl::UnimplementedError(absl::StrCat(
        checkpoint.dir(), ": norm_topk_prob false is not supported by the CUDA engine"));
  }
  return LoadHybridModel<CudaNemotronHModel>(checkpoint, config, shape);
}

}  // namespace tandem::workers::cuda
