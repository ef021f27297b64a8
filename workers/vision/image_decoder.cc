#include "workers/vision/image_decoder.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "workers/vision/image_codecs.h"

namespace tandem::workers::vision {
namespace internal {

absl::string_view DisplayName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kGif:
      return "GIF";
  }
  return "unknown";
}

absl::Status MalformedImage(ImageFormat format, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ", DisplayName(format), " image: ", what));
}

absl::Status CheckDimensions(ImageFormat format, int64_t width, int64_t height,
                             const ImageDecodeLimits* limits) {
  if (width <= 0 || height <= 0) {
    return MalformedImage(format, absl::StrCat("its header declares a size of ", width, "x", height,
                                               " (a side of 0)"));
  }
  if (width > kMaxImageSide || height > kMaxImageSide) {
    return absl::InvalidArgumentError(absl::StrCat(DisplayName(format), " image is ", width, "x",
                                                   height, " pixels, over the limit of ",
                                                   kMaxImageSide, " pixels a side"));
  }
  if (limits != nullptr && width * height > limits->max_pixels) {
    return absl::InvalidArgumentError(
        absl::StrCat(DisplayName(format), " image is ", width, "x", height, " (", width * height,
                     " pixels), over the limit of ", limits->max_pixels, " pixels"));
  }
  return absl::OkStatus();
}

absl::Status CannotHoldPixels(ImageFormat format, int64_t width, int64_t height, int64_t need,
                              int64_t have) {
  return MalformedImage(
      format,
      absl::StrCat("the data is cut short: ", width, "x", height, " pixels need at least ", need,
                   " bytes of compressed pixel data and the file has ", have, " after its header"));
}

}  // namespace internal

namespace {

// The caller's label as a format; INVALID_ARGUMENT when it is none of the accepted ones.
absl::StatusOr<ImageFormat> FormatOfLabel(absl::string_view mime_type) {
  if (absl::EqualsIgnoreCase(mime_type, "image/png")) return ImageFormat::kPng;
  if (absl::EqualsIgnoreCase(mime_type, "image/jpeg") ||
      absl::EqualsIgnoreCase(mime_type, "image/jpg")) {
    return ImageFormat::kJpeg;
  }
  if (absl::EqualsIgnoreCase(mime_type, "image/webp")) return ImageFormat::kWebp;
  if (absl::EqualsIgnoreCase(mime_type, "image/gif")) return ImageFormat::kGif;
  // Cut and escaped: the label is the caller's text and goes into a log line.
  constexpr size_t kShown = 64;
  std::string shown = absl::CHexEscape(mime_type.substr(0, kShown));
  if (mime_type.size() > kShown) shown += "...";
  return absl::InvalidArgumentError(
      absl::StrCat("mime_type \"", shown,
                   "\" is not a supported image type (image/png, image/jpeg, image/webp, "
                   "image/gif)"));
}

// What both entry points check first: the label, the data's presence, its signature against
// the label.
absl::StatusOr<ImageFormat> CheckLabelAndSignature(absl::string_view data,
                                                   absl::string_view mime_type,
                                                   const ImageDecodeLimits* limits) {
  absl::StatusOr<ImageFormat> labelled = FormatOfLabel(mime_type);
  if (!labelled.ok()) return labelled.status();
  if (data.empty()) return absl::InvalidArgumentError("image data is empty");
  if (limits != nullptr && static_cast<int64_t>(data.size()) > limits->max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image is ", data.size(), " bytes, over the limit of ", limits->max_bytes, " bytes"));
  }
  absl::StatusOr<ImageFormat> sniffed = SniffImageFormat(data);
  if (!sniffed.ok()) return sniffed.status();
  if (*sniffed != *labelled) {
    return absl::InvalidArgumentError(absl::StrCat("data is a ", internal::DisplayName(*sniffed),
                                                   " image but mime_type says ",
                                                   absl::AsciiStrToLower(mime_type)));
  }
  return *sniffed;
}

// A hint for the formats people send by mistake, from their signatures.
absl::string_view OtherFormatHint(absl::string_view data) {
  if (absl::StartsWith(data, "BM")) return " (it looks like a BMP image)";
  if (absl::StartsWith(data, absl::string_view("II*\0", 4)) ||
      absl::StartsWith(data, absl::string_view("MM\0*", 4))) {
    return " (it looks like a TIFF image)";
  }
  if (data.size() >= 12 && data.substr(4, 4) == "ftyp") {
    return " (it looks like an AVIF or HEIF image)";
  }
  const absl::string_view text = absl::StripLeadingAsciiWhitespace(data.substr(0, 256));
  if (absl::StartsWith(text, "<svg") || absl::StartsWith(text, "<?xml")) {
    return " (it looks like SVG or other XML text)";
  }
  return "";
}

}  // namespace

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
  if (data.empty()) return absl::InvalidArgumentError("image data is empty");
  if (absl::StartsWith(data, "\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  if (absl::StartsWith(data, "\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (data.size() >= 12 && absl::StartsWith(data, "RIFF") && data.substr(8, 4) == "WEBP") {
    return ImageFormat::kWebp;
  }
  if (absl::StartsWith(data, "GIF87a") || absl::StartsWith(data, "GIF89a")) {
    return ImageFormat::kGif;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "data is not a PNG, JPEG, WebP or GIF image by its signature bytes", OtherFormatHint(data)));
}

absl::StatusOr<ImageSize> ProbeImageSize(absl::string_view data, absl::string_view mime_type) {
  absl::StatusOr<ImageFormat> format = CheckLabelAndSignature(data, mime_type, nullptr);
  if (!format.ok()) return format.status();
  switch (*format) {
    case ImageFormat::kPng:
      return internal::ProbePng(data);
    case ImageFormat::kJpeg:
      return internal::ProbeJpeg(data);
    case ImageFormat::kWebp:
      return internal::ProbeWebp(data);
    case ImageFormat::kGif:
      return internal::ProbeGif(data);
  }
  return absl::InternalError("unknown image format");
}

absl::StatusOr<RgbImage> DecodeImage(absl::string_view data, absl::string_view mime_type,
                                     const ImageDecodeLimits& limits, DecodeStats* stats) {
  absl::StatusOr<ImageFormat> format = CheckLabelAndSignature(data, mime_type, &limits);
  if (!format.ok()) return format.status();
  internal::BufferBytes bytes;
  absl::StatusOr<RgbImage> image = absl::InternalError("unknown image format");
  switch (*format) {
    case ImageFormat::kPng:
      image = internal::DecodePng(data, limits, &bytes);
      break;
    case ImageFormat::kJpeg:
      image = internal::DecodeJpeg(data, limits, &bytes);
      break;
    case ImageFormat::kWebp:
      image = internal::DecodeWebp(data, limits, &bytes);
      break;
    case ImageFormat::kGif:
      image = internal::DecodeGif(data, limits, &bytes);
      break;
  }
  if (stats != nullptr) stats->peak_buffer_bytes = bytes.peak;
  return image;
}

}  // namespace tandem::workers::vision
