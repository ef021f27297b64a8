#pragma once

// The text model's 3-D (t, h, w) rotary positions for a prompt with images, as Qwen3.5's
// get_rope_index computes them: a text token at running position p gets (p, p, p) and p += 1;
// an image whose merged grid is gh x gw, starting at p0, gives its token k (raster order)
// (p0, p0 + k / gw, p0 + k % gw), and p continues at p0 + max(gh, gw). Generated tokens after
// a prompt of L tokens are at (L + i + rope_delta) on every axis.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::workers::model {

// An image's grid in text tokens (its patch grid divided by the merge size on each side).
struct MergedGrid {
  int64_t height = 0;
  int64_t width = 0;
};

struct MropePositions {
  // [3][L]: t, h and w positions of every prompt token.
  std::vector<int64_t> t, h, w;
  // max(position) + 1 - L: added to a generated token's index to get its position.
  int64_t rope_delta = 0;
};

// INVALID_ARGUMENT when the runs of `image_token_id` in `tokens` do not hold exactly the images'
// tokens, in order (an image's tokens must be contiguous).
absl::StatusOr<MropePositions> ComputeMropePositions(absl::Span<const int32_t> tokens,
                                                     int32_t image_token_id,
                                                     absl::Span<const MergedGrid> images);

}  // namespace tandem::workers::model
