#include "workers/vision/image_decoder.h"

#include <gif_lib.h>
#include <png.h>
#include <webp/decode.h>

#include <algorithm>
#include <csetjmp>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

// clang-format off
#include <cstdio>  // Before jpeglib.h, which needs FILE and size_t declared.
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tandem::workers::vision {
namespace {

// libjpeg and libpng report errors by longjmp. The functions that call setjmp below (the
// "phases") hold no C++ object with a destructor, and the C++ objects (the pixel buffer, the
// statuses) live in their callers, which a longjmp never crosses: it lands in the phase, below
// them. The phases return false with the library's message in their context struct.

// A progressive JPEG of more scans than this is refused: each scan walks the coefficient
// buffer again, so a small file of many tiny scans would cost far more than its size says.
// Real encoders write about 10.
constexpr int kMaxJpegScans = 500;

// Room for a library's error message (libjpeg's are at most JMSG_LENGTH_MAX = 200).
constexpr size_t kMessageSize = 256;

// "PNG", "JPEG", "WebP", "GIF": the names messages use.
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

// The header's size against the fixed side bound and, when `limits` is given, the pixel limit.
// Run before any pixel buffer is allocated.
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
    return absl::InvalidArgumentError(absl::StrCat("data is a ", DisplayName(*sniffed),
                                                   " image but mime_type says ",
                                                   absl::AsciiStrToLower(mime_type)));
  }
  return *sniffed;
}

const uint8_t* Bytes(absl::string_view data) {
  return reinterpret_cast<const uint8_t*>(data.data());
}

// The bytes the decoder's own pixel buffers hold, for DecodeStats.
struct BufferBytes {
  int64_t now = 0;
  int64_t peak = 0;
  void Add(int64_t n) {
    now += n;
    peak = std::max(peak, now);
  }
  void Sub(int64_t n) { now -= n; }
};

// Rows of `row_bytes` bytes appended to `out` (at most `rows` of them) as a decoder produces
// them, so the buffer follows the data actually decoded rather than the header's claim. It
// doubles from kFirstBytes; once the rows decoded are an eighth of the whole, the whole is
// reserved: a real image is copied a few times at most, and a transient old + new copy is at
// most 1/8 over its size.
class GrowingRows {
 public:
  GrowingRows(std::vector<uint8_t>* out, size_t row_bytes, int64_t rows, BufferBytes* bytes)
      : out_(out), row_bytes_(row_bytes), full_(row_bytes * static_cast<size_t>(rows)),
        bytes_(bytes) {}
  // The buffer is counted until here (the image it becomes is the caller's from then on).
  ~GrowingRows() { bytes_->Sub(held_); }
  GrowingRows(const GrowingRows&) = delete;
  GrowingRows& operator=(const GrowingRows&) = delete;

  // The next row, zeroed and appended to the buffer; null past the last row.
  uint8_t* Append() {
    const size_t need = out_->size() + row_bytes_;
    if (need > full_) return nullptr;
    if (need > out_->capacity()) {
      size_t next = std::max(need, std::min(full_, std::max(2 * out_->capacity(), kFirstBytes)));
      if (next >= full_ / 8) next = full_;
      Reserve(next);
    }
    out_->resize(need);
    return out_->data() + need - row_bytes_;
  }
  // Every row at once: for interlaced images, whose passes write all over the buffer.
  uint8_t* AppendAll() {
    Reserve(full_);
    out_->resize(full_);
    return out_->data();
  }

 private:
  static constexpr size_t kFirstBytes = size_t{1} << 20;

  void Reserve(size_t capacity) {
    if (capacity <= out_->capacity()) return;
    bytes_->Add(static_cast<int64_t>(capacity));  // the copy holds both for a moment
    out_->reserve(capacity);
    bytes_->Sub(held_);
    held_ = static_cast<int64_t>(capacity);
  }

  std::vector<uint8_t>* const out_;
  const size_t row_bytes_;
  const size_t full_;
  BufferBytes* const bytes_;
  int64_t held_ = 0;
};

// The refusal of a file whose compressed bytes cannot hold the pixels its header claims.
absl::Status CannotHoldPixels(ImageFormat format, int64_t width, int64_t height, int64_t need,
                              int64_t have) {
  return MalformedImage(format,
                        absl::StrCat("the data is cut short: ", width, "x", height,
                                     " pixels need at least ", need,
                                     " bytes of compressed pixel data and the file has ", have,
                                     " after its header"));
}

// ---------------------------------------------------------------------------------------------
// PNG (libpng's classic API: the simplified one composes alpha on a background and treats
// 16-bit samples as linear light, where this keeps the stored values).

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
  const int64_t raw = height * (1 + static_cast<int64_t>(
                                        png_get_rowbytes(context->png, context->info)));
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

// ---------------------------------------------------------------------------------------------
// JPEG (libjpeg-turbo's libjpeg API; Debian ships no TurboJPEG header).

struct JpegError {
  jpeg_error_mgr manager;  // First: libjpeg hands callbacks a jpeg_error_mgr*.
  std::jmp_buf jump;
  char message[kMessageSize];
};

struct JpegContext {
  jpeg_decompress_struct cinfo;
  JpegError error;
  jpeg_progress_mgr progress;
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* error = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, error->message);
  std::longjmp(error->jump, 1);
}

// Warnings (level -1) about the data are errors: libjpeg would go on and return grey or
// garbage blocks for a cut or corrupt file. Those about metadata nothing here reads are not.
void JpegEmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // Trace messages.
  switch (cinfo->err->msg_code) {
    case JWRN_JFIF_MAJOR:
    case JWRN_ADOBE_XFORM:
    case JWRN_BOGUS_ICC:
    case JWRN_EXTRANEOUS_DATA:  // Padding before a marker; the entropy data is checked anyway.
      return;
    default:
      JpegErrorExit(cinfo);
  }
}

void JpegOutputMessage(j_common_ptr) {}  // Nothing on stderr.

void JpegProgressMonitor(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* decompress = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (decompress->input_scan_number <= kMaxJpegScans) return;
  auto* error = reinterpret_cast<JpegError*>(cinfo->err);
  std::snprintf(error->message, sizeof(error->message), "more than %d progressive scans",
                kMaxJpegScans);
  std::longjmp(error->jump, 1);
}

// Phase 1: jpeg_read_header. No C++ objects here (see the top of the file). The caller runs
// jpeg_destroy_decompress whatever this returns (a zeroed cinfo makes it a no-op).
bool JpegReadHeader(JpegContext* context, const uint8_t* data, size_t size) {
  context->cinfo.err = jpeg_std_error(&context->error.manager);
  context->error.manager.error_exit = JpegErrorExit;
  context->error.manager.emit_message = JpegEmitMessage;
  context->error.manager.output_message = JpegOutputMessage;
  if (setjmp(context->error.jump)) return false;
  jpeg_create_decompress(&context->cinfo);
  context->progress.progress_monitor = JpegProgressMonitor;
  context->cinfo.progress = &context->progress;
  jpeg_mem_src(&context->cinfo, data, static_cast<unsigned long>(size));
  // require_image TRUE: a tables-only stream is an error, not JPEG_HEADER_TABLES_ONLY.
  jpeg_read_header(&context->cinfo, TRUE);
  return true;
}

// Adobe's CMYK (what Photoshop writes, with an APP14 marker) is stored inverted: 255 is no ink.
void CmykRowToRgb(const uint8_t* cmyk, int64_t width, bool inverted, uint8_t* rgb) {
  for (int64_t x = 0; x < width; ++x) {
    const uint8_t* p = cmyk + x * 4;
    const int k = inverted ? p[3] : 255 - p[3];
    for (int c = 0; c < 3; ++c) {
      const int ink = inverted ? p[c] : 255 - p[c];
      rgb[x * 3 + c] = static_cast<uint8_t>((ink * k + 127) / 255);
    }
  }
}

// Phase 2: the pixels appended to `rows` scanline by scanline. `cmyk_row` (width * 4 bytes) is
// scratch for CMYK and YCCK files, null otherwise.
bool JpegReadPixels(JpegContext* context, GrowingRows* rows, uint8_t* cmyk_row) {
  j_decompress_ptr cinfo = &context->cinfo;
  if (setjmp(context->error.jump)) return false;
  cinfo->out_color_space = cmyk_row != nullptr ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(cinfo);
  const int components = cmyk_row != nullptr ? 4 : 3;
  if (cinfo->output_width != cinfo->image_width || cinfo->output_height != cinfo->image_height ||
      cinfo->output_components != components) {
    std::snprintf(context->error.message, sizeof(context->error.message),
                  "libjpeg did not give %d-channel rows of the header's size", components);
    return false;
  }
  while (cinfo->output_scanline < cinfo->output_height) {
    uint8_t* out = rows->Append();
    JSAMPROW row = cmyk_row != nullptr ? cmyk_row : out;
    // The memory source never suspends; 0 rows would be a libjpeg fault, not a loop to spin.
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
      std::snprintf(context->error.message, sizeof(context->error.message), "no scanline read");
      return false;
    }
    if (cmyk_row != nullptr) {
      CmykRowToRgb(cmyk_row, cinfo->output_width, cinfo->saw_Adobe_marker, out);
    }
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

// Frees libjpeg's state on every path out.
struct JpegStructs {
  JpegContext context = {};
  ~JpegStructs() { jpeg_destroy_decompress(&context.cinfo); }
};

absl::Status JpegOpen(absl::string_view data, JpegContext* context) {
  if (!JpegReadHeader(context, Bytes(data), data.size())) {
    return MalformedImage(ImageFormat::kJpeg, context->error.message);
  }
  switch (context->cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
    case JCS_CMYK:
    case JCS_YCCK:
      return absl::OkStatus();
    default:
      return MalformedImage(ImageFormat::kJpeg,
                            absl::StrCat("unsupported colour space with ",
                                         context->cinfo.num_components, " components"));
  }
}

// With Huffman coding every 8x8 block of every component of the first scan (the one
// jpeg_read_header stopped at) takes at least one bit: a DC difference code, the only symbol
// a progressive first scan may start a block with, and at least one bit long. A file cut
// inside that scan is refused anyway; this refuses it before any row is decoded. Arithmetic
// coding can spend less than a bit on a block, so it has no such floor.
absl::Status JpegCheckDataCanHold(const jpeg_decompress_struct& cinfo) {
  if (cinfo.arith_code) return absl::OkStatus();
  int64_t blocks = 0;
  for (int i = 0; i < cinfo.comps_in_scan; ++i) {
    const jpeg_component_info* c = cinfo.cur_comp_info[i];
    blocks += int64_t{c->width_in_blocks} * c->height_in_blocks;
  }
  const int64_t need = blocks / 8;
  const int64_t have = static_cast<int64_t>(cinfo.src->bytes_in_buffer);
  if (have < need) {
    return CannotHoldPixels(ImageFormat::kJpeg, cinfo.image_width, cinfo.image_height, need, have);
  }
  return absl::OkStatus();
}

absl::StatusOr<RgbImage> DecodeJpeg(absl::string_view data, const ImageDecodeLimits& limits,
                                    BufferBytes* bytes) {
  JpegStructs structs;
  JpegContext* context = &structs.context;
  if (absl::Status s = JpegOpen(data, context); !s.ok()) return s;
  const int64_t width = context->cinfo.image_width;
  const int64_t height = context->cinfo.image_height;
  if (absl::Status s = CheckDimensions(ImageFormat::kJpeg, width, height, &limits); !s.ok()) {
    return s;
  }
  if (absl::Status s = JpegCheckDataCanHold(context->cinfo); !s.ok()) return s;
  const J_COLOR_SPACE space = context->cinfo.jpeg_color_space;
  std::vector<uint8_t> cmyk_row;
  if (space == JCS_CMYK || space == JCS_YCCK) cmyk_row.resize(static_cast<size_t>(width) * 4);
  RgbImage image;
  image.width = static_cast<int32_t>(width);
  image.height = static_cast<int32_t>(height);
  GrowingRows rows(&image.rgb, static_cast<size_t>(width) * 3, height, bytes);
  if (!JpegReadPixels(context, &rows, cmyk_row.empty() ? nullptr : cmyk_row.data())) {
    return MalformedImage(ImageFormat::kJpeg, context->error.message);
  }
  return image;
}

absl::StatusOr<ImageSize> ProbeJpeg(absl::string_view data) {
  JpegStructs structs;
  if (absl::Status s = JpegOpen(data, &structs.context); !s.ok()) return s;
  const int64_t width = structs.context.cinfo.image_width;
  const int64_t height = structs.context.cinfo.image_height;
  if (absl::Status s = CheckDimensions(ImageFormat::kJpeg, width, height, nullptr); !s.ok()) {
    return s;
  }
  ImageSize size;
  size.format = ImageFormat::kJpeg;
  size.width = static_cast<int32_t>(width);
  size.height = static_cast<int32_t>(height);
  return size;
}

// ---------------------------------------------------------------------------------------------
// WebP

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

// ---------------------------------------------------------------------------------------------
// GIF (giflib returns error codes; no longjmp).

struct GifSource {
  const uint8_t* data;
  size_t size;
  size_t offset;
  // A read ran past the end: giflib's own message for it ("No screen descriptor detected",
  // "Failed to read from given file", ...) depends on where.
  bool cut_short;
};

// A short read (the data cut short) makes giflib fail with D_GIF_ERR_READ_FAILED.
int GifReadFn(GifFileType* gif, GifByteType* out, int length) {
  auto* source = static_cast<GifSource*>(gif->UserData);
  if (length <= 0) return 0;
  const size_t n = std::min(static_cast<size_t>(length), source->size - source->offset);
  if (n < static_cast<size_t>(length)) source->cut_short = true;
  std::memcpy(out, source->data + source->offset, n);
  source->offset += n;
  return static_cast<int>(n);
}

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int error = 0;
    DGifCloseFile(gif, &error);
  }
};
using GifFile = std::unique_ptr<GifFileType, GifCloser>;

absl::Status GifError(int code, const GifSource& source) {
  if (source.cut_short) return MalformedImage(ImageFormat::kGif, "the data is cut short");
  const char* text = GifErrorString(code);
  return MalformedImage(ImageFormat::kGif, text != nullptr ? text : "giflib error");
}

// The error of a call on an open file.
absl::Status GifFileError(const GifFileType* gif) {
  return GifError(gif->Error, *static_cast<const GifSource*>(gif->UserData));
}

// DGifOpen reads the header, the logical screen descriptor and the global colour map.
absl::StatusOr<GifFile> GifOpen(absl::string_view data, GifSource* source) {
  *source = {Bytes(data), data.size(), 0, false};
  int error = 0;
  GifFile gif(DGifOpen(source, GifReadFn, &error));
  if (gif == nullptr) return GifError(error, *source);
  return gif;
}

// Reads records up to the first image descriptor (read too); *transparent is the transparent
// index of the last graphics control block before it, or NO_TRANSPARENT_COLOR.
absl::Status GifSkipToFirstImage(GifFileType* gif, int* transparent) {
  *transparent = NO_TRANSPARENT_COLOR;
  for (;;) {
    GifRecordType type = UNDEFINED_RECORD_TYPE;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR) return GifFileError(gif);
    if (type == IMAGE_DESC_RECORD_TYPE) break;
    if (type == TERMINATE_RECORD_TYPE) return MalformedImage(ImageFormat::kGif, "it has no frame");
    if (type != EXTENSION_RECORD_TYPE) continue;
    int code = 0;
    GifByteType* block = nullptr;
    if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) return GifFileError(gif);
    if (code == GRAPHICS_EXT_FUNC_CODE && block != nullptr) {
      GraphicsControlBlock gcb;
      if (DGifExtensionToGCB(block[0], block + 1, &gcb) == GIF_ERROR) {
        return MalformedImage(ImageFormat::kGif, "bad graphics control block");
      }
      *transparent = gcb.TransparentColor;
    }
    while (block != nullptr) {
      if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) return GifFileError(gif);
    }
  }
  if (DGifGetImageDesc(gif) == GIF_ERROR) return GifFileError(gif);
  return absl::OkStatus();
}

// giflib's string table has 4096 entries, so one LZW code gives at most 4096 pixels, and a
// code is at least one bit: the floor on the bytes a frame of n pixels needs.
constexpr int64_t kGifMaxPixelsPerByte = 8 * 4096;

// Decodes the frame giflib has just read the descriptor of into `rows` (one colour index a
// pixel, frame.Width a row, in display order), growing as lines arrive for a progressive
// frame, whole at once for an interlaced one; after checking the bytes left can hold it.
absl::Status GifDecodeFrame(GifFileType* gif, const ImageDecodeLimits& limits,
                            GrowingRows* rows) {
  const GifImageDesc& frame = gif->Image;
  // The frame is decoded whole even where it lies off the screen: its own size is bounded too
  // (giflib gives sides below 65536).
  const int64_t frame_pixels = int64_t{frame.Width} * frame.Height;
  if (frame.Width <= 0 || frame.Height <= 0) {
    return MalformedImage(ImageFormat::kGif, absl::StrCat("its first frame is ", frame.Width, "x",
                                                          frame.Height, " (a side of 0)"));
  }
  if (frame_pixels > limits.max_pixels) {
    return absl::InvalidArgumentError(
        absl::StrCat("GIF image's first frame is ", frame.Width, "x", frame.Height, " (",
                     frame_pixels, " pixels), over the limit of ", limits.max_pixels, " pixels"));
  }
  const auto* source = static_cast<const GifSource*>(gif->UserData);
  const int64_t have = static_cast<int64_t>(source->size - source->offset);
  if (have * kGifMaxPixelsPerByte < frame_pixels) {
    return CannotHoldPixels(ImageFormat::kGif, frame.Width, frame.Height,
                            frame_pixels / kGifMaxPixelsPerByte, have);
  }
  static_assert(sizeof(GifPixelType) == 1);
  if (!frame.Interlace) {
    for (int y = 0; y < frame.Height; ++y) {
      if (DGifGetLine(gif, rows->Append(), frame.Width) == GIF_ERROR) return GifFileError(gif);
    }
    return absl::OkStatus();
  }
  // Interlaced rows come in four passes: every 8th from 0, every 8th from 4, every 4th from 2,
  // every 2nd from 1.
  static constexpr int kStart[] = {0, 4, 2, 1};
  static constexpr int kStep[] = {8, 8, 4, 2};
  uint8_t* all = rows->AppendAll();
  for (int pass = 0; pass < 4; ++pass) {
    for (int y = kStart[pass]; y < frame.Height; y += kStep[pass]) {
      if (DGifGetLine(gif, all + static_cast<size_t>(y) * frame.Width, frame.Width) ==
          GIF_ERROR) {
        return GifFileError(gif);
      }
    }
  }
  return absl::OkStatus();
}

// One screen row: the background, with the frame's row (if it crosses this one) over it,
// clipped to the screen; the transparent index leaves the background, an index outside the
// colour map is black.
void GifComposeRow(const GifFileType& gif, const ColorMapObject& map, int transparent,
                   const uint8_t background[3], const std::vector<uint8_t>& indices,
                   int64_t screen_y, uint8_t* out) {
  for (int64_t x = 0; x < gif.SWidth; ++x) std::memcpy(out + x * 3, background, 3);
  const GifImageDesc& frame = gif.Image;
  const int64_t y = screen_y - frame.Top;
  if (y < 0 || y >= frame.Height) return;
  const uint8_t* row = indices.data() + y * frame.Width;
  for (int x = 0; x < frame.Width; ++x) {
    const int64_t screen_x = int64_t{frame.Left} + x;
    if (screen_x >= gif.SWidth) break;
    const int index = row[x];
    if (index == transparent) continue;
    uint8_t* pixel = out + screen_x * 3;
    if (index >= map.ColorCount) {
      pixel[0] = pixel[1] = pixel[2] = 0;
      continue;
    }
    pixel[0] = map.Colors[index].Red;
    pixel[1] = map.Colors[index].Green;
    pixel[2] = map.Colors[index].Blue;
  }
}

absl::StatusOr<RgbImage> DecodeGif(absl::string_view data, const ImageDecodeLimits& limits,
                                   BufferBytes* bytes) {
  GifSource source;
  absl::StatusOr<GifFile> gif = GifOpen(data, &source);
  if (!gif.ok()) return gif.status();
  GifFileType* file = gif->get();
  if (absl::Status s = CheckDimensions(ImageFormat::kGif, file->SWidth, file->SHeight, &limits);
      !s.ok()) {
    return s;
  }
  int transparent = NO_TRANSPARENT_COLOR;
  if (absl::Status s = GifSkipToFirstImage(file, &transparent); !s.ok()) return s;
  const ColorMapObject* map = file->Image.ColorMap != nullptr ? file->Image.ColorMap
                                                              : file->SColorMap;
  if (map == nullptr) return MalformedImage(ImageFormat::kGif, "the frame has no colour map");
  // The frame first: the screen is composed only once the data has proved the frame whole.
  std::vector<uint8_t> indices;
  GrowingRows frame_rows(&indices, static_cast<size_t>(std::max(0, file->Image.Width)),
                         std::max(0, file->Image.Height), bytes);
  if (absl::Status s = GifDecodeFrame(file, limits, &frame_rows); !s.ok()) return s;
  uint8_t background[3] = {0, 0, 0};
  const ColorMapObject* global = file->SColorMap;
  if (global != nullptr && file->SBackGroundColor >= 0 &&
      file->SBackGroundColor < global->ColorCount) {
    const GifColorType& c = global->Colors[file->SBackGroundColor];
    background[0] = c.Red;
    background[1] = c.Green;
    background[2] = c.Blue;
  }
  RgbImage image;
  image.width = file->SWidth;
  image.height = file->SHeight;
  GrowingRows rows(&image.rgb, static_cast<size_t>(image.width) * 3, image.height, bytes);
  for (int64_t y = 0; y < image.height; ++y) {
    GifComposeRow(*file, *map, transparent, background, indices, y, rows.Append());
  }
  return image;
}

absl::StatusOr<ImageSize> ProbeGif(absl::string_view data) {
  GifSource source;
  absl::StatusOr<GifFile> gif = GifOpen(data, &source);
  if (!gif.ok()) return gif.status();
  ImageSize size;
  size.format = ImageFormat::kGif;
  size.width = (*gif)->SWidth;
  size.height = (*gif)->SHeight;
  if (absl::Status s = CheckDimensions(ImageFormat::kGif, size.width, size.height, nullptr);
      !s.ok()) {
    return s;
  }
  return size;
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
      return ProbePng(data);
    case ImageFormat::kJpeg:
      return ProbeJpeg(data);
    case ImageFormat::kWebp:
      return ProbeWebp(data);
    case ImageFormat::kGif:
      return ProbeGif(data);
  }
  return absl::InternalError("unknown image format");
}

absl::StatusOr<RgbImage> DecodeImage(absl::string_view data, absl::string_view mime_type,
                                     const ImageDecodeLimits& limits, DecodeStats* stats) {
  absl::StatusOr<ImageFormat> format = CheckLabelAndSignature(data, mime_type, &limits);
  if (!format.ok()) return format.status();
  BufferBytes bytes;
  absl::StatusOr<RgbImage> image = absl::InternalError("unknown image format");
  switch (*format) {
    case ImageFormat::kPng:
      image = DecodePng(data, limits, &bytes);
      break;
    case ImageFormat::kJpeg:
      image = DecodeJpeg(data, limits, &bytes);
      break;
    case ImageFormat::kWebp:
      image = DecodeWebp(data, limits, &bytes);
      break;
    case ImageFormat::kGif:
      image = DecodeGif(data, limits, &bytes);
      break;
  }
  if (stats != nullptr) stats->peak_buffer_bytes = bytes.peak;
  return image;
}

}  // namespace tandem::workers::vision
