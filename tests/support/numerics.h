#pragma once

// Comparisons of float vectors (logits, activations, kernel outputs) against references: one copy
// for the model, engine and kernel tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"

namespace tandem::testing {

// max |a[i] - b[i]| over the common length; records a failure when the lengths differ.
inline float MaxAbsDiff(absl::Span<const float> a, absl::Span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// ||a - b|| / ||b|| over the common length (||a - b|| when b is all zeros).
inline double RelRms(absl::Span<const float> a, absl::Span<const float> b) {
  double se = 0, sr = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    se += d * d;
    sr += static_cast<double>(b[i]) * b[i];
  }
  return sr > 0 ? std::sqrt(se / sr) : std::sqrt(se);
}

// The index of the largest value (the first of equal ones); 0 when empty.
inline int64_t Argmax(absl::Span<const float> v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

// The middle value (the upper middle of an even count); 0 when empty.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Expects |got[i] - want[i]| <= atol + rtol |want[i]| everywhere: the first few misses are reported
// one by one, then their count and the worst absolute error.
inline void ExpectClose(absl::Span<const float> got, absl::Span<const float> want, double atol,
                        double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err);
    if (!(err <= atol + rtol * std::fabs(want[i])) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size()
                    << " mismatches, worst abs error " << worst;
}

}  // namespace tandem::testing
