#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::router {

// The learned tier of classification: a linear softmax model over hashed word unigrams, word
// bigrams and character 3- and 4-grams (fastText-style features, without the embedding layer),
// and, from format 2 on, a few tokens for the text's shape (StructureFeatures in the .cc: length,
// the opening words, a question mark, lines, digits, code punctuation), which carry across
// sources where the vocabulary does not; format 2 also reads the n-grams of the text's frame
// only, its first and last 24 words, where the instruction is, not the material in between;
// format 3 adds a token for the class (WordCue) of each frame word that has one, of the opening
// word, and the number of clauses (commas and sequencing words), so that what one source teaches
// about "category" or "then" carries to another source's "topic" or "afterwards".
// Pure: built from bytes, no I/O. Prediction allocates nothing beyond the feature buffer.
class HashedClassifier {
 public:
  struct Prediction {
    int label = 0;
    double confidence = 0;  // probability of `label`
  };

  struct TrainOptions {
    uint32_t buckets = 1u << 17;  // a power of two
    int epochs = 10;
    double learning_rate = 2.0;
    uint64_t seed = 1;
    // 1: n-grams of the whole text; 2: n-grams of the frame and shape tokens; 3: those and
    // word-class tokens (WordCue) and a clause count.
    int format = 3;
    // Each feature of a training example is left out with this probability, drawn afresh at
    // every step, so that no single cue (one source's pet phrase) carries a class alone.
    double dropout = 0;
  };

  // Trains on (text, class index) pairs.
  static HashedClassifier Train(std::vector<std::string> classes,
                                const std::vector<std::pair<std::string, int>>& examples,
                                const TrainOptions& options);
  // The same with a weight per example (its step is scaled by it), e.g. to give every source of a
  // training set a similar say whatever its size. `weights`: one per example, or empty for all 1
  // (a list of any other length is a caller's bug, and is ignored the same way).
  static HashedClassifier Train(std::vector<std::string> classes,
                                const std::vector<std::pair<std::string, int>>& examples,
                                const std::vector<double>& weights, const TrainOptions& options);

  // The model file format: "TNDMCLS1" (n-grams), "TNDMCLS2" (n-grams and shape tokens) or
  // "TNDMCLS3" (those and word classes), buckets, class names, weights (little-endian float32).
  static absl::StatusOr<HashedClassifier> FromBytes(std::string_view bytes);
  std::string ToBytes() const;

  Prediction Predict(std::string_view text) const;
  const std::vector<std::string>& classes() const { return classes_; }

  // Only this many leading bytes of a prompt are read.
  static constexpr size_t kMaxTextBytes = 8192;

 private:
  HashedClassifier() = default;
  // Appends the bucket of every feature of `text`.
  void Features(std::string_view text, std::vector<uint32_t>* out) const;
  // Softmax probabilities into `probs` (size = classes).
  void Scores(const std::vector<uint32_t>& features, std::vector<double>* probs) const;

  uint32_t buckets_ = 0;
  int format_ = 1;
  std::vector<std::string> classes_;
  std::vector<float> weights_;  // buckets_ x classes, row-major by bucket
  std::vector<float> bias_;
};

}  // namespace tandem::router
