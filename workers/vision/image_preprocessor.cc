#include "workers/vision/image_preprocessor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tandem::workers::vision {
namespace {

using nlohmann::json;

// Upper bounds on the integer fields: far above any released model, low enough that
// factor() (patch * merge) and patch_dim() cannot overflow and a bad file fails clearly.
constexpr int64_t kMaxPatchSize = 1024;
constexpr int64_t kMaxMergeSize = 64;
constexpr int64_t kMaxTemporalPatchSize = 64;
// Bounds on size.shortest_edge / longest_edge (pixels): 2^40 keeps every product of SmartResize
// exact in double (< 2^53).
constexpr int64_t kMaxPixelsBound = int64_t{1} << 40;

// A JSON value for an error message, cut short so a huge value does not flood the log.
std::string Shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

absl::Status FieldError(absl::string_view field, absl::string_view what, const json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat("preprocessor config: ", field, " must be ", what, ", got ", Shown(value)));
}

// `object[key]` into *out when present: an integer in [1, max].
absl::Status ReadPositiveInt(const json& object, const char* key, absl::string_view field,
                             int64_t max, int64_t* out) {
  auto it = object.find(key);
  if (it == object.end()) return absl::OkStatus();
  const std::string what = absl::StrCat("an integer in [1, ", max, "]");
  if (!it->is_number_integer()) return FieldError(field, what, *it);
  // Unsigned JSON integers above int64 range would wrap in get<int64_t>().
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(max)) {
    return FieldError(field, what, *it);
  }
  const int64_t value = it->get<int64_t>();
  if (value < 1 || value > max) return FieldError(field, what, *it);
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadBool(const json& object, const char* key, bool* out) {
  auto it = object.find(key);
  if (it == object.end()) return absl::OkStatus();
  if (!it->is_boolean()) return FieldError(key, "true or false", *it);
  *out = it->get<bool>();
  return absl::OkStatus();
}

// image_mean / image_std: exactly 3 finite numbers (R, G, B); a std must also be non-zero.
absl::Status ReadTriple(const json& object, const char* key, bool is_std,
                        std::array<float, 3>* out) {
  auto it = object.find(key);
  if (it == object.end()) return absl::OkStatus();
  const char* what = is_std ? "a list of 3 non-zero numbers" : "a list of 3 numbers";
  if (!it->is_array() || it->size() != 3) return FieldError(key, what, *it);
  std::array<float, 3> values{};
  for (size_t c = 0; c < 3; ++c) {
    const json& v = (*it)[c];
    if (!v.is_number()) return FieldError(key, what, *it);
    const double d = v.get<double>();
    // The value is used as float32 (as HF's torch tensors hold it).
    const float f = static_cast<float>(d);
    if (!std::isfinite(f) || (is_std && f == 0.0f)) return FieldError(key, what, *it);
    values[c] = f;
  }
  *out = values;
  return absl::OkStatus();
}

// The pixel bounds: size.shortest_edge / size.longest_edge (HF v5 names; "edge" is a misnomer,
// they bound height * width), overridden by top-level min_pixels / max_pixels as HF does for
// older Qwen2-VL configs that carry both.
absl::Status ReadPixelBounds(const json& config, PreprocessorConfig* out) {
  auto size = config.find("size");
  if (size != config.end()) {
    if (!size->is_object()) return FieldError("size", "an object", *size);
    if (absl::Status s = ReadPositiveInt(*size, "shortest_edge", "size.shortest_edge",
                                         kMaxPixelsBound, &out->min_pixels);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ReadPositiveInt(*size, "longest_edge", "size.longest_edge",
                                         kMaxPixelsBound, &out->max_pixels);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s =
          ReadPositiveInt(config, "min_pixels", "min_pixels", kMaxPixelsBound, &out->min_pixels);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReadPositiveInt(config, "max_pixels", "max_pixels", kMaxPixelsBound, &out->max_pixels);
      !s.ok()) {
    return s;
  }
  if (out->min_pixels > out->max_pixels) {
    return absl::InvalidArgumentError(
        absl::StrCat("preprocessor config: size.shortest_edge (min_pixels, ", out->min_pixels,
                     ") must not exceed size.longest_edge (max_pixels, ", out->max_pixels, ")"));
  }
  return absl::OkStatus();
}

// Python's round() on a double: halves go to the even neighbour.
double RoundHalfEven(double x) {
  const double lower = std::floor(x);
  const double diff = x - lower;
  if (diff > 0.5) return lower + 1.0;
  if (diff < 0.5) return lower;
  return std::fmod(lower, 2.0) == 0.0 ? lower : lower + 1.0;
}

// ---- Pillow's BICUBIC resampling (libImaging Resample.c, 8 bits per channel) ----

// Fraction bits of the fixed-point weights: 32 - 8 (pixel) - 2 (headroom for the overshoot of
// the cubic's negative lobes), as Pillow's PRECISION_BITS.
constexpr int kPrecisionBits = 22;

// Keys' cubic convolution kernel with a = -0.5 (Pillow's bicubic_filter); support 2.
double BicubicKernel(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// One axis's taps: output i reads `count[i]` inputs from `first[i]` with weights
// weights[i * stride ...] (fixed point, kPrecisionBits fraction bits).
struct AxisTaps {
  int32_t stride = 0;
  std::vector<int32_t> first;
  std::vector<int32_t> count;
  std::vector<int32_t> weights;
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the full box [0, in_size).
AxisTaps ComputeTaps(int32_t in_size, int32_t out_size) {
  constexpr double kFilterSupport = 2.0;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = kFilterSupport * filter_scale;
  // Pillow multiplies by the reciprocal (not divides by filter_scale): a different last bit
  // could flip a fixed-point rounding.
  const double inv_filter_scale = 1.0 / filter_scale;
  AxisTaps taps;
  taps.stride = static_cast<int32_t>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.weights.assign(static_cast<size_t>(out_size) * taps.stride, 0);
  std::vector<double> w(taps.stride);
  for (int32_t i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    // (int) truncates toward zero, as in C; negative starts are clamped to 0 anyway.
    const int32_t xmin = std::max(0, static_cast<int32_t>(center - support + 0.5));
    const int32_t xmax = std::min(in_size, static_cast<int32_t>(center + support + 0.5)) - xmin;
    double sum = 0.0;
    for (int32_t x = 0; x < xmax; ++x) {
      w[x] = BicubicKernel((x + xmin - center + 0.5) * inv_filter_scale);
      sum += w[x];
    }
    int32_t* fixed = &taps.weights[static_cast<size_t>(i) * taps.stride];
    for (int32_t x = 0; x < xmax; ++x) {
      const double normalized = sum != 0.0 ? w[x] / sum : w[x];
      const double scaled = normalized * (1 << kPrecisionBits);
      fixed[x] = static_cast<int32_t>(normalized < 0.0 ? scaled - 0.5 : scaled + 0.5);
    }
    taps.first[i] = xmin;
    taps.count[i] = xmax;
  }
  return taps;
}

// Pillow's clip8: the accumulator (with its 2^21 rounding offset) back to a byte.
inline uint8_t Clip8(int32_t v) {
  if (v >= (255 << kPrecisionBits)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// Horizontal pass: rows [row_begin, row_begin + rows) of `in` (width in_w) to `out_w` columns.
void ResampleHorizontal(const uint8_t* in, int32_t in_w, int32_t row_begin, int32_t rows,
                        const AxisTaps& taps, int32_t out_w, uint8_t* out) {
  constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);
  for (int32_t y = 0; y < rows; ++y) {
    const uint8_t* src = in + static_cast<size_t>(row_begin + y) * in_w * 3;
    uint8_t* dst = out + static_cast<size_t>(y) * out_w * 3;
    for (int32_t x = 0; x < out_w; ++x) {
      const int32_t* k = &taps.weights[static_cast<size_t>(x) * taps.stride];
      const uint8_t* p = src + static_cast<size_t>(taps.first[x]) * 3;
      int32_t r = kHalf, g = kHalf, b = kHalf;
      for (int32_t t = 0; t < taps.count[x]; ++t, p += 3) {
        r += p[0] * k[t];
        g += p[1] * k[t];
        b += p[2] * k[t];
      }
      dst[3 * x + 0] = Clip8(r);
      dst[3 * x + 1] = Clip8(g);
      dst[3 * x + 2] = Clip8(b);
    }
  }
}

// Vertical pass: `in` (width w, rows indexed from the taps' `first` minus `row_offset`) to
// out_h rows. Row at a time over all w * 3 values, so the inner loop is contiguous.
void ResampleVertical(const uint8_t* in, int32_t w, int32_t row_offset, const AxisTaps& taps,
                      int32_t out_h, uint8_t* out) {
  constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);
  const size_t row_bytes = static_cast<size_t>(w) * 3;
  std::vector<int32_t> acc(row_bytes);
  for (int32_t y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), kHalf);
    const int32_t* k = &taps.weights[static_cast<size_t>(y) * taps.stride];
    for (int32_t t = 0; t < taps.count[y]; ++t) {
      const uint8_t* src = in + static_cast<size_t>(taps.first[y] - row_offset + t) * row_bytes;
      const int32_t weight = k[t];
      for (size_t i = 0; i < row_bytes; ++i) acc[i] += src[i] * weight;
    }
    uint8_t* dst = out + static_cast<size_t>(y) * row_bytes;
    for (size_t i = 0; i < row_bytes; ++i) dst[i] = Clip8(acc[i]);
  }
}

// The float each byte value becomes, per channel, as HF computes it in fp32 (see PixelValues).
std::array<std::array<float, 256>, 3> ValueTables(const PreprocessorConfig& config) {
  std::array<std::array<float, 256>, 3> table{};
  // HF's fast processor (Qwen2VLImageProcessorFast, torch) fuses rescale and normalise:
  // mean' = mean * (1 / rescale_factor) and std' = std * (1 / rescale_factor), where the
  // reciprocal is a Python double that torch applies to the float32 tensor as a float32
  // scalar; then (x - mean') / std' in float32. For mean = std = 0.5 that is
  // (x - 127.5f) / 127.5f: x - 127.5 is exact, so it is the correctly rounded (2x - 255) / 255,
  // which the golden pixel_values hold. The unfused fp32 form (x * float(1/255) - 0.5) / 0.5
  // rounds twice and differs in the last bit for 207 of the 256 byte values.
  const float inv_rescale = static_cast<float>(1.0 / config.rescale_factor);
  const float rescale = static_cast<float>(config.rescale_factor);
  for (int c = 0; c < 3; ++c) {
    float mean = config.image_mean[c];
    float std = config.image_std[c];
    if (config.do_rescale && config.do_normalize) {
      mean = mean * inv_rescale;
      std = std * inv_rescale;
    }
    for (int x = 0; x < 256; ++x) {
      float v = static_cast<float>(x);
      if (config.do_normalize) {
        v = (v - mean) / std;
      } else if (config.do_rescale) {
        v = v * rescale;
      }
      table[c][x] = v;
    }
  }
  return table;
}

}  // namespace

absl::StatusOr<PreprocessorConfig> ParsePreprocessorConfig(const json& config) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("preprocessor config must be a JSON object, got ", Shown(config)));
  }
  PreprocessorConfig out;
  int64_t patch = out.patch_size, temporal = out.temporal_patch_size, merge = out.merge_size;
  if (absl::Status s = ReadPositiveInt(config, "patch_size", "patch_size", kMaxPatchSize, &patch);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadPositiveInt(config, "temporal_patch_size", "temporal_patch_size",
                                       kMaxTemporalPatchSize, &temporal);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadPositiveInt(config, "merge_size", "merge_size", kMaxMergeSize, &merge);
      !s.ok()) {
    return s;
  }
  out.patch_size = static_cast<int32_t>(patch);
  out.temporal_patch_size = static_cast<int32_t>(temporal);
  out.merge_size = static_cast<int32_t>(merge);
  if (absl::Status s = ReadPixelBounds(config, &out); !s.ok()) return s;
  if (absl::Status s = ReadBool(config, "do_rescale", &out.do_rescale); !s.ok()) return s;
  if (absl::Status s = ReadBool(config, "do_normalize", &out.do_normalize); !s.ok()) return s;
  // The worker always resizes (smart_resize) and takes RGB: other values are not supported.
  for (const char* key : {"do_resize", "do_convert_rgb"}) {
    bool value = true;
    if (absl::Status s = ReadBool(config, key, &value); !s.ok()) return s;
    if (!value) return FieldError(key, "true (the only setting supported)", json(false));
  }
  if (auto it = config.find("resample"); it != config.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 3) {
      return FieldError("resample", "3 (BICUBIC, the only filter supported)", *it);
    }
  }
  if (auto it = config.find("rescale_factor"); it != config.end()) {
    const double v = it->is_number() ? it->get<double>() : 0.0;
    // Used as float32 (v itself, or 1 / v when fused with the normalisation): both must be
    // finite and non-zero there.
    if (!(v > 0.0 && std::isfinite(static_cast<float>(v)) && static_cast<float>(v) > 0.0f &&
          std::isfinite(static_cast<float>(1.0 / v)))) {
      return FieldError("rescale_factor", "a positive number", *it);
    }
    out.rescale_factor = v;
  }
  if (absl::Status s = ReadTriple(config, "image_mean", false, &out.image_mean); !s.ok()) return s;
  if (absl::Status s = ReadTriple(config, "image_std", true, &out.image_std); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::pair<int32_t, int32_t>> SmartResize(int32_t height, int32_t width,
                                                        const PreprocessorConfig& config) {
  if (height <= 0 || width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("image size ", width, "x", height, " must be positive"));
  }
  // Doubles throughout, as the Python original computes: every integer here is < 2^53.
  const double h = height, w = width;
  if (std::max(h, w) / std::min(h, w) > 200.0) {
    return absl::InvalidArgumentError(absl::StrCat("image ", width, "x", height,
                                                   ": aspect ratio must be at most 200, got ",
                                                   std::max(h, w) / std::min(h, w)));
  }
  const double factor = config.factor();
  double h_bar = RoundHalfEven(h / factor) * factor;
  double w_bar = RoundHalfEven(w / factor) * factor;
  const double min_pixels = static_cast<double>(config.min_pixels);
  const double max_pixels = static_cast<double>(config.max_pixels);
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(h * w / max_pixels);
    h_bar = std::max(factor, std::floor(h / beta / factor) * factor);
    w_bar = std::max(factor, std::floor(w / beta / factor) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(min_pixels / (h * w));
    h_bar = std::ceil(h * beta / factor) * factor;
    w_bar = std::ceil(w * beta / factor) * factor;
  }
  constexpr double kMaxSide = std::numeric_limits<int32_t>::max();
  if (h_bar > kMaxSide || w_bar > kMaxSide) {
    return absl::InvalidArgumentError(
        absl::StrCat("image ", width, "x", height, ": resized size is out of range"));
  }
  return std::make_pair(static_cast<int32_t>(h_bar), static_cast<int32_t>(w_bar));
}

RgbImage ResizeBicubic(const RgbImage& image, int32_t width, int32_t height) {
  if (width <= 0 || height <= 0 || image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return RgbImage();
  }
  if (width == image.width && height == image.height) return image;
  const bool horizontal = width != image.width;
  const bool vertical = height != image.height;
  RgbImage out;
  out.width = width;
  out.height = height;
  out.rgb.resize(static_cast<size_t>(width) * height * 3);
  if (!vertical) {
    ResampleHorizontal(image.rgb.data(), image.width, 0, height, ComputeTaps(image.width, width),
                       width, out.rgb.data());
    return out;
  }
  const AxisTaps vtaps = ComputeTaps(image.height, height);
  if (!horizontal) {
    ResampleVertical(image.rgb.data(), width, 0, vtaps, height, out.rgb.data());
    return out;
  }
  // Only the source rows the vertical pass reads go through the horizontal pass, into an 8-bit
  // intermediate (Pillow clips there: a float pipeline would not, and differs by up to 19).
  const int32_t row_begin = vtaps.first.front();
  const int32_t row_end = vtaps.first.back() + vtaps.count.back();
  std::vector<uint8_t> temp(static_cast<size_t>(width) * (row_end - row_begin) * 3);
  ResampleHorizontal(image.rgb.data(), image.width, row_begin, row_end - row_begin,
                     ComputeTaps(image.width, width), width, temp.data());
  ResampleVertical(temp.data(), width, row_begin, vtaps, height, out.rgb.data());
  return out;
}

absl::StatusOr<ImageGrid> GridOf(int32_t height, int32_t width, const PreprocessorConfig& config) {
  auto size = SmartResize(height, width, config);
  if (!size.ok()) return size.status();
  ImageGrid grid;
  // A still image is one frame, padded to temporal_patch_size frames: one temporal patch.
  grid.grid_t = 1;
  grid.grid_h = size->first / config.patch_size;
  grid.grid_w = size->second / config.patch_size;
  grid.num_tokens = int64_t{grid.grid_t} * grid.grid_h * grid.grid_w /
                    (int64_t{config.merge_size} * config.merge_size);
  return grid;
}

absl::StatusOr<PreparedImage> PrepareImage(RgbImage image, const PreprocessorConfig& config) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return absl::InvalidArgumentError(absl::StrCat("image ", image.width, "x", image.height,
                                                   " has ", image.rgb.size(),
                                                   " bytes, not width * height * 3"));
  }
  auto size = SmartResize(image.height, image.width, config);
  if (!size.ok()) return size.status();
  const auto [height, width] = *size;
  PreparedImage prepared;
  prepared.grid_t = 1;
  prepared.grid_h = height / config.patch_size;
  prepared.grid_w = width / config.patch_size;
  if (height == image.height && width == image.width) {
    prepared.resized = std::move(image);
  } else {
    prepared.resized = ResizeBicubic(image, width, height);
  }
  return prepared;
}

std::vector<float> PixelValues(const PreparedImage& image, const PreprocessorConfig& config) {
  const int32_t p = config.patch_size;
  const int32_t m = config.merge_size;
  const int32_t temporal = config.temporal_patch_size;
  const RgbImage& rgb = image.resized;
  // Only an image PrepareImage made (or one consistent with it) has a patch layout.
  if (image.grid_t < 1 || image.grid_h <= 0 || image.grid_w <= 0 || image.grid_h % m != 0 ||
      image.grid_w % m != 0 || rgb.height != image.grid_h * p || rgb.width != image.grid_w * p ||
      rgb.rgb.size() != static_cast<size_t>(rgb.width) * rgb.height * 3) {
    return {};
  }
  const auto table = ValueTables(config);
  const int64_t dim = config.patch_dim();
  const size_t plane = static_cast<size_t>(p) * p;  // values of one (ch, tt) slice
  std::vector<float> out(static_cast<size_t>(image.num_patches()) * dim);
  float* row = out.data();
  const size_t stride = static_cast<size_t>(rgb.width) * 3;
  // Rows in merge-block order; every temporal group and slice repeats the one frame.
  for (int32_t t = 0; t < image.grid_t; ++t) {
    for (int32_t bh = 0; bh < image.grid_h / m; ++bh) {
      for (int32_t bw = 0; bw < image.grid_w / m; ++bw) {
        for (int32_t mh = 0; mh < m; ++mh) {
          for (int32_t mw = 0; mw < m; ++mw, row += dim) {
            const uint8_t* origin = rgb.rgb.data() + static_cast<size_t>(bh * m + mh) * p * stride +
                                    static_cast<size_t>(bw * m + mw) * p * 3;
            for (int32_t ch = 0; ch < 3; ++ch) {
              float* slice = row + static_cast<size_t>(ch) * temporal * plane;
              const float* lut = table[ch].data();
              for (int32_t py = 0; py < p; ++py) {
                const uint8_t* src = origin + py * stride + ch;
                float* dst = slice + static_cast<size_t>(py) * p;
                for (int32_t px = 0; px < p; ++px) dst[px] = lut[src[3 * px]];
              }
              for (int32_t tt = 1; tt < temporal; ++tt) {
                std::memcpy(slice + tt * plane, slice, plane * sizeof(float));
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace tandem::workers::vision
