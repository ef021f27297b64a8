// What an image costs the worker before the encoder: decoding (PNG, JPEG) and the Qwen3.5
// image processor (smart_resize + Pillow bicubic, then the normalised pixel_values) for a photo
// of 1920x1080, side by side in one run. Run by hand for numbers (docs/performance.md); CI runs
// it once as a smoke test.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <utility>

#include "tests/support/golden_files.h"
#include "tests/support/test_paths.h"
#include "workers/vision/image_decoder.h"
#include "workers/vision/image_preprocessor.h"

namespace tandem::workers::vision {
namespace {

// A 1920x1080 image with gradients and edges (resampling does real work on it).
RgbImage Photo() {
  RgbImage image;
  image.width = 1920;
  image.height = 1080;
  image.rgb.resize(size_t{1920} * 1080 * 3);
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      uint8_t* p = image.rgb.data() + (size_t{1920} * y + x) * 3;
      p[0] = static_cast<uint8_t>(x * 255 / 1919);
      p[1] = static_cast<uint8_t>(y * 255 / 1079);
      p[2] = ((x / 37 + y / 23) % 2) ? 220 : 30;
    }
  }
  return image;
}

void BM_DecodePng352x192(benchmark::State& state) {
  const std::string png = testing::ReadFileText(
      tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl/a_wide_352x192.png"));
  for (auto _ : state) {
    auto rgb = DecodeImage(png, "image/png", ImageDecodeLimits{});
    benchmark::DoNotOptimize(rgb);
  }
}
BENCHMARK(BM_DecodePng352x192)->Unit(benchmark::kMicrosecond);

void BM_DecodeJpeg96x64(benchmark::State& state) {
  const std::string jpeg =
      testing::ReadFileText(tandem::testing::SourcePath("/tests/images/checker_96x64.jpg"));
  for (auto _ : state) {
    auto rgb = DecodeImage(jpeg, "image/jpeg", ImageDecodeLimits{});
    benchmark::DoNotOptimize(rgb);
  }
}
BENCHMARK(BM_DecodeJpeg96x64)->Unit(benchmark::kMicrosecond);

// 1920x1080 -> 1920x1088 (only the vertical pass resamples).
void BM_PrepareImage1080p(benchmark::State& state) {
  const RgbImage photo = Photo();
  const PreprocessorConfig config;
  for (auto _ : state) {
    auto prepared = PrepareImage(photo, config);
    benchmark::DoNotOptimize(prepared);
  }
}
BENCHMARK(BM_PrepareImage1080p)->Unit(benchmark::kMillisecond);

// 1920x1080 shrunk by half on both axes first (a larger photo's typical path: both passes).
void BM_ResizeBicubicBothAxes(benchmark::State& state) {
  const RgbImage photo = Photo();
  for (auto _ : state) {
    RgbImage out = ResizeBicubic(photo, 960, 544);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_ResizeBicubicBothAxes)->Unit(benchmark::kMillisecond);

void BM_PixelValues1080p(benchmark::State& state) {
  const PreprocessorConfig config;
  auto prepared = PrepareImage(Photo(), config);
  for (auto _ : state) {
    std::vector<float> pixels = PixelValues(*prepared, config);
    benchmark::DoNotOptimize(pixels);
  }
}
BENCHMARK(BM_PixelValues1080p)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem::workers::vision

BENCHMARK_MAIN();
