#include "workers/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tandem::workers {

int32_t Sampler::Sample(const float* logits, int32_t vocab, const SamplingConfig& c,
                        std::mt19937_64& rng) {
  if (c.temperature <= 0.0f || c.top_k == 1) {
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  }
  const int32_t k = c.top_k > 0 && c.top_k < vocab ? c.top_k : vocab;
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (k < vocab) {
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  probs_.resize(static_cast<size_t>(k));
  const float top = logits[order_[0]];
  double sum = 0;
  for (int32_t i = 0; i < k; ++i) {
    probs_[i] = std::exp((logits[order_[i]] - top) / c.temperature);
    sum += probs_[i];
  }
  // Nucleus: keep the most likely tokens until their mass reaches top_p.
  int32_t keep = k;
  if (c.top_p < 1.0f) {
    double mass = 0;
    for (int32_t i = 0; i < k; ++i) {
      mass += probs_[i] / sum;
      if (mass >= c.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (int32_t i = 0; i < keep; ++i) kept += probs_[i];
  std::uniform_real_distribution<double> u(0.0, kept);
  double r = u(rng);
  for (int32_t i = 0; i < keep; ++i) {
    r -= probs_[i];
    if (r <= 0) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace tandem::workers
