#include "workers/model/mrope_positions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::workers::model {

absl::StatusOr<MropePositions> ComputeMropePositions(absl::Span<const int32_t> tokens,
                                                     int32_t image_token_id,
                                                     absl::Span<const MergedGrid> images) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  MropePositions out;
  out.t.resize(n);
  out.h.resize(n);
  out.w.resize(n);
  int64_t p = 0;     // next running position
  int64_t next = 0;  // prompt index
  size_t image = 0;
  int64_t max_position = -1;
  while (next < n) {
    if (tokens[next] != image_token_id) {
      out.t[next] = out.h[next] = out.w[next] = p;
      max_position = std::max(max_position, p);
      ++p;
      ++next;
      continue;
    }
    if (image == images.size()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt: image token at index ", next,
                                                     " after all ", images.size(), " images"));
    }
    const MergedGrid& g = images[image++];
    const int64_t count = g.height * g.width;
    if (count <= 0 || next + count > n ||
        !std::all_of(tokens.begin() + next, tokens.begin() + next + count,
                     [&](int32_t t) { return t == image_token_id; })) {
      return absl::InvalidArgumentError(absl::StrCat("prompt: image ", image - 1, " needs ", count,
                                                     " contiguous image tokens at index ", next));
    }
    for (int64_t k = 0; k < count; ++k) {
      out.t[next + k] = p;
      out.h[next + k] = p + k / g.width;
      out.w[next + k] = p + k % g.width;
    }
    max_position = std::max(max_position, p + std::max(g.height, g.width) - 1);
    p += std::max(g.height, g.width);
    next += count;
  }
  if (image != images.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt: ", images.size(), " images but ", image, " runs of image tokens"));
  }
  out.rope_delta = max_position + 1 - n;
  return out;
}

}  // namespace tandem::workers::model
