#pragma once

// The Qwen3.5 vision encoder (model.visual.*) on the device: the math of
// tests/golden/qwen3_5_moe_vl/MANIFEST.md ("Vision tower (what the code computes)") with BF16
// GEMM weights and inputs, fp32 accumulation and activations, and fp32 biases, LayerNorm
// parameters and position table. For a call's images (pixel values of all of them
// concatenated, each in 2x2-merge-block row order): patch embedding (a GEMM with bias), the
// learned position embedding resampled bilinearly (align_corners) to each grid, 2-D rotary on q
// and k, `depth` blocks of LayerNorm / fused-qkv attention within each image / proj / LayerNorm /
// MLP with residuals, and the merger (LayerNorm, 2x2 rows concatenated, fc1, erf GELU, fc2):
// patches / merge^2 rows of out_hidden_size (the text model's embedding width). Host code.
//
// Memory: the weights (about 0.8 GB for the released encoder), and scratch for calls of up to
// max_patches rows, allocated by Reserve and held: about 26 * hidden + 2 * max(patch_dim, hidden)
// + 44 bytes per patch (33 KB at the released sizes: 0.54 GB for 16,384 patches) plus a fixed
// MLP block of kVisionMlpRows rows (106 MB); ScratchBytes gives the exact figure. Attention keeps
// no rows x rows scores (kernels_vision.h).

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workers/cuda/gemm.h"
#include "workers/cuda/model_common.h"
#include "workers/cuda/scratch_buffers.h"
#include "workers/model/qwen35_moe_config.h"
#include "workers/model/safetensors.h"
#include "workers/model/vision_grid.h"

namespace tandem::workers::cuda {

// The block MLP runs over at most this many rows at a time (it is row-wise): its two
// intermediate buffers stay fixed whatever the image size.
inline constexpr int64_t kVisionMlpRows = 4096;

using model::VisionGrid;

// What every row of a call needs besides its pixels, built on the host: rows are the images'
// patches in order, each frame in 2x2-merge-block order (row n of a frame is the patch at
// (2 * bh + mh, 2 * bw + mw) for n = ((bh * (w / 2) + bw) * 2 + mh) * 2 + mw, for merge 2).
struct VisionPatchTables {
  std::vector<int32_t> rows_cols;   // [N][2]: the patch's row and column in its frame
  std::vector<int32_t> pos_index;   // [N][4]: bilinear taps into the position table
  std::vector<float> pos_weight;    // [N][4]: their weights (fp32, as the reference)
  std::vector<int32_t> cu_seqlens;  // [frames + 1]: each frame's first row, then N
  int64_t max_segment = 0;          // the largest frame's rows
  int64_t patches() const { return static_cast<int64_t>(rows_cols.size() / 2); }
};
// INVALID_ARGUMENT for an empty call or a grid whose sides are not positive multiples of the
// merge size.
absl::StatusOr<VisionPatchTables> BuildVisionPatchTables(absl::Span<const VisionGrid> grids,
                                                         const model::qwen35::VisionConfig& config);

// Host copies of one Encode's stages (tests).
struct VisionTrace {
  std::vector<float> patch_embed;          // [N][hidden]
  std::vector<float> after_pos_embed;      // [N][hidden]
  std::vector<std::vector<float>> blocks;  // [depth][N][hidden], after each block
  std::vector<float> merger_norm;          // [N / m^2][m^2 * hidden]: the BF16 fc1 input
  std::vector<float> merged;               // [N / m^2][out_hidden]: the output
};

class CudaVisionEncoder {
 public:
  // Uploads model.visual.* of `checkpoint` (checked against `config`) to the current device.
  static absl::StatusOr<std::unique_ptr<CudaVisionEncoder>> Load(
      const model::Checkpoint& checkpoint, const model::qwen35::VisionConfig& config);

  CudaVisionEncoder(const CudaVisionEncoder&) = delete;
  CudaVisionEncoder& operator=(const CudaVisionEncoder&) = delete;

  const model::qwen35::VisionConfig& config() const { return c_; }
  int64_t weight_bytes() const { return weights_.bytes(); }
  // Allocates the scratch of calls of up to `max_patches` rows, replacing the current one (all
  // of it is freed first). RESOURCE_EXHAUSTED naming the buffer when the device is full.
  absl::Status Reserve(int64_t max_patches);
  int64_t max_patches() const { return max_patches_; }
  // Device bytes Reserve(max_patches) allocates.
  static int64_t ScratchBytes(const model::qwen35::VisionConfig& config, int64_t max_patches);
  // Output rows of a call: its patches / merge^2.
  int64_t OutputRows(absl::Span<const VisionGrid> grids) const;

  // Encodes the images of `grids` from `pixels` (host, [patches][patch_dim] fp32, every image's
  // rows as vision::PixelValues gives them, concatenated) into `out` (device,
  // [OutputRows(grids)][out_hidden] fp32). At most max_patches() rows. Attention stays within
  // each image (frame). Synchronizes before it returns; with `trace`, also copies every stage.
  absl::Status Encode(absl::Span<const float> pixels, absl::Span<const VisionGrid> grids,
                      float* out, cudaStream_t stream, VisionTrace* trace = nullptr);

 private:
  // Piece ids in DeviceWeights.
  struct Block {
    int norm1_w = -1, norm1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1;
    int norm2_w = -1, norm2_b = -1, fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;
  };

  explicit CudaVisionEncoder(model::qwen35::VisionConfig config) : c_(std::move(config)) {}
  absl::Status LoadWeights(const model::Checkpoint& checkpoint);
  // Uploads the call's tables and its pixels (as BF16, into xb_).
  absl::Status Upload(const VisionPatchTables& tables, absl::Span<const float> pixels,
                      cudaStream_t stream);
  absl::Status RunBlock(const Block& b, const VisionPatchTables& tables, cudaStream_t stream);
  absl::Status RunMerger(int64_t n, float* out, cudaStream_t stream);
  const bf16* B(int id) const { return weights_.bf16_ptr(id); }
  const float* F(int id) const { return weights_.f32_ptr(id); }

  const model::qwen35::VisionConfig c_;
  DeviceWeights weights_;
  CublasContext cublas_;
  int patch_w_ = -1, patch_b_ = -1, pos_table_ = -1;
  int merger_norm_w_ = -1, merger_norm_b_ = -1, merger_fc1_w_ = -1, merger_fc1_b_ = -1;
  int merger_fc2_w_ = -1, merger_fc2_b_ = -1;
  std::vector<Block> blocks_;

  // Scratch (Reserve): see the file comment for the sizes.
  int64_t max_patches_ = 0;
  std::unique_ptr<ScratchBuffers> scratch_;
  float *h_ = nullptr, *qkv_ = nullptr, *o_ = nullptr, *y_ = nullptr, *f_ = nullptr;
  bf16 *xb_ = nullptr, *mb_ = nullptr, *fb_ = nullptr;
  int32_t *rows_cols_ = nullptr, *pos_index_ = nullptr, *cu_seqlens_ = nullptr;
  float* pos_weight_ = nullptr;
  // Host staging of the call's pixels as BF16 (grows to the largest call).
  std::vector<bf16> pixels_bf16_;
};

// The checkpoint holds the encoder's tensors (a text checkpoint may keep the released config).
bool HasVisionEncoder(const model::Checkpoint& checkpoint);

}  // namespace tandem::workers::cuda
