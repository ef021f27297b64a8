#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workers/model/qwen35_moe_config.h"
#include "workers/model/safetensors.h"
#include "workers/model/vision_grid.h"

namespace tandem::workers::cpu {

using model::VisionGrid;

// The activations of every stage for one Encode call, for tests against the golden data
// (tests/golden/qwen3_5_moe_vl): [patches][hidden] each, merger_norm [patches / merge^2][4 *
// hidden] (after the LayerNorm and the 2x2 concatenation).
struct VisionTrace {
  std::vector<float> patch_embed;
  std::vector<float> pos_embeds;
  std::vector<float> after_pos_embed;
  std::vector<std::vector<float>> blocks;
  std::vector<float> merger_norm;
};

// Qwen3.5's vision tower (model.visual.*) in fp32 on the CPU, the reference the CUDA encoder is
// checked against: patch embedding (Conv3d as a product), the learned position table resampled
// bilinearly to each image's grid, `depth` pre-LayerNorm blocks with 2-D rotary attention within
// each image, and the 2x2 patch merger into the text model's width. Thread-compatible: Encode
// may run on several threads at once.
class Qwen35VisionModel {
 public:
  // INVALID_ARGUMENT naming a missing or mis-shaped tensor.
  static absl::StatusOr<std::unique_ptr<Qwen35VisionModel>> Load(
      const model::Checkpoint& checkpoint, const model::qwen35::VisionConfig& config);
  // Whether the checkpoint carries the encoder's tensors at all (a text checkpoint keeps the
  // released config but has no model.visual.*).
  static bool CheckpointHasEncoder(const model::Checkpoint& checkpoint);

  const model::qwen35::VisionConfig& config() const { return c_; }

  // Image embeddings [sum of patches / merge^2][out_hidden] for `pixel_values` (the images'
  // rows concatenated in order, [sum of patches][patch_dim], each image's rows in the
  // processor's merge-block order). INVALID_ARGUMENT for grids whose sides are not multiples of
  // the merge size or sizes that do not match the pixel rows.
  absl::StatusOr<std::vector<float>> Encode(absl::Span<const float> pixel_values,
                                            absl::Span<const VisionGrid> grids,
                                            VisionTrace* trace = nullptr) const;

 private:
  struct Block {
    std::vector<float> norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b;
    std::vector<float> norm2_w, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };

  explicit Qwen35VisionModel(model::qwen35::VisionConfig config) : c_(std::move(config)) {}
  absl::Status LoadWeights(const model::Checkpoint& checkpoint);
  // Adds each patch's resampled position embedding to x; rows of one image at x.
  void AddPositions(const VisionGrid& grid, float* x, float* pos_out) const;
  // Row and column of each patch row of one image (merge-block order), frames repeated.
  std::vector<std::pair<int64_t, int64_t>> PatchCoordinates(const VisionGrid& grid) const;
  // Attention of one block over one image's `n` rows (LayerNormed input x, output added to h).
  void Attention(const Block& b, const float* x, int64_t n,
                 const std::vector<std::pair<int64_t, int64_t>>& coords, float* h) const;
  void Mlp(const Block& b, const float* x, int64_t n, float* h) const;

  const model::qwen35::VisionConfig c_;
  std::vector<float> patch_w_, patch_b_, pos_embed_;
  std::vector<Block> blocks_;
  std::vector<float> merger_norm_w_, merger_norm_b_, merger_fc1_w_, merger_fc1_b_, merger_fc2_w_,
      merger_fc2_b_;
  // 2-D rotary inverse frequencies, head_dim / 4 of them (theta 10000), fp32 as HF.
  std::vector<float> inv_freq_;
};

}  // namespace tandem::workers::cpu
