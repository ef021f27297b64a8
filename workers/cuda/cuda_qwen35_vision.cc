#include "workers/cuda/cuda_qwen35_vision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/cuda_status.h"
#include "workers/cuda/kernels_vision.h"
#include "workers/model/checkpoint_writer.h"

namespace tandem::workers::cuda {
namespace {

using model::qwen35::VisionConfig;

// Fixed by the encoder's code, not its config (qwen35_moe_config.h, VisionConfig).
constexpr float kVisionLayerNormEps = 1e-6f;
constexpr float kVisionRopeTheta = 10000.0f;
constexpr char kVisionPrefix[] = "model.visual.";

// Element counts of the scratch buffers of `rows` patches, in allocation order.
struct VisionScratchPlan {
  int64_t rows = 0, mlp_rows = 0;
  int64_t hidden = 0, qkv = 0, wide = 0, inter = 0;
};

VisionScratchPlan PlanScratch(const VisionConfig& c, int64_t rows) {
  VisionScratchPlan p;
  p.rows = rows;
  p.mlp_rows = std::min(rows, kVisionMlpRows);
  p.hidden = rows * c.hidden_size;
  p.qkv = 3 * p.hidden;
  // The BF16 GEMM input: the pixels (patch_dim wide) or a hidden-wide activation.
  p.wide = rows * std::max(c.patch_dim(), c.hidden_size);
  p.inter = p.mlp_rows * c.intermediate_size;
  return p;
}

float WidenBf16(bf16 v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// DeviceBuffer's rounding (gemm.cc): at least 256 bytes, a multiple of 256.
int64_t BufferBytes(int64_t bytes) { return (std::max<int64_t>(bytes, 1) + 255) / 256 * 256; }

// y = r * (S - 1) / max(size - 1, 1) in fp32, its two taps (the upper clamped to the table) and
// the weight of the upper one.
void AxisTaps(int64_t r, int64_t size, int64_t side, int32_t* lo, int32_t* hi, float* frac) {
  const float y =
      static_cast<float>(r * (side - 1)) / static_cast<float>(std::max<int64_t>(size - 1, 1));
  const int64_t y0 = static_cast<int64_t>(std::floor(y));
  *lo = static_cast<int32_t>(y0);
  *hi = static_cast<int32_t>(std::min(y0 + 1, side - 1));
  *frac = y - static_cast<float>(y0);
}

}  // namespace

absl::StatusOr<VisionPatchTables> BuildVisionPatchTables(absl::Span<const VisionGrid> grids,
                                                         const VisionConfig& config) {
  const int64_t m = config.spatial_merge_size, side = config.position_side();
  if (grids.empty()) return absl::InvalidArgumentError("vision encoder: no images");
  VisionPatchTables t;
  int64_t total = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    if (g.t < 1 || g.h <= 0 || g.w <= 0 || g.h % m != 0 || g.w % m != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("vision encoder: image ", i, " has grid ", g.t, " x ", g.h, " x ", g.w,
                       "; sides must be positive multiples of the merge size ", m));
    }
    total += g.patches();
  }
  t.rows_cols.reserve(2 * total);
  t.pos_index.reserve(4 * total);
  t.pos_weight.reserve(4 * total);
  for (const VisionGrid& g : grids) {
    for (int64_t frame = 0; frame < g.t; ++frame) {
      t.cu_seqlens.push_back(static_cast<int32_t>(t.patches()));
      t.max_segment = std::max(t.max_segment, g.h * g.w);
      for (int64_t bh = 0; bh < g.h / m; ++bh) {
        for (int64_t bw = 0; bw < g.w / m; ++bw) {
          for (int64_t mh = 0; mh < m; ++mh) {
            for (int64_t mw = 0; mw < m; ++mw) {
              const int64_t r = bh * m + mh, c = bw * m + mw;
              t.rows_cols.push_back(static_cast<int32_t>(r));
              t.rows_cols.push_back(static_cast<int32_t>(c));
              int32_t y0, y1, x0, x1;
              float fy, fx;
              AxisTaps(r, g.h, side, &y0, &y1, &fy);
              AxisTaps(c, g.w, side, &x0, &x1, &fx);
              const int32_t s = static_cast<int32_t>(side);
              t.pos_index.insert(t.pos_index.end(),
                                 {y0 * s + x0, y0 * s + x1, y1 * s + x0, y1 * s + x1});
              t.pos_weight.insert(t.pos_weight.end(), {(1.0f - fy) * (1.0f - fx), (1.0f - fy) * fx,
                                                       fy * (1.0f - fx), fy * fx});
            }
          }
        }
      }
    }
  }
  t.cu_seqlens.push_back(static_cast<int32_t>(t.patches()));
  return t;
}

bool HasVisionEncoder(const model::Checkpoint& checkpoint) {
  return checkpoint.Has(absl::StrCat(kVisionPrefix, "patch_embed.proj.weight"));
}

absl::StatusOr<std::unique_ptr<CudaVisionEncoder>> CudaVisionEncoder::Load(
    const model::Checkpoint& checkpoint, const VisionConfig& config) {
  if (config.head_dim() % 4 != 0 || config.head_dim() > 128 || config.spatial_merge_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("vision encoder: head dim ", config.head_dim(),
                     " must be a multiple of 4 and at most 128 on the device"));
  }
  std::unique_ptr<CudaVisionEncoder> e(new CudaVisionEncoder(config));
  RETURN_IF_ERROR(e->LoadWeights(checkpoint));
  RETURN_IF_ERROR(e->weights_.Upload());
  RETURN_IF_ERROR(e->cublas_.Init());
  return e;
}

absl::Status CudaVisionEncoder::LoadWeights(const model::Checkpoint& ck) {
  const std::string p = kVisionPrefix;
  const int64_t H = c_.hidden_size, I = c_.intermediate_size, M = c_.merged_dim();
  const int64_t O = c_.out_hidden_size, P = c_.patch_size, T = c_.temporal_patch_size;
  auto bf16 = [&](const std::string& name, std::vector<int64_t> shape) {
    return weights_.LoadBf16(ck, p + name, std::move(shape));
  };
  // Biases, LayerNorms and the position table stay fp32: small, and added to fp32 activations.
  auto f32 = [&](const std::string& name, std::vector<int64_t> shape) {
    return weights_.LoadF32(ck, p + name, std::move(shape));
  };
  // Conv3d [hidden][C][T][P][P] flattens in pixel_values' column order: a [hidden][patch_dim]
  // linear layer.
  ASSIGN_OR_RETURN(patch_w_, bf16("patch_embed.proj.weight", {H, c_.in_channels, T, P, P}));
  ASSIGN_OR_RETURN(patch_b_, f32("patch_embed.proj.bias", {H}));
  ASSIGN_OR_RETURN(pos_table_, f32("pos_embed.weight", {c_.num_position_embeddings, H}));
  blocks_.resize(c_.depth);
  for (int64_t i = 0; i < c_.depth; ++i) {
    const std::string b = absl::StrCat("blocks.", i, ".");
    Block& k = blocks_[i];
    ASSIGN_OR_RETURN(k.norm1_w, f32(b + "norm1.weight", {H}));
    ASSIGN_OR_RETURN(k.norm1_b, f32(b + "norm1.bias", {H}));
    ASSIGN_OR_RETURN(k.qkv_w, bf16(b + "attn.qkv.weight", {3 * H, H}));
    ASSIGN_OR_RETURN(k.qkv_b, f32(b + "attn.qkv.bias", {3 * H}));
    ASSIGN_OR_RETURN(k.proj_w, bf16(b + "attn.proj.weight", {H, H}));
    ASSIGN_OR_RETURN(k.proj_b, f32(b + "attn.proj.bias", {H}));
    ASSIGN_OR_RETURN(k.norm2_w, f32(b + "norm2.weight", {H}));
    ASSIGN_OR_RETURN(k.norm2_b, f32(b + "norm2.bias", {H}));
    ASSIGN_OR_RETURN(k.fc1_w, bf16(b + "mlp.linear_fc1.weight", {I, H}));
    ASSIGN_OR_RETURN(k.fc1_b, f32(b + "mlp.linear_fc1.bias", {I}));
    ASSIGN_OR_RETURN(k.fc2_w, bf16(b + "mlp.linear_fc2.weight", {H, I}));
    ASSIGN_OR_RETURN(k.fc2_b, f32(b + "mlp.linear_fc2.bias", {H}));
  }
  ASSIGN_OR_RETURN(merger_norm_w_, f32("merger.norm.weight", {H}));
  ASSIGN_OR_RETURN(merger_norm_b_, f32("merger.norm.bias", {H}));
  ASSIGN_OR_RETURN(merger_fc1_w_, bf16("merger.linear_fc1.weight", {M, M}));
  ASSIGN_OR_RETURN(merger_fc1_b_, f32("merger.linear_fc1.bias", {M}));
  ASSIGN_OR_RETURN(merger_fc2_w_, bf16("merger.linear_fc2.weight", {O, M}));
  ASSIGN_OR_RETURN(merger_fc2_b_, f32("merger.linear_fc2.bias", {O}));
  return absl::OkStatus();
}

int64_t CudaVisionEncoder::ScratchBytes(const VisionConfig& config, int64_t max_patches) {
  const VisionScratchPlan p = PlanScratch(config, max_patches);
  const int64_t f = 4, b = 2, n = p.rows;
  // h, o, y; qkv; xb; mb; f; fb; rows_cols, pos_index, pos_weight, cu_seqlens (as Reserve).
  return 3 * BufferBytes(p.hidden * f) + BufferBytes(p.qkv * f) + BufferBytes(p.wide * b) +
         BufferBytes(p.hidden * b) + BufferBytes(p.inter * f) + BufferBytes(p.inter * b) +
         BufferBytes(2 * n * 4) + BufferBytes(4 * n * 4) + BufferBytes(4 * n * 4) +
         BufferBytes((n + 1) * 4);
}

absl::Status CudaVisionEncoder::Reserve(int64_t max_patches) {
  if (max_patches <= 0) return absl::InvalidArgumentError("vision encoder: Reserve(<= 0)");
  scratch_.reset();  // free the old buffers before the new ones are allocated
  max_patches_ = 0;
  const VisionScratchPlan p = PlanScratch(c_, max_patches);
  const int64_t n = p.rows;
  auto s = std::make_unique<ScratchBuffers>();
  s->Allocate(&h_, p.hidden, "vision hidden states");
  s->Allocate(&o_, p.hidden, "vision attention output");
  s->Allocate(&y_, p.hidden, "vision linear output");
  s->Allocate(&qkv_, p.qkv, "vision qkv");
  s->Allocate(&xb_, p.wide, "vision bf16 linear inputs");
  s->Allocate(&mb_, p.hidden, "vision merger activation");
  s->Allocate(&f_, p.inter, "vision MLP intermediate");
  s->Allocate(&fb_, p.inter, "vision MLP activation");
  s->Allocate(&rows_cols_, 2 * n, "vision patch rows and columns");
  s->Allocate(&pos_index_, 4 * n, "vision position taps");
  s->Allocate(&pos_weight_, 4 * n, "vision position weights");
  s->Allocate(&cu_seqlens_, n + 1, "vision image boundaries");
  if (!s->status().ok()) {
    return absl::Status(s->status().code(), absl::StrCat("vision encoder scratch for ", max_patches,
                                                         " patches: ", s->status().message()));
  }
  scratch_ = std::move(s);
  max_patches_ = max_patches;
  return absl::OkStatus();
}

int64_t CudaVisionEncoder::OutputRows(absl::Span<const VisionGrid> grids) const {
  int64_t patches = 0;
  for (const VisionGrid& g : grids) patches += g.patches();
  return patches / (c_.spatial_merge_size * c_.spatial_merge_size);
}

absl::Status CudaVisionEncoder::Upload(const VisionPatchTables& t, absl::Span<const float> pixels,
                                       cudaStream_t stream) {
  const int64_t n = t.patches();
  auto copy = [&](void* dst, const void* src, int64_t bytes, const char* what) {
    return CudaStatus(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream),
        absl::StrCat("vision encoder upload (", what, ")"));
  };
  RETURN_IF_ERROR(copy(rows_cols_, t.rows_cols.data(), 2 * n * 4, "patch positions"));
  RETURN_IF_ERROR(copy(pos_index_, t.pos_index.data(), 4 * n * 4, "position taps"));
  RETURN_IF_ERROR(copy(pos_weight_, t.pos_weight.data(), 4 * n * 4, "position weights"));
  RETURN_IF_ERROR(copy(cu_seqlens_, t.cu_seqlens.data(),
                       static_cast<int64_t>(t.cu_seqlens.size()) * 4, "image boundaries"));
  // Rounded on the host (as the device cast rounds: to nearest even), so the device holds no
  // fp32 copy of the pixels (6 KB a patch).
  pixels_bf16_.resize(pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) pixels_bf16_[i] = model::FloatToBf16(pixels[i]);
  return copy(xb_, pixels_bf16_.data(), static_cast<int64_t>(pixels.size()) * 2, "pixels");
}

absl::Status CudaVisionEncoder::RunBlock(const Block& b, const VisionPatchTables& t,
                                         cudaStream_t s) {
  const int64_t n = t.patches(), H = c_.hidden_size, I = c_.intermediate_size;
  const int64_t heads = c_.num_heads, D = c_.head_dim();
  const int64_t segments = static_cast<int64_t>(t.cu_seqlens.size()) - 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  cublasHandle_t cb = cublas_.handle();

  // Attention: h += proj(attn(LN1(h))), q and k rotated by the patches' 2-D positions.
  TANDEM_CUDA_RETURN(
      LayerNormBf16(h_, n, H, F(b.norm1_w), F(b.norm1_b), kVisionLayerNormEps, xb_, s));
  RETURN_IF_ERROR(LinearBf16(cb, xb_, n, H, B(b.qkv_w), 3 * H, qkv_));
  TANDEM_CUDA_RETURN(AddBias(qkv_, n, 3 * H, F(b.qkv_b), s));
  TANDEM_CUDA_RETURN(VisionRotary(qkv_, n, heads, D, rows_cols_, kVisionRopeTheta, s));
  TANDEM_CUDA_RETURN(
      VisionAttention(qkv_, heads, D, cu_seqlens_, segments, t.max_segment, scale, o_, s));
  RETURN_IF_ERROR(Linear(cb, o_, n, H, B(b.proj_w), H, y_, xb_, s));
  TANDEM_CUDA_RETURN(AddBiasResidual(h_, y_, n, H, F(b.proj_b), s));

  // MLP: h += fc2(gelu(fc1(LN2(h)))), in blocks of kVisionMlpRows rows (row-wise, so the two
  // intermediate buffers stay that size).
  TANDEM_CUDA_RETURN(
      LayerNormBf16(h_, n, H, F(b.norm2_w), F(b.norm2_b), kVisionLayerNormEps, xb_, s));
  for (int64_t r0 = 0; r0 < n; r0 += kVisionMlpRows) {
    const int64_t rows = std::min(kVisionMlpRows, n - r0);
    RETURN_IF_ERROR(LinearBf16(cb, xb_ + r0 * H, rows, H, B(b.fc1_w), I, f_));
    TANDEM_CUDA_RETURN(BiasGeluBf16(f_, rows, I, F(b.fc1_b), c_.tanh_gelu, fb_, s));
    RETURN_IF_ERROR(LinearBf16(cb, fb_, rows, I, B(b.fc2_w), H, y_ + r0 * H));
  }
  TANDEM_CUDA_RETURN(AddBiasResidual(h_, y_, n, H, F(b.fc2_b), s));
  return absl::OkStatus();
}

absl::Status CudaVisionEncoder::RunMerger(int64_t n, float* out, cudaStream_t s) {
  const int64_t H = c_.hidden_size, M = c_.merged_dim(), O = c_.out_hidden_size;
  const int64_t rows = n / (c_.spatial_merge_size * c_.spatial_merge_size);
  cublasHandle_t cb = cublas_.handle();
  // LayerNorm per patch; a merge block's consecutive rows are then one M-wide row of xb_.
  TANDEM_CUDA_RETURN(
      LayerNormBf16(h_, n, H, F(merger_norm_w_), F(merger_norm_b_), kVisionLayerNormEps, xb_, s));
  // fc1's output (rows x M = n x H floats) fits in the qkv buffer, free by now.
  RETURN_IF_ERROR(LinearBf16(cb, xb_, rows, M, B(merger_fc1_w_), M, qkv_));
  TANDEM_CUDA_RETURN(BiasGeluBf16(qkv_, rows, M, F(merger_fc1_b_), /*tanh_form=*/false, mb_, s));
  RETURN_IF_ERROR(LinearBf16(cb, mb_, rows, M, B(merger_fc2_w_), O, out));
  TANDEM_CUDA_RETURN(AddBias(out, rows, O, F(merger_fc2_b_), s));
  return absl::OkStatus();
}

absl::Status CudaVisionEncoder::Encode(absl::Span<const float> pixels,
                                       absl::Span<const VisionGrid> grids, float* out,
                                       cudaStream_t stream, VisionTrace* trace) {
  ASSIGN_OR_RETURN(const VisionPatchTables t, BuildVisionPatchTables(grids, c_));
  const int64_t n = t.patches(), H = c_.hidden_size, P = c_.patch_dim();
  if (n > max_patches_) {
    return absl::InvalidArgumentError(absl::StrCat("vision encoder: ", n, " patches, over the ",
                                                   max_patches_, " its scratch was reserved for"));
  }
  if (static_cast<int64_t>(pixels.size()) != n * P || out == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("vision encoder: ", pixels.size(), " pixel values for ", n, " patches of ", P,
                     (out == nullptr ? ", and no output buffer" : "")));
  }
  RETURN_IF_ERROR(cublas_.Bind(stream));
  RETURN_IF_ERROR(Upload(t, pixels, stream));
  // Stage copies for a trace: fp32 activations straight into the host vectors (read after the
  // final synchronization), the BF16 merger input converted then.
  std::vector<bf16> norm_bits;
  auto snapshot = [&](const void* src, int64_t count, size_t elem, void* dst) {
    return CudaStatus(cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * elem,
                                      cudaMemcpyDeviceToHost, stream),
                      "vision encoder trace");
  };
  auto stage = [&](std::vector<float>* v, const float* src, int64_t count) {
    v->resize(static_cast<size_t>(count));
    return snapshot(src, count, 4, v->data());
  };

  RETURN_IF_ERROR(LinearBf16(cublas_.handle(), xb_, n, P, B(patch_w_), H, h_));
  TANDEM_CUDA_RETURN(AddBias(h_, n, H, F(patch_b_), stream));
  if (trace != nullptr) RETURN_IF_ERROR(stage(&trace->patch_embed, h_, n * H));
  TANDEM_CUDA_RETURN(
      AddPositionEmbedding(h_, n, H, F(pos_table_), pos_index_, pos_weight_, stream));
  if (trace != nullptr) {
    RETURN_IF_ERROR(stage(&trace->after_pos_embed, h_, n * H));
    trace->blocks.assign(blocks_.size(), {});
  }
  for (size_t i = 0; i < blocks_.size(); ++i) {
    RETURN_IF_ERROR(RunBlock(blocks_[i], t, stream));
    if (trace != nullptr) RETURN_IF_ERROR(stage(&trace->blocks[i], h_, n * H));
  }
  RETURN_IF_ERROR(RunMerger(n, out, stream));
  if (trace != nullptr) {
    norm_bits.resize(static_cast<size_t>(n * H));
    RETURN_IF_ERROR(snapshot(xb_, n * H, 2, norm_bits.data()));
    RETURN_IF_ERROR(stage(&trace->merged, out, OutputRows(grids) * c_.out_hidden_size));
  }
  // The host tables and staging must outlive the copies; also surfaces asynchronous errors.
  TANDEM_CUDA_RETURN(cudaStreamSynchronize(stream), "vision encoder");
  if (trace != nullptr) {
    trace->merger_norm.resize(norm_bits.size());
    for (size_t i = 0; i < norm_bits.size(); ++i) {
      trace->merger_norm[i] = WidenBf16(norm_bits[i]);
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::workers::cuda
