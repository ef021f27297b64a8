#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "workers/vision/image_codecs.h"

// GIF (giflib returns error codes; no longjmp).
namespace tandem::workers::vision::internal {
namespace {

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
absl::Status GifDecodeFrame(GifFileType* gif, const ImageDecodeLimits& limits, GrowingRows* rows) {
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
      if (DGifGetLine(gif, all + static_cast<size_t>(y) * frame.Width, frame.Width) == GIF_ERROR) {
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

}  // namespace

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
  const ColorMapObject* map =
      file->Image.ColorMap != nullptr ? file->Image.ColorMap : file->SColorMap;
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

}  // namespace tandem::workers::vision::internal
