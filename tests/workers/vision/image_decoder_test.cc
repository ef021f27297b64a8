#include "workers/vision/image_decoder.h"

#include <gif_lib.h>
#include <png.h>
#include <webp/decode.h>
#include <webp/encode.h>
#include <zlib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

// clang-format off
#include <cstdio>  // Before jpeglib.h, which needs FILE and size_t declared.
#include <jpeglib.h>
// clang-format on

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tandem::workers::vision {
namespace {

using ::testing::HasSubstr;

// The test images are made here with the real encoders (nothing binary is committed besides
// the golden PNGs).

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A deterministic pattern of `channels` bytes a pixel, varied enough that every sample value
// and neighbour relation turns up.
std::vector<uint8_t> Pattern(int width, int height, int channels, int seed = 0) {
  std::vector<uint8_t> out(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        out[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(x * 37 + y * 11 + c * 71 + seed * 13 + (x * y) % 7);
      }
    }
  }
  return out;
}

// A smooth gradient, what lossy codecs keep well.
std::vector<uint8_t> Gradient(int width, int height, int channels) {
  std::vector<uint8_t> out(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        const int v = c == 0 ? x * 255 / (width - 1) : c == 1 ? y * 255 / (height - 1) : 128;
        out[(static_cast<size_t>(y) * width + x) * channels + c] = static_cast<uint8_t>(v);
      }
    }
  }
  return out;
}

// Largest and mean absolute difference of two equal-sized byte arrays.
struct Difference {
  int max = 0;
  double mean = 0;
};
Difference Compare(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  Difference d;
  if (a.size() != b.size() || a.empty()) return {255, 255};
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int diff = std::abs(int{a[i]} - int{b[i]});
    d.max = std::max(d.max, diff);
    sum += diff;
  }
  d.mean = sum / static_cast<double>(a.size());
  return d;
}

// RGBA or grey+alpha to RGB by dropping the last channel / copying grey.
std::vector<uint8_t> ToRgb(const std::vector<uint8_t>& pixels, int channels) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < pixels.size(); i += channels) {
    if (channels <= 2) {
      out.insert(out.end(), 3, pixels[i]);
    } else {
      out.insert(out.end(), pixels.begin() + i, pixels.begin() + i + 3);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// PNG writing (libpng's write API).

struct PngSpec {
  int width = 0;
  int height = 0;
  int color_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  bool interlace = false;
  // Rows as PNG stores them: samples packed MSB first below 8 bits, 16-bit big-endian.
  std::vector<uint8_t> rows;
  std::vector<png_color> palette;
  std::vector<png_byte> palette_alpha;      // tRNS of a palette image
  std::optional<png_color_16> trans_color;  // tRNS of a grey or RGB image
};

int PngChannels(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY:
    case PNG_COLOR_TYPE_PALETTE:
      return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return 2;
    case PNG_COLOR_TYPE_RGB:
      return 3;
    default:
      return 4;
  }
}

size_t PngRowBytes(const PngSpec& spec) {
  return (static_cast<size_t>(spec.width) * PngChannels(spec.color_type) * spec.bit_depth + 7) / 8;
}

void PngAppend(png_structp png, png_bytep data, size_t size) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<char*>(data), size);
}
[[noreturn]] void PngWriteError(png_structp png, png_const_charp) { png_longjmp(png, 1); }

struct PngWriter {
  png_structp png = nullptr;
  png_infop info = nullptr;
  png_color_16 trans = {};
};

// The setjmp frame: no object with a destructor is made in it.
bool PngWrite(PngWriter* w, const PngSpec& spec, std::string* out) {
  if (setjmp(png_jmpbuf(w->png))) return false;
  png_set_write_fn(w->png, out, PngAppend, nullptr);
  png_set_IHDR(w->png, w->info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) {
    png_set_PLTE(w->png, w->info, spec.palette.data(), static_cast<int>(spec.palette.size()));
  }
  if (!spec.palette_alpha.empty()) {
    png_set_tRNS(w->png, w->info, spec.palette_alpha.data(),
                 static_cast<int>(spec.palette_alpha.size()), nullptr);
  }
  if (spec.trans_color) {
    w->trans = *spec.trans_color;
    png_set_tRNS(w->png, w->info, nullptr, 0, &w->trans);
  }
  png_write_info(w->png, w->info);
  const int passes = png_set_interlace_handling(w->png);
  const size_t stride = PngRowBytes(spec);
  for (int pass = 0; pass < passes; ++pass) {
    for (int y = 0; y < spec.height; ++y) {
      png_write_row(w->png, spec.rows.data() + y * stride);
    }
  }
  png_write_end(w->png, nullptr);
  return true;
}

std::string EncodePng(const PngSpec& spec) {
  EXPECT_EQ(spec.rows.size(), PngRowBytes(spec) * spec.height);
  std::string out;
  PngWriter w;
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, PngWriteError, nullptr);
  w.info = png_create_info_struct(w.png);
  const bool ok = PngWrite(&w, spec, &out);
  png_destroy_write_struct(&w.png, &w.info);
  EXPECT_TRUE(ok) << "libpng failed to write the test image";
  return out;
}

// What the decoder must give for `spec`, worked out from the packed rows independently of
// libpng: grey expanded and scaled to 8 bits, palette looked up, 16-bit as its high byte, alpha
// and tRNS ignored.
std::vector<uint8_t> ExpectedPngRgb(const PngSpec& spec) {
  const int channels = PngChannels(spec.color_type);
  const size_t stride = PngRowBytes(spec);
  auto sample = [&](int x, int y, int c) -> int {
    const uint8_t* row = spec.rows.data() + y * stride;
    const int64_t index = int64_t{x} * channels + c;
    if (spec.bit_depth == 16) return row[index * 2];
    if (spec.bit_depth == 8) return row[index];
    const int64_t bit = index * spec.bit_depth;
    const int shift = 8 - spec.bit_depth - static_cast<int>(bit % 8);
    return (row[bit / 8] >> shift) & ((1 << spec.bit_depth) - 1);
  };
  std::vector<uint8_t> out;
  for (int y = 0; y < spec.height; ++y) {
    for (int x = 0; x < spec.width; ++x) {
      if (spec.color_type == PNG_COLOR_TYPE_PALETTE) {
        const png_color& c = spec.palette[sample(x, y, 0)];
        out.insert(out.end(), {c.red, c.green, c.blue});
      } else if (channels <= 2) {
        int v = sample(x, y, 0);
        if (spec.bit_depth < 8) v = v * 255 / ((1 << spec.bit_depth) - 1);
        out.insert(out.end(), 3, static_cast<uint8_t>(v));
      } else {
        for (int c = 0; c < 3; ++c) out.push_back(static_cast<uint8_t>(sample(x, y, c)));
      }
    }
  }
  return out;
}

// A spec whose rows hold Pattern bytes (every bit pattern turns up at every depth); palette
// images get a palette of 2^depth distinct colours.
PngSpec PatternPng(int width, int height, int color_type, int bit_depth, bool interlace = false) {
  PngSpec spec{width, height, color_type, bit_depth, interlace, {}, {}, {}, {}};
  const size_t stride = PngRowBytes(spec);
  spec.rows = Pattern(static_cast<int>(stride), height, 1);
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    for (int i = 0; i < (1 << bit_depth); ++i) {
      spec.palette.push_back({static_cast<png_byte>(i * 7), static_cast<png_byte>(255 - i),
                              static_cast<png_byte>(i * 131)});
    }
  }
  return spec;
}

// ---------------------------------------------------------------------------------------------
// JPEG writing (libjpeg's compressor; its default error handler exits, which fails the test).

struct JpegSpec {
  int width = 0;
  int height = 0;
  int components = 3;
  J_COLOR_SPACE in_space = JCS_RGB;
  J_COLOR_SPACE jpeg_space = JCS_UNKNOWN;  // JCS_UNKNOWN: libjpeg's default for in_space
  bool adobe_marker = true;                // for CMYK
  bool progressive = false;
  int quality = 95;
  const jpeg_scan_info* scans = nullptr;
  int num_scans = 0;
  std::vector<uint8_t> pixels;
};

std::string EncodeJpeg(const JpegSpec& spec) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr error;
  cinfo.err = jpeg_std_error(&error);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = spec.width;
  cinfo.image_height = spec.height;
  cinfo.input_components = spec.components;
  cinfo.in_color_space = spec.in_space;
  jpeg_set_defaults(&cinfo);
  if (spec.jpeg_space != JCS_UNKNOWN) jpeg_set_colorspace(&cinfo, spec.jpeg_space);
  if (!spec.adobe_marker) cinfo.write_Adobe_marker = FALSE;
  jpeg_set_quality(&cinfo, spec.quality, TRUE);
  if (spec.progressive) jpeg_simple_progression(&cinfo);
  if (spec.scans != nullptr) {
    cinfo.scan_info = spec.scans;
    cinfo.num_scans = spec.num_scans;
  }
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(spec.width) * spec.components;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(spec.pixels.data() + cinfo.next_scanline * stride);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  return out;
}

JpegSpec RgbJpeg(int width, int height, std::vector<uint8_t> pixels, bool progressive = false) {
  JpegSpec spec;
  spec.width = width;
  spec.height = height;
  spec.pixels = std::move(pixels);
  spec.progressive = progressive;
  return spec;
}

JpegSpec GreyJpeg(int width, int height, std::vector<uint8_t> pixels) {
  JpegSpec spec = RgbJpeg(width, height, std::move(pixels));
  spec.components = 1;
  spec.in_space = JCS_GRAYSCALE;
  return spec;
}

// ---------------------------------------------------------------------------------------------
// WebP writing.

std::string WebpOut(uint8_t* data, size_t size) {
  std::string out(reinterpret_cast<char*>(data), size);
  WebPFree(data);
  return out;
}

std::string EncodeWebpLossy(int width, int height, const std::vector<uint8_t>& rgb) {
  uint8_t* out = nullptr;
  const size_t size = WebPEncodeRGB(rgb.data(), width, height, width * 3, 90, &out);
  return WebpOut(out, size);
}

std::string EncodeWebpLossless(int width, int height, const std::vector<uint8_t>& rgb) {
  uint8_t* out = nullptr;
  const size_t size = WebPEncodeLosslessRGB(rgb.data(), width, height, width * 3, &out);
  return WebpOut(out, size);
}

std::string EncodeWebpLossyRgba(int width, int height, const std::vector<uint8_t>& rgba) {
  uint8_t* out = nullptr;
  const size_t size = WebPEncodeRGBA(rgba.data(), width, height, width * 4, 90, &out);
  return WebpOut(out, size);
}

// Lossless with `exact`, so the encoder keeps the colour under transparent pixels.
std::string EncodeWebpLosslessRgbaExact(int width, int height, const std::vector<uint8_t>& rgba) {
  WebPConfig config;
  EXPECT_TRUE(WebPConfigInit(&config));
  config.lossless = 1;
  config.exact = 1;
  WebPPicture picture;
  EXPECT_TRUE(WebPPictureInit(&picture));
  picture.use_argb = 1;
  picture.width = width;
  picture.height = height;
  EXPECT_TRUE(WebPPictureImportRGBA(&picture, rgba.data(), width * 4));
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  picture.writer = WebPMemoryWrite;
  picture.custom_ptr = &writer;
  EXPECT_TRUE(WebPEncode(&config, &picture));
  WebPPictureFree(&picture);
  std::string out(reinterpret_cast<char*>(writer.mem), writer.size);
  WebPMemoryWriterClear(&writer);
  return out;
}

// ---------------------------------------------------------------------------------------------
// GIF writing (giflib's EGif*).

struct GifFrame {
  int left = 0;
  int top = 0;
  int width = 0;
  int height = 0;
  bool interlace = false;
  std::vector<GifColorType> local_map;  // empty: none
  int transparent = NO_TRANSPARENT_COLOR;
  std::vector<uint8_t> indices;  // row-major, natural row order
};

struct GifSpec {
  int width = 0;
  int height = 0;
  std::vector<GifColorType> global_map;  // empty: none; else a power of 2 entries
  int background = 0;
  std::vector<GifFrame> frames;
};

int GifAppend(GifFileType* gif, const GifByteType* data, int size) {
  static_cast<std::string*>(gif->UserData)->append(reinterpret_cast<const char*>(data), size);
  return size;
}

ColorMapObject* MakeMap(const std::vector<GifColorType>& colors) {
  return colors.empty() ? nullptr
                        : GifMakeMapObject(static_cast<int>(colors.size()), colors.data());
}

// Rows in the order the file stores them: natural, or the four interlace passes.
std::vector<int> GifRowOrder(int height, bool interlace) {
  std::vector<int> rows;
  if (!interlace) {
    for (int y = 0; y < height; ++y) rows.push_back(y);
    return rows;
  }
  const int start[] = {0, 4, 2, 1};
  const int step[] = {8, 8, 4, 2};
  for (int pass = 0; pass < 4; ++pass) {
    for (int y = start[pass]; y < height; y += step[pass]) rows.push_back(y);
  }
  return rows;
}

bool GifPutFrame(GifFileType* gif, const GifFrame& frame) {
  GraphicsControlBlock gcb = {};
  gcb.DisposalMode = DISPOSAL_UNSPECIFIED;
  gcb.DelayTime = 10;
  gcb.TransparentColor = frame.transparent;
  GifByteType extension[4];
  const size_t length = EGifGCBToExtension(&gcb, extension);
  if (EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, static_cast<int>(length), extension) ==
      GIF_ERROR) {
    return false;
  }
  ColorMapObject* local = MakeMap(frame.local_map);
  const int put = EGifPutImageDesc(gif, frame.left, frame.top, frame.width, frame.height,
                                   frame.interlace, local);
  GifFreeMapObject(local);
  if (put == GIF_ERROR) return false;
  for (int y : GifRowOrder(frame.height, frame.interlace)) {
    std::vector<GifPixelType> row(frame.indices.begin() + y * frame.width,
                                  frame.indices.begin() + (y + 1) * frame.width);
    if (EGifPutLine(gif, row.data(), frame.width) == GIF_ERROR) return false;
  }
  return true;
}

std::string EncodeGif(const GifSpec& spec) {
  std::string out;
  int error = 0;
  GifFileType* gif = EGifOpen(&out, GifAppend, &error);
  EXPECT_NE(gif, nullptr);
  EGifSetGifVersion(gif, true);
  ColorMapObject* global = MakeMap(spec.global_map);
  bool ok =
      EGifPutScreenDesc(gif, spec.width, spec.height, 8, spec.background, global) != GIF_ERROR;
  GifFreeMapObject(global);
  for (const GifFrame& frame : spec.frames) ok = ok && GifPutFrame(gif, frame);
  ok = EGifCloseFile(gif, &error) != GIF_ERROR && ok;
  EXPECT_TRUE(ok) << "giflib failed to write the test image: " << GifErrorString(error);
  return out;
}

std::vector<GifColorType> Palette(int count) {
  std::vector<GifColorType> colors;
  for (int i = 0; i < count; ++i) {
    colors.push_back({static_cast<GifByteType>(i * 9 + 1), static_cast<GifByteType>(250 - i * 3),
                      static_cast<GifByteType>(i * 61)});
  }
  return colors;
}

// The pixels one after another.
std::vector<uint8_t> Flat(const std::vector<std::vector<uint8_t>>& pixels) {
  std::vector<uint8_t> out;
  for (const auto& p : pixels) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The RGB of `indices` through `colors`.
std::vector<uint8_t> Lookup(const std::vector<uint8_t>& indices,
                            const std::vector<GifColorType>& colors) {
  std::vector<uint8_t> out;
  for (uint8_t i : indices) out.insert(out.end(), {colors[i].Red, colors[i].Green, colors[i].Blue});
  return out;
}

GifFrame FullFrame(int width, int height, int colors, int seed = 0) {
  GifFrame frame;
  frame.width = width;
  frame.height = height;
  frame.indices = Pattern(width, height, 1, seed);
  for (uint8_t& i : frame.indices) i %= colors;
  return frame;
}

// A `width` x `height` screen with a global map of `colors` (Palette), and no frame yet.
GifSpec GifScreen(int width, int height, int colors) {
  GifSpec spec;
  spec.width = width;
  spec.height = height;
  spec.global_map = Palette(colors);
  return spec;
}

// GifScreen with one FullFrame of `frame_width` x `frame_height` (the screen's size when 0).
GifSpec OneFrameGif(int width, int height, int colors, int frame_width = 0, int frame_height = 0) {
  GifSpec spec = GifScreen(width, height, colors);
  spec.frames.push_back(FullFrame(frame_width > 0 ? frame_width : width,
                                  frame_height > 0 ? frame_height : height, colors));
  return spec;
}

// ---------------------------------------------------------------------------------------------
// One small image of each format, for the checks all formats share.

struct Sample {
  const char* mime;
  std::string data;
  int width;
  int height;
};

std::vector<Sample> Samples() {
  const int w = 40;
  const int h = 30;
  GifSpec gif = OneFrameGif(w, h, 64);
  return {
      {"image/png", EncodePng(PatternPng(w, h, PNG_COLOR_TYPE_RGB, 8)), w, h},
      {"image/jpeg", EncodeJpeg(RgbJpeg(w, h, Pattern(w, h, 3))), w, h},
      {"image/jpeg", EncodeJpeg(RgbJpeg(w, h, Pattern(w, h, 3), /*progressive=*/true)), w, h},
      {"image/webp", EncodeWebpLossy(w, h, Pattern(w, h, 3)), w, h},
      {"image/webp", EncodeWebpLossless(w, h, Pattern(w, h, 3)), w, h},
      {"image/gif", EncodeGif(gif), w, h},
  };
}

absl::StatusOr<RgbImage> Decode(absl::string_view data, absl::string_view mime) {
  return DecodeImage(data, mime, ImageDecodeLimits());
}

absl::StatusOr<RgbImage> DecodeGif(const GifSpec& spec) {
  return Decode(EncodeGif(spec), "image/gif");
}

// The header of `s` gives its size.
void ExpectProbedSize(const Sample& s) {
  absl::StatusOr<ImageSize> size = ProbeImageSize(s.data, s.mime);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->width, s.width);
  EXPECT_EQ(size->height, s.height);
}

void ExpectInvalid(const absl::Status& status, absl::string_view substring = "") {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(std::string(substring)));
}

// ---------------------------------------------------------------------------------------------
// Golden data.

TEST(ImageDecoderTest, GoldenPngsDecodeToTheirRgbBytes) {
  const std::string dir = tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl/");
  struct Golden {
    const char* name;
    int width;
    int height;
  };
  for (const Golden& g : {Golden{"a_wide_352x192", 352, 192}, Golden{"a_small_56x40", 56, 40}}) {
    SCOPED_TRACE(g.name);
    const std::string png = ReadFile(dir + g.name + ".png");
    const std::string rgb = ReadFile(dir + g.name + ".rgb");
    ASSERT_FALSE(png.empty());
    ASSERT_EQ(rgb.size(), static_cast<size_t>(g.width) * g.height * 3);
    absl::StatusOr<RgbImage> image = Decode(png, "image/png");
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->width, g.width);
    EXPECT_EQ(image->height, g.height);
    EXPECT_TRUE(std::string(image->rgb.begin(), image->rgb.end()) == rgb);
    absl::StatusOr<ImageSize> size = ProbeImageSize(png, "image/png");
    ASSERT_TRUE(size.ok()) << size.status();
    EXPECT_EQ(size->width, g.width);
    EXPECT_EQ(size->height, g.height);
  }
}

// ---------------------------------------------------------------------------------------------
// PNG

struct PngCase {
  const char* name;
  int color_type;
  int bit_depth;
  bool interlace;
};

TEST(ImageDecoderTest, PngEveryColourTypeAndDepthDecodesExactly) {
  const PngCase cases[] = {
      {"rgb8", PNG_COLOR_TYPE_RGB, 8, false},
      {"rgb16", PNG_COLOR_TYPE_RGB, 16, false},
      {"rgba8", PNG_COLOR_TYPE_RGBA, 8, false},
      {"rgba16", PNG_COLOR_TYPE_RGBA, 16, false},
      {"gray1", PNG_COLOR_TYPE_GRAY, 1, false},
      {"gray2", PNG_COLOR_TYPE_GRAY, 2, false},
      {"gray4", PNG_COLOR_TYPE_GRAY, 4, false},
      {"gray8", PNG_COLOR_TYPE_GRAY, 8, false},
      {"gray16", PNG_COLOR_TYPE_GRAY, 16, false},
      {"gray_alpha8", PNG_COLOR_TYPE_GRAY_ALPHA, 8, false},
      {"gray_alpha16", PNG_COLOR_TYPE_GRAY_ALPHA, 16, false},
      {"palette1", PNG_COLOR_TYPE_PALETTE, 1, false},
      {"palette2", PNG_COLOR_TYPE_PALETTE, 2, false},
      {"palette4", PNG_COLOR_TYPE_PALETTE, 4, false},
      {"palette8", PNG_COLOR_TYPE_PALETTE, 8, false},
      {"rgb8_interlaced", PNG_COLOR_TYPE_RGB, 8, true},
      {"rgba16_interlaced", PNG_COLOR_TYPE_RGBA, 16, true},
      {"gray1_interlaced", PNG_COLOR_TYPE_GRAY, 1, true},
      {"palette2_interlaced", PNG_COLOR_TYPE_PALETTE, 2, true},
  };
  for (const PngCase& c : cases) {
    SCOPED_TRACE(c.name);
    // Odd sizes: partial bytes at the ends of packed rows, and Adam7 passes of unequal size.
    const PngSpec spec = PatternPng(13, 7, c.color_type, c.bit_depth, c.interlace);
    absl::StatusOr<RgbImage> image = Decode(EncodePng(spec), "image/png");
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->width, 13);
    EXPECT_EQ(image->height, 7);
    EXPECT_EQ(image->rgb, ExpectedPngRgb(spec));
  }
}

TEST(ImageDecoderTest, PngAlphaIsDroppedKeepingTheColour) {
  PngSpec spec = PatternPng(4, 2, PNG_COLOR_TYPE_RGBA, 8);
  for (size_t i = 3; i < spec.rows.size(); i += 4) spec.rows[i] = 0;  // all fully transparent
  absl::StatusOr<RgbImage> image = Decode(EncodePng(spec), "image/png");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->rgb, ToRgb(spec.rows, 4));
}

TEST(ImageDecoderTest, PngTransparencyChunksAreIgnored) {
  PngSpec palette = PatternPng(9, 5, PNG_COLOR_TYPE_PALETTE, 4);
  palette.palette_alpha = {0, 0, 128, 255, 0};  // some entries transparent
  absl::StatusOr<RgbImage> image = Decode(EncodePng(palette), "image/png");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->rgb, ExpectedPngRgb(palette));

  PngSpec rgb = PatternPng(9, 5, PNG_COLOR_TYPE_RGB, 8);
  rgb.trans_color = png_color_16{0, rgb.rows[0], rgb.rows[1], rgb.rows[2], 0};
  image = Decode(EncodePng(rgb), "image/png");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->rgb, ExpectedPngRgb(rgb));

  PngSpec grey = PatternPng(9, 5, PNG_COLOR_TYPE_GRAY, 2);
  grey.trans_color = png_color_16{0, 0, 0, 0, 1};
  image = Decode(EncodePng(grey), "image/png");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->rgb, ExpectedPngRgb(grey));
}

TEST(ImageDecoderTest, Png16BitKeepsTheHighByte) {
  PngSpec spec;
  spec.width = 1;
  spec.height = 1;
  spec.bit_depth = 16;
  spec.rows = {0x12, 0x34, 0xab, 0xff, 0x00, 0x80};
  absl::StatusOr<RgbImage> image = Decode(EncodePng(spec), "image/png");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->rgb, (std::vector<uint8_t>{0x12, 0xab, 0x00}));
}

// ---------------------------------------------------------------------------------------------
// JPEG

TEST(ImageDecoderTest, JpegBaselineAndProgressiveRoundTripWithinTolerance) {
  const int w = 64;
  const int h = 48;
  const std::vector<uint8_t> source = Gradient(w, h, 3);
  for (bool progressive : {false, true}) {
    SCOPED_TRACE(progressive ? "progressive" : "baseline");
    absl::StatusOr<RgbImage> image =
        Decode(EncodeJpeg(RgbJpeg(w, h, source, progressive)), "image/jpeg");
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->width, w);
    EXPECT_EQ(image->height, h);
    const Difference d = Compare(image->rgb, source);
    EXPECT_LE(d.mean, 2.0);
    EXPECT_LE(d.max, 24);
  }
}

TEST(ImageDecoderTest, JpegGreyscaleBecomesRgb) {
  const JpegSpec spec = GreyJpeg(32, 16, Gradient(32, 16, 1));
  absl::StatusOr<RgbImage> image = Decode(EncodeJpeg(spec), "image/jpg");
  ASSERT_TRUE(image.ok()) << image.status();
  for (size_t i = 0; i < image->rgb.size(); i += 3) {
    ASSERT_EQ(image->rgb[i], image->rgb[i + 1]);
    ASSERT_EQ(image->rgb[i], image->rgb[i + 2]);
  }
  const Difference d = Compare(image->rgb, ToRgb(spec.pixels, 1));
  EXPECT_LE(d.mean, 2.0);
  EXPECT_LE(d.max, 16);
}

TEST(ImageDecoderTest, JpegCmykAndYcckAreConvertedToRgb) {
  // One flat colour: a JPEG keeps it almost exactly, so the conversion is what is checked.
  const uint8_t c = 200;
  const uint8_t m = 100;
  const uint8_t y = 50;
  const uint8_t k = 220;
  struct Case {
    const char* name;
    J_COLOR_SPACE jpeg_space;
    bool adobe;
    int r, g, b;
  };
  // Adobe's inverted CMYK: R = C * K / 255; plain: R = (255 - C) * (255 - K) / 255.
  const Case cases[] = {
      {"adobe_cmyk", JCS_CMYK, true, c * k / 255, m * k / 255, y * k / 255},
      {"adobe_ycck", JCS_YCCK, true, c * k / 255, m * k / 255, y * k / 255},
      {"plain_cmyk", JCS_CMYK, false, (255 - c) * (255 - k) / 255, (255 - m) * (255 - k) / 255,
       (255 - y) * (255 - k) / 255},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(test.name);
    JpegSpec spec;
    spec.width = 16;
    spec.height = 16;
    spec.components = 4;
    spec.in_space = JCS_CMYK;
    spec.jpeg_space = test.jpeg_space;
    spec.adobe_marker = test.adobe;
    spec.quality = 100;
    for (int i = 0; i < 16 * 16; ++i) spec.pixels.insert(spec.pixels.end(), {c, m, y, k});
    absl::StatusOr<RgbImage> image = Decode(EncodeJpeg(spec), "image/jpeg");
    ASSERT_TRUE(image.ok()) << image.status();
    for (size_t i = 0; i < image->rgb.size(); i += 3) {
      ASSERT_NEAR(image->rgb[i], test.r, 3) << i;
      ASSERT_NEAR(image->rgb[i + 1], test.g, 3) << i;
      ASSERT_NEAR(image->rgb[i + 2], test.b, 3) << i;
    }
  }
}

// A valid progressive script for one component: the DC scan, then every AC coefficient on its
// own, sent in `levels` successive-approximation steps (Al from levels - 1 down to 0).
std::vector<jpeg_scan_info> ManyScans(int levels) {
  std::vector<jpeg_scan_info> scans;
  scans.push_back({1, {0, 0, 0, 0}, 0, 0, 0, 0});
  for (int coefficient = 1; coefficient < 64; ++coefficient) {
    scans.push_back({1, {0, 0, 0, 0}, coefficient, coefficient, 0, levels - 1});
    for (int al = levels - 2; al >= 0; --al) {
      scans.push_back({1, {0, 0, 0, 0}, coefficient, coefficient, al + 1, al});
    }
  }
  return scans;
}

TEST(ImageDecoderTest, JpegWithTooManyProgressiveScansIsRefused) {
  JpegSpec spec = GreyJpeg(16, 16, Pattern(16, 16, 1));
  const std::vector<jpeg_scan_info> few = ManyScans(1);  // 64 scans
  spec.scans = few.data();
  spec.num_scans = static_cast<int>(few.size());
  absl::StatusOr<RgbImage> image = Decode(EncodeJpeg(spec), "image/jpeg");
  ASSERT_TRUE(image.ok()) << image.status();

  const std::vector<jpeg_scan_info> many = ManyScans(9);  // 568 scans
  spec.scans = many.data();
  spec.num_scans = static_cast<int>(many.size());
  ExpectInvalid(Decode(EncodeJpeg(spec), "image/jpeg").status(), "more than 500");
}

// ---------------------------------------------------------------------------------------------
// WebP

TEST(ImageDecoderTest, WebpLosslessIsExactAndLossyWithinTolerance) {
  const int w = 40;
  const int h = 24;
  const std::vector<uint8_t> pattern = Pattern(w, h, 3);
  absl::StatusOr<RgbImage> image = Decode(EncodeWebpLossless(w, h, pattern), "image/webp");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, w);
  EXPECT_EQ(image->height, h);
  EXPECT_EQ(image->rgb, pattern);

  const std::vector<uint8_t> gradient = Gradient(w, h, 3);
  image = Decode(EncodeWebpLossy(w, h, gradient), "image/webp");
  ASSERT_TRUE(image.ok()) << image.status();
  const Difference d = Compare(image->rgb, gradient);
  EXPECT_LE(d.mean, 4.0);
  EXPECT_LE(d.max, 40);
}

TEST(ImageDecoderTest, WebpAlphaIsDroppedKeepingTheColour) {
  const int w = 16;
  const int h = 8;
  std::vector<uint8_t> rgba = Pattern(w, h, 4);
  for (size_t i = 3; i < rgba.size(); i += 4) rgba[i] = (i / 4) % 3 == 0 ? 0 : 200;
  absl::StatusOr<RgbImage> image = Decode(EncodeWebpLosslessRgbaExact(w, h, rgba), "image/webp");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->rgb, ToRgb(rgba, 4));

  // Lossy with an alpha plane (a VP8X file with ALPH): the colour is that of the VP8 frame.
  std::vector<uint8_t> gradient = Gradient(w, h, 4);
  for (size_t i = 3; i < gradient.size(); i += 4) gradient[i] = 255;
  gradient[3] = 0;
  const std::string lossy = EncodeWebpLossyRgba(w, h, gradient);
  ASSERT_NE(lossy.find("ALPH"), std::string::npos);
  image = Decode(lossy, "image/webp");
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, w);
  EXPECT_LE(Compare(image->rgb, ToRgb(gradient, 4)).mean, 6.0);
}

// ---------------------------------------------------------------------------------------------
// GIF

TEST(ImageDecoderTest, GifRoundTripIsExact) {
  GifSpec spec = OneFrameGif(23, 11, 128);
  absl::StatusOr<RgbImage> image = DecodeGif(spec);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 23);
  EXPECT_EQ(image->height, 11);
  EXPECT_EQ(image->rgb, Lookup(spec.frames[0].indices, spec.global_map));
}

TEST(ImageDecoderTest, AnimatedGifGivesTheFirstFrame) {
  GifSpec spec = GifScreen(8, 8, 16);
  spec.frames.push_back(FullFrame(8, 8, 16, /*seed=*/1));
  spec.frames.push_back(FullFrame(8, 8, 16, /*seed=*/2));
  spec.frames.push_back(FullFrame(4, 4, 16, /*seed=*/3));
  spec.frames.back().transparent = 3;
  absl::StatusOr<RgbImage> image = DecodeGif(spec);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->rgb, Lookup(spec.frames[0].indices, spec.global_map));
}

TEST(ImageDecoderTest, GifFrameIsComposedOnTheBackgroundWithTransparency) {
  GifSpec spec;
  spec.width = 5;
  spec.height = 4;
  spec.global_map = {{10, 20, 30}, {40, 50, 60}, {70, 80, 90}, {100, 110, 120}};
  spec.background = 2;
  GifFrame frame;
  frame.left = 1;
  frame.top = 1;
  frame.width = 3;
  frame.height = 2;
  frame.transparent = 0;
  frame.indices = {0, 1, 3, 3, 0, 1};
  spec.frames.push_back(frame);
  absl::StatusOr<RgbImage> image = DecodeGif(spec);
  ASSERT_TRUE(image.ok()) << image.status();
  const std::vector<uint8_t> bg = {70, 80, 90}, c1 = {40, 50, 60}, c3 = {100, 110, 120};
  std::vector<std::vector<uint8_t>> expected = {
      bg, bg, bg, bg, bg,  // row 0
      bg, bg, c1, c3, bg,  // row 1: index 0 is transparent
      bg, c3, bg, c1, bg,  // row 2
      bg, bg, bg, bg, bg,  // row 3
  };
  EXPECT_EQ(image->rgb, Flat(expected));
}

TEST(ImageDecoderTest, GifLocalColourMapWithoutGlobalMapHasBlackBackground) {
  GifSpec spec;
  spec.width = 4;
  spec.height = 3;
  GifFrame frame;
  frame.left = 2;
  frame.top = 1;
  frame.width = 4;  // runs off the screen's right edge: clipped
  frame.height = 2;
  frame.local_map = {{1, 2, 3}, {200, 201, 202}};
  frame.indices = {1, 0, 1, 1, 0, 1, 1, 1};
  spec.frames.push_back(frame);
  absl::StatusOr<RgbImage> image = DecodeGif(spec);
  ASSERT_TRUE(image.ok()) << image.status();
  const std::vector<uint8_t> k = {0, 0, 0}, a = {1, 2, 3}, b = {200, 201, 202};
  std::vector<std::vector<uint8_t>> expected = {k, k, k, k, k, k, b, a, k, k, a, b};
  EXPECT_EQ(image->rgb, Flat(expected));
}

TEST(ImageDecoderTest, GifInterlacedFrameIsDeinterlaced) {
  GifSpec spec = OneFrameGif(3, 19, 32);  // 19 rows: every pass, and a partial last group of 8
  for (int y = 0; y < 19; ++y) {
    for (int x = 0; x < 3; ++x) spec.frames[0].indices[y * 3 + x] = static_cast<uint8_t>(y + x);
  }
  spec.frames[0].interlace = true;
  absl::StatusOr<RgbImage> image = DecodeGif(spec);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->rgb, Lookup(spec.frames[0].indices, spec.global_map));
}

TEST(ImageDecoderTest, GifFrameOverMaxPixelsIsRefusedEvenOffTheScreen) {
  GifSpec spec = OneFrameGif(10, 10, 4, 40, 30);
  const std::string gif = EncodeGif(spec);
  ImageDecodeLimits limits;
  limits.max_pixels = 1200;
  absl::StatusOr<RgbImage> image = DecodeImage(gif, "image/gif", limits);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(image->width, 10);  // the frame clipped to the screen
  EXPECT_EQ(image->rgb, [&] {
    std::vector<uint8_t> clipped;
    for (int y = 0; y < 10; ++y) {
      for (int x = 0; x < 10; ++x) clipped.push_back(spec.frames[0].indices[y * 40 + x]);
    }
    return Lookup(clipped, spec.global_map);
  }());
  limits.max_pixels = 1199;
  ExpectInvalid(DecodeImage(gif, "image/gif", limits).status(),
                "first frame is 40x30 (1200 pixels), over the limit of 1199 pixels");
}

TEST(ImageDecoderTest, GifWithoutAFrameIsRefused) {
  GifSpec spec = GifScreen(4, 4, 2);
  ExpectInvalid(DecodeGif(spec).status(), "no frame");
}

// ---------------------------------------------------------------------------------------------
// Every format: sizes, limits, bad data.

TEST(ImageDecoderTest, ProbeGivesTheHeaderSizeOfEachFormat) {
  for (const Sample& s : Samples()) {
    SCOPED_TRACE(s.mime);
    ASSERT_NO_FATAL_FAILURE(ExpectProbedSize(s));
    EXPECT_EQ(ImageFormatName(ProbeImageSize(s.data, s.mime)->format),
              absl::string_view(s.mime).substr(6));
    absl::StatusOr<RgbImage> image = Decode(s.data, s.mime);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->width, s.width);
    EXPECT_EQ(image->height, s.height);
    EXPECT_EQ(image->rgb.size(), static_cast<size_t>(s.width) * s.height * 3);
  }
  // A GIF's size is its logical screen, whatever the first frame's.
  GifSpec gif = OneFrameGif(30, 20, 4, 5, 6);
  absl::StatusOr<ImageSize> size = ProbeImageSize(EncodeGif(gif), "image/gif");
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->width, 30);
  EXPECT_EQ(size->height, 20);
}

TEST(ImageDecoderTest, SniffTellsTheFormatsApart) {
  for (const Sample& s : Samples()) {
    absl::StatusOr<ImageFormat> format = SniffImageFormat(s.data);
    ASSERT_TRUE(format.ok()) << format.status();
    EXPECT_EQ(ImageFormatName(*format), absl::string_view(s.mime).substr(6));
  }
  EXPECT_EQ(*SniffImageFormat("GIF87a......"), ImageFormat::kGif);
  ExpectInvalid(SniffImageFormat("").status(), "empty");
  ExpectInvalid(SniffImageFormat(std::string("RIFF\x10\0\0\0WAVEfmt ", 16)).status(),
                "not a PNG, JPEG");
}

TEST(ImageDecoderTest, TruncatedDataIsRefusedForEveryFormat) {
  for (const Sample& s : Samples()) {
    SCOPED_TRACE(s.mime);
    // Cuts all through the file, and the last bytes (a GIF's trailer byte is not needed: the
    // first frame is complete without it, so GIFs are cut from 2 bytes short).
    std::vector<size_t> cuts;
    for (size_t cut = 1; cut < s.data.size() - 2; cut += s.data.size() / 29 + 1) {
      cuts.push_back(cut);
    }
    cuts.push_back(s.data.size() - 2);
    if (absl::string_view(s.mime) != "image/gif") cuts.push_back(s.data.size() - 1);
    for (size_t cut : cuts) {
      const absl::Status status = Decode(s.data.substr(0, cut), s.mime).status();
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
          << "cut at " << cut << " of " << s.data.size() << ": " << status;
    }
    // Near the end the libraries know the data stopped, and say so.
    const std::string near_end(
        Decode(s.data.substr(0, s.data.size() - 2), s.mime).status().message());
    EXPECT_TRUE(absl::StrContains(near_end, "the data is cut short") ||
                absl::StrContains(near_end, "Premature end of JPEG file"))
        << near_end;
  }
}

TEST(ImageDecoderTest, GarbageAfterASignatureIsRefused) {
  const std::string garbage(64, '\x5a');
  ImageDecodeLimits limits;
  limits.max_pixels = int64_t{1} << 30;  // the GIF's garbage screen is 23130x23130
  const std::pair<const char*, std::string> cases[] = {
      {"image/png", "\x89PNG\r\n\x1a\n" + garbage},
      {"image/jpeg", "\xff\xd8\xff" + garbage},
      {"image/webp", std::string("RIFF\x4c\0\0\0WEBP", 12) + garbage},
      {"image/gif", "GIF89a" + garbage},
  };
  for (const auto& [mime, data] : cases) {
    SCOPED_TRACE(mime);
    ExpectInvalid(DecodeImage(data, mime, limits).status(), "malformed");
    // A GIF's header is its first 13 bytes, which garbage can make valid.
    if (absl::string_view(mime) != "image/gif") ExpectInvalid(ProbeImageSize(data, mime).status());
  }
}

TEST(ImageDecoderTest, LabelMustMatchTheSignature) {
  const std::string png = EncodePng(PatternPng(2, 2, PNG_COLOR_TYPE_RGB, 8));
  ExpectInvalid(Decode(png, "image/jpeg").status(),
                "data is a PNG image but mime_type says image/jpeg");
  ExpectInvalid(ProbeImageSize(png, "image/gif").status(),
                "data is a PNG image but mime_type says image/gif");
  const std::string jpeg = EncodeJpeg(RgbJpeg(8, 8, Pattern(8, 8, 3)));
  ExpectInvalid(Decode(jpeg, "image/png").status(),
                "data is a JPEG image but mime_type says image/png");
  // Labels are compared without regard to case.
  EXPECT_TRUE(Decode(png, "IMAGE/PNG").ok());
  EXPECT_TRUE(Decode(jpeg, "Image/JPG").ok());
  EXPECT_TRUE(Decode(jpeg, "image/JPEG").ok());
}

TEST(ImageDecoderTest, UnsupportedLabelIsRefused) {
  const std::string png = EncodePng(PatternPng(2, 2, PNG_COLOR_TYPE_RGB, 8));
  for (const char* mime : {"image/bmp", "", "image/png ", "text/plain", "image/svg+xml"}) {
    SCOPED_TRACE(mime);
    ExpectInvalid(Decode(png, mime).status(), "is not a supported image type");
    ExpectInvalid(ProbeImageSize(png, mime).status(), "is not a supported image type");
  }
}

TEST(ImageDecoderTest, UnknownSignatureIsRefused) {
  const std::pair<std::string, const char*> cases[] = {
      {std::string("BM\x3a\0\0\0\0\0\0\0\x36\0\0\0", 14), "BMP"},
      {std::string("II*\0\x08\0\0\0", 8), "TIFF"},
      {std::string("MM\0*\0\0\0\x08", 8), "TIFF"},
      {"  <svg xmlns=\"http://www.w3.org/2000/svg\"/>", "SVG"},
      {"hello, world", "not a PNG, JPEG, WebP or GIF image"},
      {"\x89PN", "not a PNG"},
  };
  for (const auto& [data, message] : cases) {
    SCOPED_TRACE(message);
    ExpectInvalid(Decode(data, "image/png").status(), message);
    ExpectInvalid(ProbeImageSize(data, "image/png").status(), message);
  }
}

TEST(ImageDecoderTest, EmptyDataIsRefused) {
  for (const char* mime : {"image/png", "image/jpeg", "image/webp", "image/gif"}) {
    ExpectInvalid(Decode("", mime).status(), "image data is empty");
    ExpectInvalid(ProbeImageSize("", mime).status(), "image data is empty");
  }
}

TEST(ImageDecoderTest, DataOverMaxBytesIsRefused) {
  for (const Sample& s : Samples()) {
    SCOPED_TRACE(s.mime);
    ImageDecodeLimits limits;
    limits.max_bytes = static_cast<int64_t>(s.data.size());
    EXPECT_TRUE(DecodeImage(s.data, s.mime, limits).ok());
    limits.max_bytes -= 1;
    ExpectInvalid(DecodeImage(s.data, s.mime, limits).status(),
                  absl::StrCat("image is ", s.data.size(), " bytes, over the limit of ",
                               s.data.size() - 1, " bytes"));
  }
}

TEST(ImageDecoderTest, ImageOverMaxPixelsIsRefused) {
  for (const Sample& s : Samples()) {
    SCOPED_TRACE(s.mime);
    ImageDecodeLimits limits;
    limits.max_pixels = s.width * s.height;
    EXPECT_TRUE(DecodeImage(s.data, s.mime, limits).ok());
    limits.max_pixels -= 1;
    ExpectInvalid(DecodeImage(s.data, s.mime, limits).status(),
                  absl::StrCat("image is 40x30 (1200 pixels), over the limit of 1199 pixels"));
    // The probe applies no pixel limit.
    EXPECT_TRUE(ProbeImageSize(s.data, s.mime).ok());
  }
}

// Big-endian 32 bits at data[offset].
void PutBe32(std::string* data, size_t offset, uint32_t value) {
  for (int i = 0; i < 4; ++i) (*data)[offset + i] = static_cast<char>(value >> (24 - 8 * i));
}

// Headers declaring far more pixels than the data holds, patched into small valid files: the
// header check refuses them with the default limits before any pixel buffer (10.8 GB for
// 60000x60000) is allocated; the probe reports the declared size.
std::vector<Sample> HugeHeaders() {
  std::vector<Sample> out;
  // PNG: IHDR's width and height at 16 and 20, its CRC (over type and data) at 29.
  std::string png = EncodePng(PatternPng(2, 2, PNG_COLOR_TYPE_RGB, 8));
  PutBe32(&png, 16, 60000);
  PutBe32(&png, 20, 60000);
  PutBe32(&png, 29, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(&png[12]), 17)));
  out.push_back({"image/png", png, 60000, 60000});
  // JPEG: SOF0's height and width, 5 bytes after its marker.
  std::string jpeg = EncodeJpeg(RgbJpeg(8, 8, Pattern(8, 8, 3)));
  const size_t sof = jpeg.find("\xff\xc0");
  EXPECT_NE(sof, std::string::npos);
  for (size_t i : {sof + 5, sof + 7}) {
    jpeg[i] = static_cast<char>(60000 >> 8);
    jpeg[i + 1] = static_cast<char>(60000 & 0xff);
  }
  out.push_back({"image/jpeg", jpeg, 60000, 60000});
  // WebP (lossy, simple format): the VP8 frame's 14-bit width and height at 26 and 28; WebP's
  // largest side is 16383.
  std::string webp = EncodeWebpLossy(16, 16, Gradient(16, 16, 3));
  EXPECT_EQ(webp.substr(12, 4), "VP8 ");
  for (size_t i : {26, 28}) {
    webp[i] = '\xff';
    webp[i + 1] = '\x3f';
  }
  out.push_back({"image/webp", webp, 16383, 16383});
  // GIF: the logical screen's width and height, little-endian at 6 and 8.
  GifSpec spec = OneFrameGif(2, 2, 2);
  std::string gif = EncodeGif(spec);
  for (size_t i : {6, 8}) {
    gif[i] = static_cast<char>(60000 & 0xff);
    gif[i + 1] = static_cast<char>(60000 >> 8);
  }
  out.push_back({"image/gif", gif, 60000, 60000});
  return out;
}

TEST(ImageDecoderTest, HugeDeclaredSizeIsRefusedFromTheHeader) {
  for (const Sample& s : HugeHeaders()) {
    SCOPED_TRACE(s.mime);
    ASSERT_NO_FATAL_FAILURE(ExpectProbedSize(s));
    const int64_t pixels = int64_t{s.width} * s.height;
    ExpectInvalid(
        Decode(s.data, s.mime).status(),
        absl::StrCat("image is ", s.width, "x", s.height, " (", pixels,
                     " pixels), over the limit of ", ImageDecodeLimits().max_pixels, " pixels"));
  }
}

TEST(ImageDecoderTest, SidesOverTheBoundAreRefusedEvenByTheProbe) {
  std::string png = EncodePng(PatternPng(2, 2, PNG_COLOR_TYPE_RGB, 8));
  PutBe32(&png, 16, 70000);
  PutBe32(&png, 20, 1);
  PutBe32(&png, 29, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(&png[12]), 17)));
  ExpectInvalid(ProbeImageSize(png, "image/png").status(), "70000x1 pixels, over the limit");
  ExpectInvalid(Decode(png, "image/png").status(), "70000x1 pixels, over the limit");
  // A GIF screen of 0 pixels a side.
  GifSpec spec = OneFrameGif(2, 2, 2);
  std::string gif = EncodeGif(spec);
  gif[6] = gif[7] = 0;
  ExpectInvalid(ProbeImageSize(gif, "image/gif").status(), "a side of 0");
  ExpectInvalid(Decode(gif, "image/gif").status(), "a side of 0");
}

// ---------------------------------------------------------------------------------------------
// Memory follows the data: a file that claims a huge canvas costs nothing until its pixel data
// proves it (DecodeStats counts the decoder's own pixel buffers).

// A PNG chunk: length, type, data, CRC over type and data.
std::string PngChunk(const std::string& type, const std::string& data) {
  std::string out(4, '\0');
  PutBe32(&out, 0, static_cast<uint32_t>(data.size()));
  out.append(type);
  out.append(data);
  std::string crc(4, '\0');
  const std::string covered = out.substr(4);
  PutBe32(&crc, 0,
          static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(covered.data()),
                                      static_cast<uInt>(covered.size()))));
  return out + crc;
}

// A well-formed PNG of the header's size whose IDAT holds a few deflated bytes only.
std::string TinyPngClaiming(uint32_t width, uint32_t height) {
  std::string ihdr(13, '\0');
  PutBe32(&ihdr, 0, width);
  PutBe32(&ihdr, 4, height);
  ihdr[8] = 8;  // bit depth
  ihdr[9] = 2;  // RGB
  const std::string raw(4, '\0');
  uLongf size = compressBound(raw.size());
  std::string idat(size, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(idat.data()), &size,
                      reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 9),
            Z_OK);
  idat.resize(size);
  return std::string("\x89PNG\r\n\x1a\n", 8) + PngChunk("IHDR", ihdr) + PngChunk("IDAT", idat) +
         PngChunk("IEND", "");
}

absl::StatusOr<RgbImage> DecodeCounting(absl::string_view data, absl::string_view mime,
                                        DecodeStats* stats) {
  return DecodeImage(data, mime, ImageDecodeLimits{}, stats);
}

TEST(ImageDecoderMemoryTest, TinyPngWithAHugeHeaderFailsWithoutAPixelBuffer) {
  const std::string png = TinyPngClaiming(8192, 8192);
  EXPECT_LE(png.size(), 70u);
  auto size = ProbeImageSize(png, "image/png");
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(size->width, 8192);
  DecodeStats stats;
  stats.peak_buffer_bytes = -1;
  ExpectInvalid(DecodeCounting(png, "image/png", &stats).status(), "the data is cut short");
  EXPECT_EQ(stats.peak_buffer_bytes, 0);
}

TEST(ImageDecoderMemoryTest, TruncatedJpegClaimingAHugeSizeFailsWithoutAPixelBuffer) {
  for (const bool progressive : {false, true}) {
    std::string jpeg = EncodeJpeg(RgbJpeg(64, 64, Pattern(64, 64, 3), progressive));
    const size_t sof = jpeg.find(progressive ? "\xFF\xC2" : "\xFF\xC0");
    ASSERT_NE(sof, std::string::npos);
    for (size_t at : {sof + 5, sof + 7}) {  // height, then width: 8192 big-endian
      jpeg[at] = 0x20;
      jpeg[at + 1] = 0;
    }
    jpeg.resize(std::min<size_t>(jpeg.size(), 1000));
    DecodeStats stats;
    ExpectInvalid(DecodeCounting(jpeg, "image/jpeg", &stats).status(), "cut short");
    EXPECT_EQ(stats.peak_buffer_bytes, 0) << "progressive " << progressive;
  }
}

// A GIF frame that claims 8192x8192 in a few bytes is refused before its index buffer.
TEST(ImageDecoderMemoryTest, GifFrameClaimingAHugeSizeFailsWithoutABuffer) {
  GifSpec spec = OneFrameGif(16, 16, 2);
  std::string gif = EncodeGif(spec);
  // Screen (bytes 6..9) and the image descriptor's size (after its 0x2C separator), 8192 each.
  gif[6] = gif[8] = 0;
  gif[7] = gif[9] = 0x20;
  const size_t desc = gif.find('\x2C', 13);
  ASSERT_NE(desc, std::string::npos);
  gif[desc + 5] = gif[desc + 7] = 0;
  gif[desc + 6] = gif[desc + 8] = 0x20;
  DecodeStats stats;
  ExpectInvalid(DecodeCounting(gif, "image/gif", &stats).status(), "cut short");
  EXPECT_EQ(stats.peak_buffer_bytes, 0);
}

// A 35-byte GIF with an 8192x8192 screen and its 1x1 frame cut: the screen is never composed.
TEST(ImageDecoderMemoryTest, GifScreenIsComposedOnlyAfterItsFrameDecodes) {
  GifSpec spec = OneFrameGif(8192, 8192, 2, 1, 1);
  std::string gif = EncodeGif(spec);
  const size_t desc = gif.find('\x2C', 13);
  ASSERT_NE(desc, std::string::npos);
  gif.resize(desc + 11);  // the descriptor and the LZW code size, no data
  DecodeStats stats;
  ExpectInvalid(DecodeCounting(gif, "image/gif", &stats).status());
  EXPECT_EQ(stats.peak_buffer_bytes, 0);
}

// A PNG cut early holds about the rows it decoded, far below its full size.
TEST(ImageDecoderMemoryTest, CutPngHoldsOnlyTheRowsItDecoded) {
  const int side = 2048;
  // Noise, which deflate cannot shrink: a cut at 1/32 of the file is about 1/32 of the rows.
  PngSpec spec = PatternPng(side, side, PNG_COLOR_TYPE_RGB, 8);
  uint32_t state = 1;
  for (uint8_t& b : spec.rows) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(state >> 24);
  }
  const std::string png = EncodePng(spec);
  const int64_t full = int64_t{side} * side * 3;
  DecodeStats stats;
  ExpectInvalid(DecodeCounting(png.substr(0, png.size() / 32), "image/png", &stats).status());
  EXPECT_GT(stats.peak_buffer_bytes, 0);
  EXPECT_LE(stats.peak_buffer_bytes, full / 4);
  // Whole, it costs its size plus at most the last growth's copy (an eighth).
  auto image = DecodeCounting(png, "image/png", &stats);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_EQ(static_cast<int64_t>(image->rgb.size()), full);
  EXPECT_LE(stats.peak_buffer_bytes, full + full / 8);
}

TEST(ImageDecoderTest, JpgLabelIsJpeg) {
  const std::string jpeg = EncodeJpeg(RgbJpeg(16, 8, Pattern(16, 8, 3)));
  for (const char* label : {"image/jpg", "IMAGE/JPG", "image/jpeg"}) {
    EXPECT_TRUE(Decode(jpeg, label).ok()) << label;
    EXPECT_TRUE(ProbeImageSize(jpeg, label).ok()) << label;
  }
  ExpectInvalid(Decode(jpeg, "image/png").status(), "mime_type says image/png");
}

}  // namespace
}  // namespace tandem::workers::vision
