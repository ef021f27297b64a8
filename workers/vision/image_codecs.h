#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "workers/vision/image_decoder.h"

// The four decoders behind DecodeImage and ProbeImageSize (image_decoder.h), one file each
// (png_decoder.cc, jpeg_decoder.cc, webp_decoder.cc, gif_decoder.cc), and what they share.
// Internal to workers/vision: callers use image_decoder.h.
//
// libjpeg and libpng report errors by longjmp. The functions that call setjmp below (the
// "phases") hold no C++ object with a destructor, and the C++ objects (the pixel buffer, the
// statuses) live in their callers, which a longjmp never crosses: it lands in the phase, below
// them. The phases return false with the library's message in their context struct.
namespace tandem::workers::vision::internal {

// Room for a library's error message (libjpeg's are at most JMSG_LENGTH_MAX = 200).
constexpr size_t kMessageSize = 256;

// "PNG", "JPEG", "WebP", "GIF": the names messages use.
absl::string_view DisplayName(ImageFormat format);

absl::Status MalformedImage(ImageFormat format, absl::string_view what);

// The header's size against the fixed side bound and, when `limits` is given, the pixel limit.
// Run before any pixel buffer is allocated.
absl::Status CheckDimensions(ImageFormat format, int64_t width, int64_t height,
                             const ImageDecodeLimits* limits);

// The refusal of a file whose compressed bytes cannot hold the pixels its header claims.
absl::Status CannotHoldPixels(ImageFormat format, int64_t width, int64_t height, int64_t need,
                              int64_t have);

inline const uint8_t* Bytes(absl::string_view data) {
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
      : out_(out),
        row_bytes_(row_bytes),
        full_(row_bytes * static_cast<size_t>(rows)),
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

// Each decoder checks the header against `limits` before it allocates, and counts its own
// pixel buffers in `bytes`; each probe reads the header only.
absl::StatusOr<RgbImage> DecodePng(absl::string_view data, const ImageDecodeLimits& limits,
                                   BufferBytes* bytes);
absl::StatusOr<ImageSize> ProbePng(absl::string_view data);
absl::StatusOr<RgbImage> DecodeJpeg(absl::string_view data, const ImageDecodeLimits& limits,
                                    BufferBytes* bytes);
absl::StatusOr<ImageSize> ProbeJpeg(absl::string_view data);
absl::StatusOr<RgbImage> DecodeWebp(absl::string_view data, const ImageDecodeLimits& limits,
                                    BufferBytes* bytes);
absl::StatusOr<ImageSize> ProbeWebp(absl::string_view data);
absl::StatusOr<RgbImage> DecodeGif(absl::string_view data, const ImageDecodeLimits& limits,
                                   BufferBytes* bytes);
absl::StatusOr<ImageSize> ProbeGif(absl::string_view data);

}  // namespace tandem::workers::vision::internal
