#include "workers/vision/image_preprocessor.h"

namespace tandem::workers::vision {

absl::StatusOr<PreprocessorConfig> ParsePreprocessorConfig(const nlohmann::json& json) {
  (void)json;
  return PreprocessorConfig();
}

absl::StatusOr<std::pair<int32_t, int32_t>> SmartResize(int32_t height, int32_t width,
                                                        const PreprocessorConfig& config) {
  (void)config;
  return std::make_pair(height, width);
}

RgbImage ResizeBicubic(const RgbImage& image, int32_t width, int32_t height) {
  (void)width;
  (void)height;
  return image;
}

absl::StatusOr<ImageGrid> GridOf(int32_t height, int32_t width, const PreprocessorConfig& config) {
  ImageGrid g;
  g.grid_h = height / config.patch_size;
  g.grid_w = width / config.patch_size;
  g.num_tokens = int64_t{g.grid_h} * g.grid_w / (config.merge_size * config.merge_size);
  return g;
}

absl::StatusOr<PreparedImage> PrepareImage(RgbImage image, const PreprocessorConfig& config) {
  PreparedImage p;
  p.grid_h = image.height / config.patch_size;
  p.grid_w = image.width / config.patch_size;
  p.resized = std::move(image);
  return p;
}

std::vector<float> PixelValues(const PreparedImage& image, const PreprocessorConfig& config) {
  return std::vector<float>(image.num_patches() * config.patch_dim());
}

}  // namespace tandem::workers::vision
