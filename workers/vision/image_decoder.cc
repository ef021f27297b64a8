#include "workers/vision/image_decoder.h"

namespace tandem::workers::vision {

absl::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kWebp:
      return "webp";
    case ImageFormat::kGif:
      return "gif";
  }
  return "unknown";
}

absl::StatusOr<ImageFormat> SniffImageFormat(absl::string_view data) {
  (void)data;
  return absl::UnimplementedError("image decoding is being written");
}

absl::StatusOr<ImageSize> ProbeImageSize(absl::string_view data, absl::string_view mime_type) {
  (void)data;
  (void)mime_type;
  return absl::UnimplementedError("image decoding is being written");
}

absl::StatusOr<RgbImage> DecodeImage(absl::string_view data, absl::string_view mime_type,
                                     const ImageDecodeLimits& limits) {
  (void)data;
  (void)mime_type;
  (void)limits;
  return absl::UnimplementedError("image decoding is being written");
}

}  // namespace tandem::workers::vision
