#pragma once

#include <cstdint>

namespace tandem::workers::model {

// An image's patch grid for a vision encoder (CPU or CUDA): t temporal frames (1 for a still
// image) of h x w patches.
struct VisionGrid {
  int64_t t = 1;
  int64_t h = 0;
  int64_t w = 0;
  int64_t patches() const { return t * h * w; }
};

}  // namespace tandem::workers::model
