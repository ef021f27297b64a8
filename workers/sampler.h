#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "workers/engine.h"

namespace tandem::workers {

// Picks the next token from logits: greedy when temperature is 0; otherwise softmax at the
// temperature over the top_k most likely (all when 0), then the smallest set whose probability
// reaches top_p, drawn with `rng` (seeded per sequence, so a seed reproduces the answer).
class Sampler {
 public:
  int32_t Sample(const float* logits, int32_t vocab, const SamplingConfig& config,
                 std::mt19937_64& rng);

 private:
  std::vector<int32_t> order_;  // scratch, reused across calls
  std::vector<float> probs_;
};

}  // namespace tandem::workers
