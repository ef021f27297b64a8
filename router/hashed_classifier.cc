#include "router/hashed_classifier.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "router/word_cues.h"

namespace tandem::router {
namespace {

constexpr char kMagic1[] = "TNDMCLS1";
constexpr char kMagic2[] = "TNDMCLS2";
constexpr char kMagic3[] = "TNDMCLS3";
constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
// Format 2: the n-grams of this many words at each end of the text (Features).
constexpr size_t kFrameWords = 24;

uint64_t Fnv(uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

// ASCII letters and digits, and every byte of a multi-byte character (inline: the <cctype>
// functions consult the locale per byte).
bool WordByte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

char Lower(unsigned char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); }

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

bool GetU32(std::string_view* in, uint32_t* v) {
  if (in->size() < 4) return false;
  *v = 0;
  for (int i = 0; i < 4; ++i)
    *v |= static_cast<uint32_t>(static_cast<unsigned char>((*in)[i])) << (8 * i);
  in->remove_prefix(4);
  return true;
}

// 0, 1, 2, 3-4, 5-8, 9-16, ...: a count's order of magnitude.
int Log2Bucket(size_t n) {
  int b = 0;
  while (n > 0 && b < 12) {
    n >>= 1;
    ++b;
  }
  return b;
}

// The text's shape, for format 2's shape tokens and frame: words, lines, digits and code
// punctuation characters, whether it ends in a question mark, and hashes of its first word and
// first two words. One pass.
struct Shape {
  size_t words = 0, lines = 1, digits = 0, code = 0, commas = 0;
  bool question = false;
  uint64_t first = 0, first_two = 0;
};

Shape ShapeOf(std::string_view text) {
  Shape sh;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') ++sh.lines;
    if (c >= '0' && c <= '9') ++sh.digits;
    if (c == ',' || c == ';') ++sh.commas;
    if (c == '{' || c == '}' || c == ';' || c == '=' || c == '(' || c == '_' || c == '[') ++sh.code;
    if (WordByte(c)) {
      if (!in_word) ++sh.words;
      if (sh.words <= 2) {
        const uint64_t h = ((sh.words == 1 ? sh.first : sh.first_two) ^ Lower(c)) * kFnvPrime;
        if (sh.words == 1) sh.first = h;
        sh.first_two = h;
      }
      in_word = true;
    } else {
      if (in_word && sh.words == 1) sh.first_two = (sh.first_two ^ ' ') * kFnvPrime;
      in_word = false;
    }
  }
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == ' ' || text[end - 1] == '\n' || text[end - 1] == '"')) --end;
  sh.question = end > 0 && text[end - 1] == '?';
  return sh;
}

// The bucket of a synthetic token (a shape or a word class), hashed apart from the words.
uint32_t TokenBucket(uint64_t token, uint64_t mask) {
  return static_cast<uint32_t>(
      Fnv(kFnvOffset ^ 0x5e,
          std::string_view(reinterpret_cast<const char*>(&token), sizeof token)) &
      mask);
}

// Tokens for the text's shape, hashed like words: how many words (by powers of two), the first
// word and the first two, whether it ends in a question mark, how many lines, digits and code
// punctuation characters. A source's vocabulary rarely carries to another source; its form
// (a terse command, a one-line question, a multi-line task with code) mostly does. Each token
// counts twice, so a long text's n-grams do not drown them.
void ShapeFeatures(const Shape& sh, uint64_t mask, std::vector<uint32_t>* out) {
  const uint64_t tokens[] = {
      0x5100 + static_cast<uint64_t>(Log2Bucket(sh.words)),
      0x5200 + static_cast<uint64_t>(Log2Bucket(sh.lines - 1)),
      0x5300 + static_cast<uint64_t>(Log2Bucket(sh.digits)),
      0x5400 + static_cast<uint64_t>(Log2Bucket(sh.code)),
      0x5500 + static_cast<uint64_t>(sh.question),
      (sh.first ^ 0x5600) * kGolden,
      (sh.first_two ^ 0x5700) * kGolden,
  };
  for (uint64_t t : tokens) out->insert(out->end(), 2, TokenBucket(t, mask));
}

}  // namespace

void HashedClassifier::Features(std::string_view text, std::vector<uint32_t>* out) const {
  text = text.substr(0, kMaxTextBytes);
  // buckets_ is a power of two, so a mask replaces the (slow) modulo with the same result.
  const uint64_t mask = buckets_ - 1;
  char word[48];
  uint64_t prev = 0;
  size_t i = 0;
  // Format 2 reads the n-grams of the frame only, the first and last kFrameWords words: what is
  // asked sits there, while the middle of a long prompt is material (a document, a review, code)
  // whose topic says little about the work asked for. (The shape tokens see the whole text.)
  const Shape shape = format_ >= 2 ? ShapeOf(text) : Shape{};
  size_t clauses = shape.commas;  // format 3: commas, semicolons and sequencing words
  const size_t words = shape.words;
  size_t index = 0;
  while (i < text.size()) {
    while (i < text.size() && !WordByte(static_cast<unsigned char>(text[i]))) ++i;
    size_t n = 0;
    word[n++] = '<';
    while (i < text.size() && WordByte(static_cast<unsigned char>(text[i]))) {
      if (n < sizeof(word) - 1) {
        word[n++] = Lower(static_cast<unsigned char>(text[i]));
      }
      ++i;
    }
    if (n == 1) break;  // the rest is separators
    word[n++] = '>';
    if (format_ >= 2 && index >= kFrameWords && index + kFrameWords < words) {
      ++index;
      prev = 0;
      continue;
    }
    ++index;
    const std::string_view w(word, n);
    if (format_ >= 3) {
      const auto cue = static_cast<uint64_t>(WordCueOf(std::string_view(word + 1, n - 2)));
      // Twice each, as the shape tokens: a word class is one token among a text's many n-grams.
      if (cue != 0) out->insert(out->end(), 2, TokenBucket((0x5800 + cue) * kGolden, mask));
      if (cue != 0 && index == 1) {  // the opening word's class
        out->insert(out->end(), 2, TokenBucket((0x5900 + cue) * kGolden, mask));
      }
      if (cue == static_cast<uint64_t>(WordCue::kSequence)) ++clauses;
    }
    const uint64_t unigram = Fnv(kFnvOffset ^ 0x77, w);
    out->push_back(static_cast<uint32_t>(unigram & mask));
    if (prev != 0) out->push_back(static_cast<uint32_t>((prev * 31 + unigram) & mask));
    prev = unigram;
    // Character 3- and 4-grams: packed into one integer and hashed with a single multiply
    // (Fibonacci hashing), which is most of the time of a prediction.
    for (size_t s = 0; s + 3 <= n; ++s) {
      uint64_t packed = uint64_t{static_cast<unsigned char>(w[s])} |
                        uint64_t{static_cast<unsigned char>(w[s + 1])} << 8 |
                        uint64_t{static_cast<unsigned char>(w[s + 2])} << 16;
      out->push_back(static_cast<uint32_t>(((packed | 3ull << 40) * kGolden) >> 32) & mask);
      if (s + 4 <= n) {
        packed |= uint64_t{static_cast<unsigned char>(w[s + 3])} << 24;
        out->push_back(static_cast<uint32_t>(((packed | 4ull << 40) * kGolden) >> 32) & mask);
      }
    }
  }
  if (format_ >= 2) ShapeFeatures(shape, mask, out);
  if (format_ >= 3) {
    const uint64_t clause_token = 0x5A00 + static_cast<uint64_t>(Log2Bucket(clauses));
    out->insert(out->end(), 2, TokenBucket(clause_token * kGolden, mask));
  }
}

void HashedClassifier::Scores(const std::vector<uint32_t>& features,
                              std::vector<double>* probs) const {
  const size_t c = classes_.size();
  probs->assign(c, 0.0);
  if (!features.empty()) {
    for (uint32_t f : features) {
      const float* row = &weights_[static_cast<size_t>(f) * c];
      for (size_t k = 0; k < c; ++k) (*probs)[k] += row[k];
    }
    for (size_t k = 0; k < c; ++k) (*probs)[k] /= static_cast<double>(features.size());
  }
  double max = -1e30;
  for (size_t k = 0; k < c; ++k) {
    (*probs)[k] += bias_[k];
    max = std::max(max, (*probs)[k]);
  }
  double sum = 0;
  for (size_t k = 0; k < c; ++k) sum += ((*probs)[k] = std::exp((*probs)[k] - max));
  for (size_t k = 0; k < c; ++k) (*probs)[k] /= sum;
}

HashedClassifier::Prediction HashedClassifier::Predict(std::string_view text) const {
  thread_local std::vector<uint32_t> features;
  thread_local std::vector<double> probs;
  features.clear();
  Features(text, &features);
  Scores(features, &probs);
  Prediction p;
  p.label = static_cast<int>(std::max_element(probs.begin(), probs.end()) - probs.begin());
  p.confidence = probs[p.label];
  return p;
}

HashedClassifier HashedClassifier::Train(std::vector<std::string> classes,
                                         const std::vector<std::pair<std::string, int>>& examples,
                                         const TrainOptions& options) {
  return Train(std::move(classes), examples, {}, options);
}

HashedClassifier HashedClassifier::Train(std::vector<std::string> classes,
                                         const std::vector<std::pair<std::string, int>>& examples,
                                         const std::vector<double>& weights,
                                         const TrainOptions& options) {
  HashedClassifier m;
  m.buckets_ = options.buckets;
  m.format_ = options.format;
  m.classes_ = std::move(classes);
  const size_t c = m.classes_.size();
  m.weights_.assign(static_cast<size_t>(m.buckets_) * c, 0.0f);
  m.bias_.assign(c, 0.0f);
  std::vector<std::vector<uint32_t>> features(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) m.Features(examples[i].first, &features[i]);
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(options.seed);
  std::vector<double> probs;
  std::vector<uint32_t> kept;
  std::bernoulli_distribution drop(options.dropout);
  const bool weighted = weights.size() == examples.size();
  const double total_steps = static_cast<double>(options.epochs) * examples.size();
  double step = 0;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t idx : order) {
      const std::vector<uint32_t>* all = &features[idx];
      if (options.dropout > 0) {
        kept.clear();
        for (uint32_t b : *all) {
          if (!drop(rng)) kept.push_back(b);
        }
        all = &kept;
      }
      const std::vector<uint32_t>& f = *all;
      // Linear decay to zero, as fastText does.
      const double lr =
          options.learning_rate * (1.0 - step++ / total_steps) * (weighted ? weights[idx] : 1.0);
      m.Scores(f, &probs);
      for (size_t k = 0; k < c; ++k) {
        const double grad = probs[k] - (static_cast<int>(k) == examples[idx].second ? 1.0 : 0.0);
        m.bias_[k] -= static_cast<float>(lr * grad);
        if (f.empty()) continue;
        const float g = static_cast<float>(lr * grad / static_cast<double>(f.size()));
        for (uint32_t b : f) m.weights_[static_cast<size_t>(b) * c + k] -= g;
      }
    }
  }
  return m;
}

std::string HashedClassifier::ToBytes() const {
  std::string out(format_ == 3 ? kMagic3 : format_ == 2 ? kMagic2 : kMagic1, 8);
  PutU32(&out, buckets_);
  PutU32(&out, static_cast<uint32_t>(classes_.size()));
  for (const auto& name : classes_) {
    PutU32(&out, static_cast<uint32_t>(name.size()));
    out += name;
  }
  const size_t offset = out.size();
  out.resize(offset + (weights_.size() + bias_.size()) * sizeof(float));
  std::memcpy(&out[offset], weights_.data(), weights_.size() * sizeof(float));
  std::memcpy(&out[offset + weights_.size() * sizeof(float)], bias_.data(),
              bias_.size() * sizeof(float));
  return out;
}

absl::StatusOr<HashedClassifier> HashedClassifier::FromBytes(std::string_view in) {
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("classifier model: ", why));
  };
  const std::string_view magic = in.substr(0, 8);
  HashedClassifier m;
  if (magic == std::string_view(kMagic1, 8)) {
    m.format_ = 1;
  } else if (magic == std::string_view(kMagic2, 8)) {
    m.format_ = 2;
  } else if (magic == std::string_view(kMagic3, 8)) {
    m.format_ = 3;
  } else {
    return bad("not a Tandem classifier (bad magic)");
  }
  in.remove_prefix(8);
  uint32_t num_classes = 0;
  if (!GetU32(&in, &m.buckets_) || !GetU32(&in, &num_classes)) return bad("truncated header");
  if (m.buckets_ == 0 || m.buckets_ > (1u << 24) || (m.buckets_ & (m.buckets_ - 1)) != 0 ||
      num_classes < 2 || num_classes > 64) {
    return bad(
        absl::StrCat("implausible shape: ", m.buckets_, " buckets, ", num_classes, " classes"));
  }
  for (uint32_t k = 0; k < num_classes; ++k) {
    uint32_t len = 0;
    if (!GetU32(&in, &len) || len == 0 || len > 256 || in.size() < len) {
      return bad("truncated class names");
    }
    m.classes_.emplace_back(in.substr(0, len));
    in.remove_prefix(len);
  }
  const size_t weights = static_cast<size_t>(m.buckets_) * num_classes;
  if (in.size() != (weights + num_classes) * sizeof(float)) {
    return bad(absl::StrCat("expected ", (weights + num_classes) * sizeof(float),
                            " bytes of weights, found ", in.size()));
  }
  m.weights_.resize(weights);
  m.bias_.resize(num_classes);
  std::memcpy(m.weights_.data(), in.data(), weights * sizeof(float));
  std::memcpy(m.bias_.data(), in.data() + weights * sizeof(float), num_classes * sizeof(float));
  return m;
}

}  // namespace tandem::router
