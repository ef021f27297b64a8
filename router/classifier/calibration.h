#pragma once

// Calibration arithmetic for the routing classifier's evaluation (tools/train_classifier.cc):
// reliability bins, expected calibration error, and the min_confidence rule. Header-only and pure
// so the tests can check it on hand-made predictions.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tandem::router::classifier {

// One held-out prediction: the true class, the predicted class and the model's probability of
// the predicted class.
struct Scored {
  int want = 0;
  int got = 0;
  double confidence = 0;
};

struct ReliabilityBin {
  double lo = 0;  // confidence range [lo, hi); the last bin includes 1.0
  double hi = 0;
  int64_t count = 0;
  double mean_confidence = 0;
  double accuracy = 0;
};

// Equal-width bins over [1/num_classes, 1]: the top-class probability is never below
// 1/num_classes, so bins over [0, 1] would leave half of them empty for two classes.
inline std::vector<ReliabilityBin> Reliability(const std::vector<Scored>& scored, int num_classes,
                                               int num_bins) {
  const double floor = 1.0 / std::max(num_classes, 1);
  const double width = (1.0 - floor) / num_bins;
  std::vector<ReliabilityBin> bins(num_bins);
  for (int b = 0; b < num_bins; ++b) {
    bins[b].lo = floor + b * width;
    bins[b].hi = b + 1 == num_bins ? 1.0 : floor + (b + 1) * width;
  }
  for (const Scored& s : scored) {
    int b = static_cast<int>(std::floor((s.confidence - floor) / width));
    b = std::clamp(b, 0, num_bins - 1);
    ++bins[b].count;
    bins[b].mean_confidence += s.confidence;
    bins[b].accuracy += s.want == s.got ? 1 : 0;
  }
  for (ReliabilityBin& bin : bins) {
    if (bin.count == 0) continue;
    bin.mean_confidence /= static_cast<double>(bin.count);
    bin.accuracy /= static_cast<double>(bin.count);
  }
  return bins;
}

// Expected calibration error: the count-weighted mean of |accuracy - mean confidence| over the
// bins (Naeini et al. 2015; Guo et al. 2017).
inline double ExpectedCalibrationError(const std::vector<ReliabilityBin>& bins) {
  int64_t total = 0;
  double sum = 0;
  for (const ReliabilityBin& bin : bins) {
    total += bin.count;
    sum += static_cast<double>(bin.count) * std::fabs(bin.accuracy - bin.mean_confidence);
  }
  return total > 0 ? sum / static_cast<double>(total) : 0;
}

// What routing does with a threshold: an answer below `threshold` becomes `default_class`.
// Returns, per true class, the fraction routed to that class (the routed accuracy).
inline std::vector<double> RoutedAccuracy(const std::vector<Scored>& scored, int num_classes,
                                          double threshold, int default_class) {
  std::vector<int64_t> right(num_classes, 0), total(num_classes, 0);
  for (const Scored& s : scored) {
    const int routed = s.confidence >= threshold ? s.got : default_class;
    ++total[s.want];
    if (routed == s.want) ++right[s.want];
  }
  std::vector<double> out(num_classes, 0);
  for (int k = 0; k < num_classes; ++k) {
    out[k] = total[k] > 0 ? static_cast<double>(right[k]) / static_cast<double>(total[k]) : 0;
  }
  return out;
}

struct ThresholdChoice {
  bool found = false;
  double threshold = 0;
  double coverage = 0;  // fraction of examples at or above the threshold
};

// The min_confidence rule: the lowest threshold t, in steps of 0.01 from 1/num_classes, such that
//  - among the predictions at or above t, every predicted class is right at least `target` of
//    the time (the learned answers the policy acts on are that accurate, whichever class they
//    name), and
//  - the least sure of the trusted predictions (within band_width of the lowest confidence at
//    or above t) are right at least `band_target` of the time (else near coin-flip answers would
//    be trusted because the confident majority above them lifts the average).
// Not found when even 0.99 does not get there.
inline ThresholdChoice RecommendMinConfidence(const std::vector<Scored>& scored, int num_classes,
                                              double target, double band_target = 0,
                                              double band_width = 0.05) {
  ThresholdChoice choice;
  const int first = static_cast<int>(std::ceil(100.0 / std::max(num_classes, 1)));
  for (int step = first; step <= 99; ++step) {
    const double t = step / 100.0;
    std::vector<int64_t> right(num_classes, 0), predicted(num_classes, 0);
    int64_t kept = 0, band = 0, band_right = 0;
    double lowest = 2;
    for (const Scored& s : scored) {
      if (s.confidence >= t) lowest = std::min(lowest, s.confidence);
    }
    for (const Scored& s : scored) {
      if (s.confidence < t) continue;
      ++kept;
      if (s.confidence < lowest + band_width) {
        ++band;
        if (s.got == s.want) ++band_right;
      }
      ++predicted[s.got];
      if (s.got == s.want) ++right[s.got];
    }
    bool ok = kept > 0 && static_cast<double>(band_right) >= band_target * band;
    for (int k = 0; k < num_classes && ok; ++k) {
      ok = predicted[k] == 0 ||
           static_cast<double>(right[k]) >= target * static_cast<double>(predicted[k]);
    }
    if (ok) {
      choice.found = true;
      choice.threshold = t;
      choice.coverage = scored.empty() ? 0 : static_cast<double>(kept) / scored.size();
      return choice;
    }
  }
  return choice;
}

}  // namespace tandem::router::classifier
