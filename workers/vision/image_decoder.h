#pragma once

// Decoding of the image formats a request may carry (PNG, JPEG, WebP, GIF's first frame) into
// 8-bit RGB, with Debian's well-kept libraries (libpng, libjpeg-turbo, libwebp, giflib). Images
// come from callers: every entry point bounds its input bytes, the decoded pixels (checked from
// the header before any pixel buffer is allocated) and never reads past the input.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::workers::vision {

// The limits every decode applies; each is a worker flag (docs/configuration.md).
struct ImageDecodeLimits {
  // Encoded bytes of one image.
  int64_t max_bytes = 20ll << 20;
  // width * height of the decoded image (64 MP by default: a 50 MP photo fits; its RGB buffer
  // is at most 192 MiB).
  int64_t max_pixels = 64ll << 20;
};

// The formats the decoder takes, told apart by their signature bytes, not by the caller's label.
enum class ImageFormat { kPng, kJpeg, kWebp, kGif };

// "png", "jpeg", "webp", "gif".
absl::string_view ImageFormatName(ImageFormat format);

// An image as interleaved R, G, B bytes, row-major, no padding: rgb.size() == width * height * 3.
struct RgbImage {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> rgb;
};

// The format of `data` by its signature; INVALID_ARGUMENT when it is none of the four.
absl::StatusOr<ImageFormat> SniffImageFormat(absl::string_view data);

// The width and height an image's header declares, read with the format's library without
// decoding pixels (cheap: for the gateway's token estimate and for limits before a decode).
// INVALID_ARGUMENT as DecodeImage for a bad label, format or header; no pixel limit applies.
struct ImageSize {
  ImageFormat format = ImageFormat::kPng;
  int32_t width = 0;
  int32_t height = 0;
};
absl::StatusOr<ImageSize> ProbeImageSize(absl::string_view data, absl::string_view mime_type);

// Decodes `data` to RGB. `mime_type` is the caller's label (image/png, image/jpeg or image/jpg,
// image/webp, image/gif, compared without regard to case); INVALID_ARGUMENT when it is not one
// of those, when the bytes are of another format than the label says, when the data is empty,
// truncated or malformed, and when it is over a limit (the message gives the size and the
// limit). Alpha is dropped: transparent pixels keep their colour channels, as a conversion to
// RGB does; palette and greyscale images are expanded; 16-bit samples are reduced to 8 bits;
// interlaced PNG and progressive JPEG are taken; a GIF's first frame is composed on its
// background. Messages do not name the request's field: callers prefix it
// ("messages[1].content[0].image: ...").
absl::StatusOr<RgbImage> DecodeImage(absl::string_view data, absl::string_view mime_type,
                                     const ImageDecodeLimits& limits);

}  // namespace tandem::workers::vision
