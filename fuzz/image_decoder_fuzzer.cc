// libFuzzer target: image bytes through the decoder (PNG, JPEG, WebP, GIF) and the probe.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "workers/vision/image_decoder.h"

namespace {

// The labels the first byte picks from: the four formats (so each library is reached whatever
// the signature), jpg and a case variant, and two the decoder refuses.
constexpr absl::string_view kLabels[] = {"image/png", "image/jpeg", "image/webp", "image/gif",
                                         "image/jpg", "IMAGE/PNG",  "image/bmp",  ""};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::workers::vision;
  if (size == 0) return 0;
  const absl::string_view label = kLabels[data[0] % (sizeof(kLabels) / sizeof(kLabels[0]))];
  const absl::string_view image(reinterpret_cast<const char*>(data + 1), size - 1);
  // Small limits keep every allocation small (4 MP: a 12 MB RGB buffer, and libjpeg's
  // coefficients or libwebp's ARGB planes a few times that) under fuzz.sh's -rss_limit_mb.
  ImageDecodeLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_pixels = 4 << 20;
  const absl::StatusOr<ImageSize> probed = ProbeImageSize(image, label);
  const absl::StatusOr<RgbImage> decoded = DecodeImage(image, label, limits);
  if (decoded.ok()) {
    // What callers rely on: the buffer matches the size, and the probe agrees with the decode.
    const RgbImage& rgb = *decoded;
    if (rgb.width <= 0 || rgb.height <= 0 ||
        rgb.rgb.size() != static_cast<size_t>(rgb.width) * rgb.height * 3 ||
        int64_t{rgb.width} * rgb.height > limits.max_pixels) {
      __builtin_trap();
    }
    if (!probed.ok() || probed->width != rgb.width || probed->height != rgb.height) {
      __builtin_trap();
    }
  }
  return 0;
}
