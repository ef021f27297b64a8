#include "workers/vision/image_preprocessor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/golden_files.h"
#include "tests/support/test_paths.h"

namespace tandem::workers::vision {
namespace {

using nlohmann::json;
using tandem::testing::ReadFileText;
using tandem::testing::ReadJsonFile;

const std::string kGoldenDir = tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl/");

// A golden .rgb file (raw interleaved bytes) as an image; empty rgb when missing.
RgbImage ReadRgb(const std::string& file, int32_t width, int32_t height) {
  RgbImage image;
  image.width = width;
  image.height = height;
  const std::string bytes = ReadFileText(kGoldenDir + file);
  image.rgb.assign(bytes.begin(), bytes.end());
  return image;
}

// One F32 tensor of a .safetensors file (8-byte LE header length, JSON header, data section);
// nullopt with a gtest failure when it is missing or malformed. Parsed here so the test needs
// no library beyond tandem_vision.
struct F32Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
std::optional<F32Tensor> ReadSafetensorsF32(const std::string& path, const std::string& name) {
  const std::string file = ReadFileText(path);
  if (file.size() < 8) {
    ADD_FAILURE() << "cannot read " << path;
    return std::nullopt;
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<uint8_t>(file[i]);
  if (header_len > file.size() - 8) {
    ADD_FAILURE() << path << ": header length " << header_len << " past the end";
    return std::nullopt;
  }
  const json header = json::parse(file.substr(8, header_len), nullptr, false);
  if (header.is_discarded() || !header.contains(name)) {
    ADD_FAILURE() << path << ": no tensor " << name;
    return std::nullopt;
  }
  const json& entry = header[name];
  if (entry.value("dtype", "") != "F32") {
    ADD_FAILURE() << name << " is not F32";
    return std::nullopt;
  }
  F32Tensor tensor;
  int64_t elements = 1;
  for (const json& d : entry["shape"]) {
    tensor.shape.push_back(d.get<int64_t>());
    elements *= tensor.shape.back();
  }
  const uint64_t begin = entry["data_offsets"][0].get<uint64_t>();
  const uint64_t end = entry["data_offsets"][1].get<uint64_t>();
  const uint64_t data = 8 + header_len;
  if (end - begin != static_cast<uint64_t>(elements) * 4 || data + end > file.size()) {
    ADD_FAILURE() << name << ": bad data_offsets";
    return std::nullopt;
  }
  tensor.values.resize(elements);
  std::memcpy(tensor.values.data(), file.data() + data + begin, end - begin);
  return tensor;
}

json GoldenCases() {
  const json cases = ReadJsonFile(kGoldenDir + "cases.json");
  EXPECT_FALSE(cases.is_discarded()) << "cannot read cases.json";
  return cases;
}

RgbImage Constant(int32_t width, int32_t height, uint8_t r, uint8_t g, uint8_t b) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < image.rgb.size(); i += 3) {
    image.rgb[i] = r;
    image.rgb[i + 1] = g;
    image.rgb[i + 2] = b;
  }
  return image;
}

// Deterministic pseudo-random bytes (a 32-bit LCG), so failures reproduce.
RgbImage Noise(int32_t width, int32_t height, uint32_t seed) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (uint8_t& v : image.rgb) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(seed >> 24);
  }
  return image;
}

// ---- ParsePreprocessorConfig ----

void ExpectDefaults(const PreprocessorConfig& c) {
  EXPECT_EQ(c.patch_size, 16);
  EXPECT_EQ(c.temporal_patch_size, 2);
  EXPECT_EQ(c.merge_size, 2);
  EXPECT_EQ(c.min_pixels, 65536);
  EXPECT_EQ(c.max_pixels, 16777216);
  EXPECT_TRUE(c.do_rescale);
  EXPECT_DOUBLE_EQ(c.rescale_factor, 1.0 / 255.0);
  EXPECT_TRUE(c.do_normalize);
  for (int ch = 0; ch < 3; ++ch) {
    EXPECT_EQ(c.image_mean[ch], 0.5f);
    EXPECT_EQ(c.image_std[ch], 0.5f);
  }
  EXPECT_EQ(c.factor(), 32);
  EXPECT_EQ(c.patch_dim(), 1536);
}

TEST(PreprocessorConfigTest, GoldenFileGivesTheDefaults) {
  const json file = ReadJsonFile(kGoldenDir + "preprocessor_config.json");
  ASSERT_FALSE(file.is_discarded());
  auto config = ParsePreprocessorConfig(file);
  ASSERT_TRUE(config.ok()) << config.status();
  ExpectDefaults(*config);
}

TEST(PreprocessorConfigTest, EmptyObjectGivesTheDefaults) {
  auto config = ParsePreprocessorConfig(json::object());
  ASSERT_TRUE(config.ok()) << config.status();
  ExpectDefaults(*config);
}

TEST(PreprocessorConfigTest, ReadsEveryField) {
  const json file = {{"patch_size", 14},
                     {"temporal_patch_size", 1},
                     {"merge_size", 3},
                     {"size", {{"shortest_edge", 3136}, {"longest_edge", 1000000}}},
                     {"do_rescale", false},
                     {"rescale_factor", 0.5},
                     {"do_normalize", false},
                     {"image_mean", {0.48145466, 0.4578275, 0.40821073}},
                     {"image_std", {0.26862954, 0.26130258, 0.27577711}}};
  auto config = ParsePreprocessorConfig(file);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->patch_size, 14);
  EXPECT_EQ(config->temporal_patch_size, 1);
  EXPECT_EQ(config->merge_size, 3);
  EXPECT_EQ(config->min_pixels, 3136);
  EXPECT_EQ(config->max_pixels, 1000000);
  EXPECT_FALSE(config->do_rescale);
  EXPECT_EQ(config->rescale_factor, 0.5);
  EXPECT_FALSE(config->do_normalize);
  EXPECT_EQ(config->image_mean[0], 0.48145466f);
  EXPECT_EQ(config->image_std[2], 0.27577711f);
  EXPECT_EQ(config->factor(), 42);
  EXPECT_EQ(config->patch_dim(), 3 * 1 * 14 * 14);
}

TEST(PreprocessorConfigTest, TopLevelMinMaxPixelsOverrideSize) {
  // Older Qwen2-VL files carry both; HF lets min_pixels / max_pixels win.
  const json file = {{"min_pixels", 3136},
                     {"max_pixels", 12845056},
                     {"size", {{"shortest_edge", 56 * 56}, {"longest_edge", 28 * 28 * 1280}}}};
  auto config = ParsePreprocessorConfig(file);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->min_pixels, 3136);
  EXPECT_EQ(config->max_pixels, 12845056);
}

TEST(PreprocessorConfigTest, ErrorsNameTheField) {
  const json base = ReadJsonFile(kGoldenDir + "preprocessor_config.json");
  ASSERT_FALSE(base.is_discarded());
  struct Case {
    json patch;  // merged into the golden file (RFC 7396)
    const char* field;
  };
  const Case cases[] = {
      {{{"patch_size", "16"}}, "patch_size"},
      {{{"patch_size", 0}}, "patch_size"},
      {{{"patch_size", -16}}, "patch_size"},
      {{{"patch_size", 16.5}}, "patch_size"},
      {{{"patch_size", 100000}}, "patch_size"},
      {{{"temporal_patch_size", 0}}, "temporal_patch_size"},
      {{{"merge_size", -2}}, "merge_size"},
      {{{"merge_size", true}}, "merge_size"},
      {{{"size", 65536}}, "size"},
      {{{"size", {{"shortest_edge", 0}}}}, "size.shortest_edge"},
      {{{"size", {{"longest_edge", -1}}}}, "size.longest_edge"},
      {{{"size", {{"longest_edge", "big"}}}}, "size.longest_edge"},
      {{{"size", {{"shortest_edge", 1000}, {"longest_edge", 999}}}}, "size.shortest_edge"},
      {{{"min_pixels", 20000000}}, "min_pixels"},
      {{{"max_pixels", 0}}, "max_pixels"},
      {{{"max_pixels", 18446744073709551615ull}}, "max_pixels"},
      {{{"do_rescale", 1}}, "do_rescale"},
      {{{"do_normalize", "yes"}}, "do_normalize"},
      {{{"do_resize", false}}, "do_resize"},
      {{{"do_convert_rgb", false}}, "do_convert_rgb"},
      {{{"rescale_factor", 0}}, "rescale_factor"},
      {{{"rescale_factor", -1.0 / 255}}, "rescale_factor"},
      {{{"rescale_factor", "1/255"}}, "rescale_factor"},
      {{{"rescale_factor", 1e-300}}, "rescale_factor"},
      {{{"resample", 2}}, "resample"},
      {{{"resample", "bicubic"}}, "resample"},
      {{{"image_mean", {0.5, 0.5}}}, "image_mean"},
      {{{"image_mean", {0.5, 0.5, 0.5, 0.5}}}, "image_mean"},
      {{{"image_mean", 0.5}}, "image_mean"},
      {{{"image_mean", {0.5, "0.5", 0.5}}}, "image_mean"},
      {{{"image_std", {0.5, 0.0, 0.5}}}, "image_std"},
      {{{"image_std", {0.5, 0.5, 1e300}}}, "image_std"},
  };
  for (const Case& c : cases) {
    json file = base;
    file.merge_patch(c.patch);
    auto config = ParsePreprocessorConfig(file);
    ASSERT_FALSE(config.ok()) << c.patch.dump();
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.patch.dump();
    EXPECT_NE(config.status().message().find(c.field), absl::string_view::npos)
        << c.patch.dump() << " -> " << config.status();
  }
  EXPECT_FALSE(ParsePreprocessorConfig(json::array()).ok());
  EXPECT_FALSE(ParsePreprocessorConfig(json(3)).ok());
}

// ---- SmartResize / GridOf ----

TEST(SmartResizeTest, GoldenImages) {
  const json cases = GoldenCases();
  const PreprocessorConfig config;
  for (const char* name : {"a_wide", "a_small"}) {
    SCOPED_TRACE(name);
    const json& image = cases["images"][name];
    auto size = SmartResize(image["height"].get<int32_t>(), image["width"].get<int32_t>(), config);
    ASSERT_TRUE(size.ok()) << size.status();
    EXPECT_EQ(size->first, image["smart_resize_hw"][0].get<int32_t>());
    EXPECT_EQ(size->second, image["smart_resize_hw"][1].get<int32_t>());
    EXPECT_EQ(
        image["needs_resize"].get<bool>(),
        *size != std::make_pair(image["height"].get<int32_t>(), image["width"].get<int32_t>()));

    auto grid = GridOf(image["height"].get<int32_t>(), image["width"].get<int32_t>(), config);
    ASSERT_TRUE(grid.ok()) << grid.status();
    EXPECT_EQ(grid->grid_t, image["grid_thw"][0].get<int32_t>());
    EXPECT_EQ(grid->grid_h, image["grid_thw"][1].get<int32_t>());
    EXPECT_EQ(grid->grid_w, image["grid_thw"][2].get<int32_t>());
    EXPECT_EQ(grid->num_tokens, image["num_image_tokens"].get<int64_t>());
    EXPECT_EQ(grid->grid_h / config.merge_size, image["llm_grid_hw"][0].get<int32_t>());
    EXPECT_EQ(grid->grid_w / config.merge_size, image["llm_grid_hw"][1].get<int32_t>());
    EXPECT_EQ(int64_t{grid->grid_t} * grid->grid_h * grid->grid_w,
              image["num_patches"].get<int64_t>());
  }
}

TEST(SmartResizeTest, RoundsHalvesToEven) {
  const PreprocessorConfig config;
  // 2128 / 32 = 66.5 -> 66 (round-half-away would give 67); 3840 / 32 = 120.
  auto size = SmartResize(2128, 3840, config);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, std::make_pair(2112, 3840));
  // 80 / 32 = 2.5 -> 2; 3000 / 32 = 93.75 -> 94.
  size = SmartResize(80, 3000, config);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, std::make_pair(64, 3008));
  // 2160 / 32 = 67.5 -> 68 (a 4K frame).
  size = SmartResize(2160, 3840, config);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, std::make_pair(2176, 3840));
}

TEST(SmartResizeTest, Errors) {
  const PreprocessorConfig config;
  for (auto [h, w] : {std::pair{1, 201}, std::pair{201, 1}, std::pair{100, 20001}}) {
    auto size = SmartResize(h, w, config);
    ASSERT_FALSE(size.ok()) << h << "x" << w;
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(size.status().message().find("aspect ratio"), absl::string_view::npos)
        << size.status();
    EXPECT_FALSE(GridOf(h, w, config).ok());
  }
  EXPECT_TRUE(SmartResize(1, 200, config).ok());
  EXPECT_TRUE(SmartResize(100, 20000, config).ok());
  for (auto [h, w] : {std::pair{0, 10}, std::pair{10, 0}, std::pair{-5, 10}, std::pair{0, 0}}) {
    auto size = SmartResize(h, w, config);
    ASSERT_FALSE(size.ok()) << h << "x" << w;
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(GridOf(h, w, config).ok());
  }
}

TEST(SmartResizeTest, HugeImageClampsUnderMaxPixels) {
  const PreprocessorConfig config;
  for (auto [h, w] : {std::pair{15000, 20000}, std::pair{8000, 8000}, std::pair{100000, 1000},
                      std::pair{46341, 46341}}) {
    auto size = SmartResize(h, w, config);
    ASSERT_TRUE(size.ok()) << size.status();
    SCOPED_TRACE(::testing::Message()
                 << h << "x" << w << " -> " << size->first << "x" << size->second);
    EXPECT_LE(int64_t{size->first} * size->second, config.max_pixels);
    // Not far under: floor loses less than one factor per side.
    EXPECT_GT(int64_t{size->first + 32} * (size->second + 32), config.max_pixels);
    EXPECT_EQ(size->first % 32, 0);
    EXPECT_EQ(size->second % 32, 0);
  }
  // A long thin image under a small max_pixels: the short side is held at one factor (the
  // max(factor, ...) of HF v5), even though the product then exceeds max_pixels.
  PreprocessorConfig small;
  small.min_pixels = 1024;
  small.max_pixels = 65536;
  auto size = SmartResize(100, 20000, small);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->first, 32);
  // beta = sqrt(100 * 20000 / 65536) = 5.524; floor(20000 / beta / 32) * 32 = 113 * 32.
  EXPECT_EQ(size->second, 3616);
}

TEST(SmartResizeTest, TinyImageGrowsOverMinPixels) {
  const PreprocessorConfig config;
  // 10x10: beta = sqrt(65536 / 100) = 25.6, ceil(256 / 32) * 32 = 256.
  auto size = SmartResize(10, 10, config);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, std::make_pair(256, 256));
  size = SmartResize(1, 1, config);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(*size, std::make_pair(256, 256));
  // 1 x 200: rounding gives 0 rows, the min_pixels branch brings it back.
  size = SmartResize(1, 200, config);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_GE(int64_t{size->first} * size->second, config.min_pixels);
  EXPECT_GE(size->first, 32);
}

TEST(SmartResizeTest, PropertiesOverManySizes) {
  const PreprocessorConfig config;
  uint32_t seed = 12345;
  auto next = [&seed](uint32_t bound) {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<int32_t>(1 + (seed >> 8) % bound);
  };
  int checked = 0;
  for (int i = 0; i < 5000; ++i) {
    // Mostly photo-like sizes, some tiny and some huge.
    const uint32_t bound = i % 5 == 0 ? 100 : (i % 5 == 1 ? 60000 : 5000);
    const int32_t h = next(bound), w = next(bound);
    auto size = SmartResize(h, w, config);
    const double aspect = static_cast<double>(std::max(h, w)) / std::min(h, w);
    if (aspect > 200) {
      EXPECT_FALSE(size.ok()) << h << "x" << w;
      continue;
    }
    ASSERT_TRUE(size.ok()) << h << "x" << w << ": " << size.status();
    const auto [rh, rw] = *size;
    SCOPED_TRACE(::testing::Message() << h << "x" << w << " -> " << rh << "x" << rw);
    ASSERT_GE(rh, 32);
    ASSERT_GE(rw, 32);
    EXPECT_EQ(rh % 32, 0);
    EXPECT_EQ(rw % 32, 0);
    const int64_t pixels = int64_t{rh} * rw;
    if (rh > 32 && rw > 32) {  // no max(32, ...) clamp
      EXPECT_LE(pixels, config.max_pixels);
      EXPECT_GE(pixels, config.min_pixels);
    }
    // Each side moves at most one factor from the common scale, so the aspect is kept to
    // within that (the bound only means something once both sides have a few factors).
    if (std::min(rh, rw) >= 96) {
      const double a = 32.0 / (rh - 32), b = 32.0 / (rw - 32);
      const double sh = static_cast<double>(rh) / h, sw = static_cast<double>(rw) / w;
      EXPECT_LE(sh / sw, (1 + a) / (1 - b));
      EXPECT_LE(sw / sh, (1 + b) / (1 - a));
      ++checked;
    }
    // Already multiples of 32 and within bounds: unchanged.
    if (h % 32 == 0 && w % 32 == 0 && int64_t{h} * w >= config.min_pixels &&
        int64_t{h} * w <= config.max_pixels) {
      EXPECT_EQ(rh, h);
      EXPECT_EQ(rw, w);
    }
    auto grid = GridOf(h, w, config);
    ASSERT_TRUE(grid.ok());
    EXPECT_EQ(grid->grid_h, rh / 16);
    EXPECT_EQ(grid->grid_w, rw / 16);
    EXPECT_EQ(grid->num_tokens, pixels / (32 * 32));
  }
  EXPECT_GT(checked, 3000);
}

// ---- ResizeBicubic ----

TEST(ResizeBicubicTest, GoldenSmallImageIsBitExact) {
  const RgbImage small = ReadRgb("a_small_56x40.rgb", 56, 40);
  ASSERT_EQ(small.rgb.size(), 56u * 40 * 3);
  const RgbImage expected = ReadRgb("a_small_resized_320x224.rgb", 320, 224);
  ASSERT_EQ(expected.rgb.size(), 320u * 224 * 3);
  const RgbImage resized = ResizeBicubic(small, 320, 224);
  EXPECT_EQ(resized.width, 320);
  EXPECT_EQ(resized.height, 224);
  ASSERT_EQ(resized.rgb.size(), expected.rgb.size());
  size_t differ = 0;
  int max_diff = 0;
  for (size_t i = 0; i < expected.rgb.size(); ++i) {
    const int d = std::abs(int{resized.rgb[i]} - int{expected.rgb[i]});
    differ += d != 0;
    max_diff = std::max(max_diff, d);
  }
  EXPECT_EQ(differ, 0u) << "max difference " << max_diff;
  EXPECT_EQ(std::memcmp(resized.rgb.data(), expected.rgb.data(), expected.rgb.size()), 0);
}

TEST(ResizeBicubicTest, SameSizeReturnsTheSameBytes) {
  const RgbImage wide = ReadRgb("a_wide_352x192.rgb", 352, 192);
  ASSERT_EQ(wide.rgb.size(), 352u * 192 * 3);
  const RgbImage same = ResizeBicubic(wide, 352, 192);
  EXPECT_EQ(same.width, 352);
  EXPECT_EQ(same.height, 192);
  EXPECT_EQ(same.rgb, wide.rgb);
}

TEST(ResizeBicubicTest, ConstantColourStaysConstant) {
  struct Size {
    int32_t in_w, in_h, out_w, out_h;
  };
  const Size sizes[] = {
      {37, 23, 320, 224},   // up both
      {500, 300, 64, 96},   // down both
      {100, 50, 40, 200},   // down across, up down
      {33, 65, 33, 17},     // vertical only
      {33, 65, 80, 65},     // horizontal only
      {1, 1, 7, 5},         // from one pixel
      {640, 480, 1, 1},     // to one pixel
      {3000, 7, 32, 1000},  // extreme ratios
  };
  const uint8_t colours[][3] = {{0, 0, 0}, {255, 255, 255}, {12, 200, 255}, {1, 128, 254}};
  for (const Size& s : sizes) {
    for (const auto& c : colours) {
      SCOPED_TRACE(::testing::Message()
                   << s.in_w << "x" << s.in_h << " -> " << s.out_w << "x" << s.out_h << " colour "
                   << int{c[0]} << "," << int{c[1]} << "," << int{c[2]});
      const RgbImage out =
          ResizeBicubic(Constant(s.in_w, s.in_h, c[0], c[1], c[2]), s.out_w, s.out_h);
      EXPECT_EQ(out.width, s.out_w);
      EXPECT_EQ(out.height, s.out_h);
      EXPECT_EQ(out.rgb, Constant(s.out_w, s.out_h, c[0], c[1], c[2]).rgb);
    }
  }
}

TEST(ResizeBicubicTest, SeparablePassesAgreeWithSingleAxisResizes) {
  // Resizing one axis at a time through the 8-bit intermediate is what the two-pass resize
  // does, when every source row is needed (an upscale of the height).
  const RgbImage noise = Noise(41, 29, 7);
  const RgbImage both = ResizeBicubic(noise, 67, 45);
  const RgbImage steps = ResizeBicubic(ResizeBicubic(noise, 67, 29), 67, 45);
  EXPECT_EQ(both.rgb, steps.rgb);
  // And a downscale of both axes.
  const RgbImage big = Noise(200, 300, 9);
  EXPECT_EQ(ResizeBicubic(big, 50, 70).rgb, ResizeBicubic(ResizeBicubic(big, 50, 300), 50, 70).rgb);
}

TEST(ResizeBicubicTest, BadArgumentsGiveAnEmptyImage) {
  const RgbImage noise = Noise(8, 8, 1);
  EXPECT_TRUE(ResizeBicubic(noise, 0, 8).rgb.empty());
  EXPECT_TRUE(ResizeBicubic(noise, 8, -1).rgb.empty());
  RgbImage broken = noise;
  broken.rgb.pop_back();
  EXPECT_TRUE(ResizeBicubic(broken, 16, 16).rgb.empty());
}

// ---- PrepareImage / PixelValues ----

TEST(PixelValuesTest, GoldenImagesAreBitExact) {
  const json cases = GoldenCases();
  const PreprocessorConfig config;
  for (const char* name : {"a_wide", "a_small"}) {
    SCOPED_TRACE(name);
    const json& info = cases["images"][name];
    const RgbImage raw = ReadRgb(info["rgb"].get<std::string>(), info["width"].get<int32_t>(),
                                 info["height"].get<int32_t>());
    ASSERT_EQ(raw.rgb.size(), static_cast<size_t>(raw.width) * raw.height * 3);
    auto prepared = PrepareImage(raw, config);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    EXPECT_EQ(prepared->grid_t, info["grid_thw"][0].get<int32_t>());
    EXPECT_EQ(prepared->grid_h, info["grid_thw"][1].get<int32_t>());
    EXPECT_EQ(prepared->grid_w, info["grid_thw"][2].get<int32_t>());
    EXPECT_EQ(prepared->num_patches(), info["num_patches"].get<int64_t>());
    EXPECT_EQ(prepared->num_tokens(config.merge_size), info["num_image_tokens"].get<int64_t>());
    EXPECT_EQ(prepared->resized.height, info["smart_resize_hw"][0].get<int32_t>());
    EXPECT_EQ(prepared->resized.width, info["smart_resize_hw"][1].get<int32_t>());

    const std::vector<float> values = PixelValues(*prepared, config);
    const json& pv = info["pixel_values"];
    const int64_t rows = pv["shape"][0].get<int64_t>(), cols = pv["shape"][1].get<int64_t>();
    ASSERT_EQ(cols, config.patch_dim());
    ASSERT_EQ(values.size(), static_cast<size_t>(rows * cols));
    for (int k = 0; k < 8; ++k) {
      EXPECT_EQ(values[k], pv["row0_first8"][k].get<float>()) << k;
      EXPECT_EQ(values[cols + k], pv["row1_first8"][k].get<float>()) << k;
    }
    double sum = 0, l2 = 0;
    for (float v : values) {
      sum += v;
      l2 += static_cast<double>(v) * v;
    }
    // Only the summation order differs from the generator's float64 sums.
    EXPECT_NEAR(sum, pv["sum"].get<double>(), 1e-9 * std::abs(pv["sum"].get<double>()));
    EXPECT_NEAR(std::sqrt(l2), pv["l2"].get<double>(), 1e-9 * pv["l2"].get<double>());

    auto golden = ReadSafetensorsF32(kGoldenDir + "case_tensors.safetensors",
                                     pv["tensor"].get<std::string>());
    ASSERT_TRUE(golden.has_value());
    ASSERT_EQ(golden->shape, (std::vector<int64_t>{rows, cols}));
    size_t differ = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::memcmp(&values[i], &golden->values[i], sizeof(float)) != 0 && differ++ < 5) {
        ADD_FAILURE() << "row " << i / cols << " col " << i % cols << ": " << values[i]
                      << " vs golden " << golden->values[i];
      }
    }
    EXPECT_EQ(differ, 0u);
    EXPECT_EQ(std::memcmp(values.data(), golden->values.data(), values.size() * sizeof(float)), 0);
  }
}

TEST(PixelValuesTest, ResizedGoldenBytesGiveTheGoldenValues) {
  // The stored resized image alone (no resize here) yields the stored pixel_values: the
  // normalisation and patch order are checked apart from the resampling.
  PreparedImage prepared;
  prepared.grid_h = 14;
  prepared.grid_w = 20;
  prepared.resized = ReadRgb("a_small_resized_320x224.rgb", 320, 224);
  const std::vector<float> values = PixelValues(prepared, PreprocessorConfig());
  auto golden =
      ReadSafetensorsF32(kGoldenDir + "case_tensors.safetensors", "image.a_small.pixel_values");
  ASSERT_TRUE(golden.has_value());
  ASSERT_EQ(values.size(), golden->values.size());
  EXPECT_EQ(std::memcmp(values.data(), golden->values.data(), values.size() * sizeof(float)), 0);
}

// A PreparedImage of `image` as it stands (its size a multiple of patch * merge).
PreparedImage AsPrepared(RgbImage image, const PreprocessorConfig& config) {
  PreparedImage p;
  p.grid_h = image.height / config.patch_size;
  p.grid_w = image.width / config.patch_size;
  p.resized = std::move(image);
  return p;
}

TEST(PixelValuesTest, NormalisationIsCorrectlyRoundedForEveryByte) {
  // mean = std = 0.5 with rescale 1/255: every byte gives the float nearest (2x - 255) / 255.
  // (The unfused fp32 form (x * float(1/255) - 0.5) / 0.5 misses this for most bytes.)
  RgbImage image = Constant(32, 32, 0, 0, 0);
  for (size_t i = 0; i < image.rgb.size(); ++i) image.rgb[i] = static_cast<uint8_t>(i / 3 % 256);
  const PreprocessorConfig config;
  const std::vector<float> values = PixelValues(AsPrepared(image, config), config);
  ASSERT_EQ(values.size(), 4u * 1536);
  std::vector<bool> seen(256, false);
  // Patch 0 (top-left), channel 0, slice 0: pixel (py, px) is byte (py * 32 + px) % 256.
  for (int py = 0; py < 16; ++py) {
    for (int px = 0; px < 16; ++px) {
      const int x = (py * 32 + px) % 256;
      const float expected = static_cast<float>((2.0 * x - 255.0) / 255.0);
      EXPECT_EQ(values[py * 16 + px], expected) << x;
      seen[x] = true;
    }
  }
  // Patch 1 (columns 16..31) covers the other half of the bytes.
  for (int py = 0; py < 16; ++py) {
    for (int px = 0; px < 16; ++px) {
      const int x = (py * 32 + 16 + px) % 256;
      EXPECT_EQ(values[1536 + py * 16 + px], static_cast<float>((2.0 * x - 255.0) / 255.0)) << x;
      seen[x] = true;
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 256);
}

TEST(PixelValuesTest, PatchOrderFollowsTheDocumentedIndexing) {
  // An independent index-by-index restatement of the layout on a non-square grid, with a
  // non-default temporal size and an identity value mapping (no rescale, no normalise).
  PreprocessorConfig config;
  config.temporal_patch_size = 3;
  config.do_rescale = false;
  config.do_normalize = false;
  const int P = 16, m = 2, T = 3;
  const RgbImage image = Noise(6 * P, 4 * P, 3);  // grid 4 x 6 patches
  const std::vector<float> values = PixelValues(AsPrepared(image, config), config);
  const int gh = 4, gw = 6, dim = 3 * T * P * P;
  ASSERT_EQ(values.size(), static_cast<size_t>(gh * gw * dim));
  for (int r = 0; r < gh; ++r) {
    for (int c = 0; c < gw; ++c) {
      const int n = ((r / m * (gw / m) + c / m) * m + r % m) * m + c % m;
      for (int ch = 0; ch < 3; ++ch) {
        for (int tt = 0; tt < T; ++tt) {
          for (int py = 0; py < P; ++py) {
            for (int px = 0; px < P; ++px) {
              const int k = ((ch * T + tt) * P + py) * P + px;
              const uint8_t byte = image.rgb[((r * P + py) * image.width + c * P + px) * 3 + ch];
              ASSERT_EQ(values[static_cast<size_t>(n) * dim + k], static_cast<float>(byte))
                  << "r " << r << " c " << c << " k " << k;
            }
          }
        }
      }
    }
  }
}

TEST(PixelValuesTest, OtherMeanAndStd) {
  PreprocessorConfig config;
  config.image_mean = {0.48145466f, 0.4578275f, 0.40821073f};
  config.image_std = {0.26862954f, 0.26130258f, 0.27577711f};
  const RgbImage image = Noise(32, 32, 5);
  const std::vector<float> values = PixelValues(AsPrepared(image, config), config);
  ASSERT_EQ(values.size(), 4u * 1536);
  // Patch 0, each channel's slice 0 and 1 against the exact value.
  for (int ch = 0; ch < 3; ++ch) {
    for (int tt = 0; tt < 2; ++tt) {
      for (int i = 0; i < 256; ++i) {
        const uint8_t byte = image.rgb[((i / 16) * 32 + i % 16) * 3 + ch];
        const double exact = (byte / 255.0 - config.image_mean[ch]) / config.image_std[ch];
        EXPECT_NEAR(values[(ch * 2 + tt) * 256 + i], exact, 2e-6) << ch << " " << i;
      }
    }
  }
  // Rescale only: x * rescale_factor.
  config.do_normalize = false;
  const std::vector<float> rescaled = PixelValues(AsPrepared(image, config), config);
  ASSERT_EQ(rescaled.size(), 4u * 1536);
  EXPECT_EQ(rescaled[0], static_cast<float>(image.rgb[0]) * static_cast<float>(1.0 / 255));
}

TEST(PixelValuesTest, InconsistentImageGivesNothing) {
  const PreprocessorConfig config;
  PreparedImage prepared = AsPrepared(Noise(64, 32, 1), config);
  EXPECT_EQ(PixelValues(prepared, config).size(), 8u * 1536);
  PreparedImage odd = prepared;
  odd.grid_w = 3;  // not a multiple of merge_size
  EXPECT_TRUE(PixelValues(odd, config).empty());
  PreparedImage wrong = prepared;
  wrong.grid_h = 4;  // disagrees with the image's height
  EXPECT_TRUE(PixelValues(wrong, config).empty());
}

TEST(PrepareImageTest, ResizesOnlyWhenNeeded) {
  const PreprocessorConfig config;
  const RgbImage wide = ReadRgb("a_wide_352x192.rgb", 352, 192);
  auto same = PrepareImage(wide, config);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->resized.rgb, wide.rgb);

  const RgbImage noise = Noise(1000, 700, 2);
  auto resized = PrepareImage(noise, config);
  ASSERT_TRUE(resized.ok()) << resized.status();
  auto size = SmartResize(700, 1000, config);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(resized->resized.height, size->first);
  EXPECT_EQ(resized->resized.width, size->second);
  EXPECT_EQ(resized->resized.rgb, ResizeBicubic(noise, size->second, size->first).rgb);
  EXPECT_EQ(resized->num_tokens(config.merge_size), GridOf(700, 1000, config)->num_tokens);
}

TEST(PrepareImageTest, Errors) {
  const PreprocessorConfig config;
  RgbImage broken = Noise(40, 40, 1);
  broken.rgb.resize(10);
  EXPECT_EQ(PrepareImage(broken, config).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareImage(RgbImage(), config).status().code(), absl::StatusCode::kInvalidArgument);
  auto thin = PrepareImage(Noise(402, 2, 1), config);
  ASSERT_FALSE(thin.ok());
  EXPECT_NE(thin.status().message().find("aspect ratio"), absl::string_view::npos);
}

}  // namespace
}  // namespace tandem::workers::vision
