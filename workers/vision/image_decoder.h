#pragma once

// Decoding of the image formats a request may carry (PNG, JPEG, WebP, GIF's first frame) into
// 8-bit RGB, with Debian's well-kept libraries (libpng, libjpeg-turbo, libwebp, giflib). Images
// come from callers: every entry point bounds its input bytes, the decoded pixels (checked from
// the header before any pixel buffer is allocated) and never reads past the input.
//
// What each format gives, and the choices made where the format leaves room:
// - PNG: every colour type and bit depth; tRNS and alpha are dropped, 16-bit samples keep their
//   high byte (no gamma or colour management: the stored values, as Pillow's convert("RGB")).
//   The whole file is read to IEND: a file cut anywhere is refused.
// - JPEG: baseline and progressive, greyscale, YCbCr, RGB, and CMYK/YCCK (converted here, with
//   Adobe's inverted CMYK when the file has an Adobe marker, as Photoshop writes it: R = C * K /
//   255; plain CMYK otherwise: R = (255 - C) * (255 - K) / 255). libjpeg's corrupt-data and
//   premature-end warnings are errors, so a cut file is refused rather than padded with grey;
//   warnings about metadata only (an unknown JFIF revision or Adobe transform, a bad ICC
//   marker, stray bytes before a marker) are not. A progressive file of over 500 scans is
//   refused (each scan re-reads the coefficients: the cost would not be bounded by the size).
// - WebP: lossy and lossless, with or without alpha; animated WebP is refused (no first-frame
//   path in libwebp's simple decoder).
// - GIF: the first frame only, composed on a canvas of the logical screen size filled with the
//   global colour map's background colour (black when there is none or the index is outside
//   it), at the frame's position and clipped to the screen; the frame's transparent index (its
//   graphics control block) leaves the background showing, and an index outside the colour map
//   is black. A frame of zero size or with no colour map at all is refused. Nothing after the
//   first frame is read: a missing trailer or a cut in a later frame is no error.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::workers::vision {

// Images with a side over this are refused whatever the limits (the largest GIF side; JPEG's is
// 65500, WebP's 16383).
inline constexpr int32_t kMaxImageSide = 65535;

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
// INVALID_ARGUMENT as DecodeImage for a bad label, format or header (a side of 0 or over
// kMaxImageSide included); no byte or pixel limit applies. For a GIF this is the logical
// screen, the size DecodeImage returns.
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
//
// Memory follows the data, not the header: a file that claims a large canvas costs nothing
// until its pixel data proves it.
// - Before any pixel buffer, the compressed bytes present are checked against the least a
//   valid file of the header's size could hold (PNG: deflate's 1032:1 over the raw rows; JPEG
//   with Huffman coding: one bit per 8x8 block of its smallest component; GIF: 4096 pixels per
//   LZW bit); a file that cannot hold its pixels is refused as cut short, allocating nothing.
// - The output grows as rows are decoded (doubling from 1 MiB; the whole image is reserved
//   once an eighth of it is decoded), so a file cut after k rows holds about k rows. Only an
//   interlaced PNG or GIF frame, whose passes spread over every row, takes its whole buffer at
//   once, after the check above.
// - A GIF's first frame is decoded (to one byte a pixel, growing likewise) before the logical
//   screen is composed, row by row: a screen far larger than its frame costs nothing until the
//   frame has decoded whole.
// libjpeg's coefficient buffer for progressive files and libwebp's output are the libraries'
// own and are not counted below; both touch memory only as the data fills it.
struct DecodeStats {
  // The most bytes the decoder's own pixel buffers (the output, a GIF frame's indices, an
  // interlaced image's whole buffer) had allocated at once.
  int64_t peak_buffer_bytes = 0;
};
absl::StatusOr<RgbImage> DecodeImage(absl::string_view data, absl::string_view mime_type,
                                     const ImageDecodeLimits& limits, DecodeStats* stats = nullptr);

}  // namespace tandem::workers::vision
