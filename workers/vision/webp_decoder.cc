#include <webp/decode.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "workers/vision/image_codecs.h"

// WebP
namespace tandem::workers::vision::internal {
namespace {

absl::string_view WebpStatusText(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OK:
      return "ok";
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "the data is cut short";
  }
  return "unknown error";
}

absl::Status WebpFeatures(absl::string_view data, WebPBitstreamFeatures* features) {
  const VP8StatusCode status = WebPGetFeatures(Bytes(data), data.size(), features);
  if (status != VP8_STATUS_OK) return MalformedImage(ImageFormat::kWebp, WebpStatusText(status));
  if (features->has_animation) {
    return absl::InvalidArgumentError("animated WebP images are not supported");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RgbImage> DecodeWebp(absl::string_view data, const ImageDecodeLimits& limits,
                                    BufferBytes* bytes) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return absl::InternalError("libwebp version mismatch");
  if (absl::Status s = WebpFeatures(data, &config.input); !s.ok()) return s;
  const int64_t width = config.input.width;
  const int64_t height = config.input.height;
  if (absl::Status s = CheckDimensions(ImageFormat::kWebp, width, height, &limits); !s.ok()) {
    return s;
  }
  // MODE_RGB drops alpha without premultiplying: transparent pixels keep their colour. libwebp
  // allocates its output itself, after it has checked that the bitstream's partitions are all
  // present: a cut file fails before any pixel buffer is written. It is copied out once whole.
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 0;
  const VP8StatusCode status = WebPDecode(Bytes(data), data.size(), &config);
  struct Freer {
    WebPDecBuffer* buffer;
    ~Freer() { WebPFreeDecBuffer(buffer); }
  } freer{&config.output};
  if (status != VP8_STATUS_OK) return MalformedImage(ImageFormat::kWebp, WebpStatusText(status));
  if (config.output.width != width || config.output.height != height) {
    return MalformedImage(ImageFormat::kWebp, "the decoded size differs from the header's");
  }
  RgbImage image;
  image.width = static_cast<int32_t>(width);
  image.height = static_cast<int32_t>(height);
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  GrowingRows rows(&image.rgb, row_bytes, height, bytes);
  uint8_t* out = rows.AppendAll();
  const WebPRGBABuffer& decoded = config.output.u.RGBA;
  for (int64_t y = 0; y < height; ++y) {
    std::memcpy(out + y * row_bytes, decoded.rgba + y * decoded.stride, row_bytes);
  }
  return image;
}

absl::StatusOr<ImageSize> ProbeWebp(absl::string_view data) {
  WebPBitstreamFeatures features;
  if (absl::Status s = WebpFeatures(data, &features); !s.ok()) return s;
  if (absl::Status s =
          CheckDimensions(ImageFormat::kWebp, features.width, features.height, nullptr);
      !s.ok()) {
    return s;
  }
  ImageSize size;
  size.format = ImageFormat::kWebp;
  size.width = features.width;
  size.height = features.height;
  return size;
}

}  // namespace tandem::workers::vision::internal
