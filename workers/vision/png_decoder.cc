#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "workers/vision/image_codecs.h"

// PNG (libpng's classic API: the simplified one composes alpha on a background and treats
// 16-bit samples as linear light, where this keeps the stored values).
namespace tandem::workers::vision::internal {
namespace {

struct PngContext {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t offset = 0;
  char message[kMessageSize] = {};
};

[[noreturn]] void PngErrorFn(png_structp png, png_const_charp message) {
  auto* context = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(context->message, sizeof(context->message), "%s", message);
  png_longjmp(png, 1);
}

// Warnings (benign errors included: libpng's read default) say nothing the result depends on.
void PngWarningFn(png_structp, png_const_charp) {}

void PngReadFn(png_structp png, png_bytep out, size_t length) {
  auto* context = static_cast<PngContext*>(png_get_io_ptr(png));
  if (length > context->size - context->offset) png_error(png, "the data is cut short");
  std::memcpy(out, context->data + context->offset, length);
  context->offset += length;
}

// Phase 1: the chunks up to the first IDAT. No C++ objects here (see the top of the file).
bool PngReadHeader(PngContext* context, png_uint_32* width, png_uint_32* height) {
  if (setjmp(png_jmpbuf(context->png))) return false;
  png_set_read_fn(context->png, context, PngReadFn);
  // Sides are checked by CheckDimensions, which says the size; libpng's own default limit
  // (1000000) would give a message without it.
  png_set_user_limits(context->png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
  // Ancillary chunks (text, ICC profiles, ...) are skipped unread: nothing here uses them, and
  // the compressed ones would cost inflating. IHDR, PLTE, tRNS, IDAT and IEND stay.
  png_set_keep_unknown_chunks(context->png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_read_info(context->png, context->info);
  *width = png_get_image_width(context->png, context->info);
  *height = png_get_image_height(context->png, context->info);
  return true;
}

// Phase 2: the pixels, as 8-bit RGB, appended to `rows` as they are decoded (all at once for
// an interlaced image), then the chunks to IEND.
bool PngReadPixels(PngContext* context, GrowingRows* rows) {
  png_structp png = context->png;
  png_infop info = context->info;
  if (setjmp(png_jmpbuf(png))) return false;
  const png_byte color_type = png_get_color_type(png, info);
  const png_uint_32 width = png_get_image_width(png, info);
  const png_uint_32 height = png_get_image_height(png, info);
  // palette_to_rgb also expands tRNS to alpha, which strip_alpha then drops.
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t stride = static_cast<size_t>(width) * 3;
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != stride) {
    std::snprintf(context->message, sizeof(context->message),
                  "libpng did not give 8-bit RGB rows (colour type %d)", color_type);
    return false;
  }
  if (passes == 1) {
    for (png_uint_32 y = 0; y < height; ++y) png_read_row(png, rows->Append(), nullptr);
  } else {
    // Each pass fills its pixels into the rows the earlier passes left.
    uint8_t* rgb = rows->AppendAll();
    for (int pass = 0; pass < passes; ++pass) {
      for (png_uint_32 y = 0; y < height; ++y) png_read_row(png, rgb + y * stride, nullptr);
    }
  }
  png_read_end(png, nullptr);
  return true;
}

// Creates the read structs and runs the header phase; `context` is destroyed by the caller's
// PngStructs.
absl::Status PngOpen(absl::string_view data, PngContext* context) {
  context->data = Bytes(data);
  context->size = data.size();
  context->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, context, PngErrorFn, PngWarningFn);
  if (context->png == nullptr) return absl::ResourceExhaustedError("libpng: out of memory");
  context->info = png_create_info_struct(context->png);
  if (context->info == nullptr) return absl::ResourceExhaustedError("libpng: out of memory");
  png_uint_32 width = 0;
  png_uint_32 height = 0;
  if (!PngReadHeader(context, &width, &height)) {
    return MalformedImage(ImageFormat::kPng, context->message);
  }
  return absl::OkStatus();
}

// Frees libpng's state on every path out.
struct PngStructs {
  PngContext context;
  ~PngStructs() {
    if (context.png != nullptr) {
      png_destroy_read_struct(&context.png, context.info ? &context.info : nullptr, nullptr);
    }
  }
};

// Deflate's best ratio: a 258-byte match in 2 bits of codes.
constexpr int64_t kDeflateMaxRatio = 1032;

}  // namespace

absl::StatusOr<RgbImage> DecodePng(absl::string_view data, const ImageDecodeLimits& limits,
                                   BufferBytes* bytes) {
  PngStructs structs;
  PngContext* context = &structs.context;
  if (absl::Status s = PngOpen(data, context); !s.ok()) return s;
  const int64_t width = png_get_image_width(context->png, context->info);
  const int64_t height = png_get_image_height(context->png, context->info);
  if (absl::Status s = CheckDimensions(ImageFormat::kPng, width, height, &limits); !s.ok()) {
    return s;
  }
  // The filtered rows (a filter byte and the packed samples each, before any transform) are
  // deflated: the bytes after the header must hold at least 1/1032 of them.
  const int64_t raw =
      height * (1 + static_cast<int64_t>(png_get_rowbytes(context->png, context->info)));
  const int64_t have = static_cast<int64_t>(context->size - context->offset);
  if (have * kDeflateMaxRatio < raw) {
    return CannotHoldPixels(ImageFormat::kPng, width, height, raw / kDeflateMaxRatio, have);
  }
  RgbImage image;
  image.width = static_cast<int32_t>(width);
  image.height = static_cast<int32_t>(height);
  GrowingRows rows(&image.rgb, static_cast<size_t>(width) * 3, height, bytes);
  if (!PngReadPixels(context, &rows)) {
    return MalformedImage(ImageFormat::kPng, context->message);
  }
  return image;
}

absl::StatusOr<ImageSize> ProbePng(absl::string_view data) {
  PngStructs structs;
  if (absl::Status s = PngOpen(data, &structs.context); !s.ok()) return s;
  ImageSize size;
  size.format = ImageFormat::kPng;
  const int64_t width = png_get_image_width(structs.context.png, structs.context.info);
  const int64_t height = png_get_image_height(structs.context.png, structs.context.info);
  if (absl::Status s = CheckDimensions(ImageFormat::kPng, width, height, nullptr); !s.ok()) {
    return s;
  }
  size.width = static_cast<int32_t>(width);
  size.height = static_cast<int32_t>(height);
  return size;
}

}  // namespace tandem::workers::vision::internal
