#include <csetjmp>
#include <cstring>

#include "workers/vision/image_codecs.h"

// clang-format off
#include <cstdio>  // Before jpeglib.h, which needs FILE and size_t declared.
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "absl/strings/str_cat.h"

// JPEG (libjpeg-turbo's libjpeg API; Debian ships no TurboJPEG header).
namespace tandem::workers::vision::internal {
namespace {

// A progressive JPEG of more scans than this is refused: each scan walks the coefficient
// buffer again, so a small file of many tiny scans would cost far more than its size says.
// Real encoders write about 10.
constexpr int kMaxJpegScans = 500;

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

}  // namespace

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

}  // namespace tandem::workers::vision::internal
