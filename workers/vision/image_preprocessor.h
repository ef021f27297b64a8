#pragma once

// What the Qwen3.5 image processor (Qwen2VLImageProcessor with the released checkpoints'
// preprocessor_config.json) does to an RGB image before the vision encoder: smart_resize to
// multiples of patch x merge within [min_pixels, max_pixels], Pillow's BICUBIC resampling,
// rescale and normalisation with the model's mean and std, temporal padding to
// temporal_patch_size frames, and the patch order the encoder consumes (2x2-merge-block order).
// The golden data in tests/golden/qwen3_5_moe_vl (MANIFEST.md "Preprocessing") states the
// algorithm exactly; this code matches it bit for bit.

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "workers/vision/image_decoder.h"

namespace tandem::workers::vision {

// preprocessor_config.json's fields (the released Qwen3.5 values as defaults).
struct PreprocessorConfig {
  int32_t patch_size = 16;
  int32_t temporal_patch_size = 2;
  int32_t merge_size = 2;
  // size.shortest_edge and size.longest_edge: bounds on resized height * width.
  int64_t min_pixels = 65536;
  int64_t max_pixels = 16777216;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<float, 3> image_mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std = {0.5f, 0.5f, 0.5f};

  // Side of a merged block in pixels (patch_size * merge_size): resized sides are multiples.
  int32_t factor() const { return patch_size * merge_size; }
  // Values per patch row of pixel_values: 3 * temporal_patch_size * patch_size^2.
  int64_t patch_dim() const { return int64_t{3} * temporal_patch_size * patch_size * patch_size; }
};

// Parses preprocessor_config.json; absent fields keep the defaults. The pixel bounds are
// size.shortest_edge / size.longest_edge, overridden by top-level min_pixels / max_pixels (as
// HF does for older Qwen2-VL files). INVALID_ARGUMENT naming the field for a wrong type or value
// (non-positive sizes, min_pixels > max_pixels, a std of 0, a resample other than 3 (BICUBIC),
// a mean/std not of 3 numbers, do_resize or do_convert_rgb false). Messages do not name the
// file: callers prefix its path.
absl::StatusOr<PreprocessorConfig> ParsePreprocessorConfig(const nlohmann::json& json);

// smart_resize: the (height, width) the image is resized to. INVALID_ARGUMENT for an aspect
// ratio over 200 or a non-positive side.
absl::StatusOr<std::pair<int32_t, int32_t>> SmartResize(int32_t height, int32_t width,
                                                        const PreprocessorConfig& config);

// Pillow's Image.resize((width, height), BICUBIC) on 8-bit RGB, bit for bit (fixed-point
// weights with 22 fraction bits, horizontal pass first into an 8-bit intermediate). The same
// size returns a copy; a non-positive size or an inconsistent image (rgb.size() !=
// width * height * 3) returns an empty image (0 x 0).
RgbImage ResizeBicubic(const RgbImage& image, int32_t width, int32_t height);

// An image ready for the encoder: resized to its grid, still as bytes (pixel values are made
// when the encoder runs, so a queued request holds 3 bytes a pixel, not 24).
struct PreparedImage {
  int32_t grid_t = 1;
  int32_t grid_h = 0;  // patches down (resized height / patch_size)
  int32_t grid_w = 0;  // patches across
  RgbImage resized;

  int64_t num_patches() const { return int64_t{grid_t} * grid_h * grid_w; }
  // Tokens the image takes in the prompt: patches / merge_size^2.
  int64_t num_tokens(int32_t merge_size) const {
    return num_patches() / (int64_t{merge_size} * merge_size);
  }
};

// The image's grid and token count without resizing it (for limits before any work).
struct ImageGrid {
  int32_t grid_t = 1;
  int32_t grid_h = 0;
  int32_t grid_w = 0;
  int64_t num_tokens = 0;
};
absl::StatusOr<ImageGrid> GridOf(int32_t height, int32_t width, const PreprocessorConfig& config);

// SmartResize + ResizeBicubic (only when the size changes). INVALID_ARGUMENT as SmartResize,
// or when rgb.size() != width * height * 3.
absl::StatusOr<PreparedImage> PrepareImage(RgbImage image, const PreprocessorConfig& config);

// pixel_values [num_patches][patch_dim] in the encoder's row order: row
// n = ((bh * (grid_w / m) + bw) * m + mh) * m + mw holds the patch at patch-row bh * m + mh,
// patch-column bw * m + mw (m = merge_size); column k = ((ch * T + tt) * P + py) * P + px.
// Values are rescaled and normalised in fp32 as HF's fast processor does (with both on, fused:
// (x - mean / rescale_factor) / (std / rescale_factor); for mean = std = 0.5 that is the
// correctly rounded (2x - 255) / 255); the T temporal slices are equal. Empty when `image` is
// not one PrepareImage made for `config` (its sizes disagree with the grid).
std::vector<float> PixelValues(const PreparedImage& image, const PreprocessorConfig& config);

}  // namespace tandem::workers::vision
