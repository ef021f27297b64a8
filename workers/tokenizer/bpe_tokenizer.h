#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "workers/tokenizer/tokenizer.h"

namespace tandem::workers {

// One piece of text to encode. Added tokens (<|im_start|>, <think>, ...) are matched only inside
// pieces with `allow_special`; elsewhere their text goes through BPE like any other text. Text on
// both sides of a piece boundary is pre-tokenized as one run, so splitting a string into pieces
// never changes its ids except where added tokens were matched or not.
struct TextPiece {
  std::string_view text;
  bool allow_special = false;
};

// A byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, implementing the subset
// that Qwen-family tokenizers use: model "BPE" with vocab and merges, an optional NFC normalizer,
// a Split pre-tokenizer with one of the known Qwen or Tekken regexes (implemented by hand, see the
// .cc) followed by ByteLevel without prefix space, and the ByteLevel decoder. Anything else is
// rejected at load time rather than tokenized subtly wrong. Thread-safe after Load.
class BpeTokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Load(const std::string& path);
  // `json` is the content of a tokenizer.json.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromJson(std::string_view json);

  // Token ids of `text`. With `allow_special`, added tokens in the text become their ids (longest
  // match first, as Hugging Face tokenizers do); without it, nothing is treated as a special token.
  // Bytes that are not valid UTF-8 are still encoded (byte-level BPE covers every byte), so
  // Decode(Encode(x)) == x for NFC-normalized x.
  std::vector<int32_t> Encode(std::string_view text, bool allow_special) const;
  void EncodePieces(absl::Span<const TextPiece> pieces, std::vector<int32_t>* out) const;

  // The bytes the ids stand for (added tokens as their text). Unknown ids contribute nothing.
  std::string Decode(absl::Span<const int32_t> ids) const;
  // Bytes of one token; empty for an unknown id.
  std::string_view TokenBytes(int32_t id) const;

  // Id of the token whose text (raw bytes, e.g. "\n" or "<|im_end|>") is exactly `token`.
  std::optional<int32_t> TokenId(std::string_view token) const;
  bool IsAddedToken(int32_t id) const;
  // One past the largest id (vocabulary plus added tokens); the model's embedding may be larger.
  int32_t VocabSize() const { return static_cast<int32_t>(id_to_bytes_.size()); }

  // A decoder that turns generated ids into text, holding back incomplete UTF-8 across tokens.
  std::unique_ptr<StreamDecoder> NewStreamDecoder() const;

  // The pre-tokenizer's split regex; which one is chosen by the exact pattern in tokenizer.json.
  enum class SplitPattern {
    kQwen2,   // Qwen2/Qwen3: letters are \p{L}
    kQwen35,  // Qwen3.5: letters and marks [\p{L}\p{M}]
    // Mistral-Nemo's Tekken regex (case-aware letter runs, no contractions); the spec's likely
    // candidate for Nemotron, whose exact regex is unverified.
    kTekken,
  };

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
  };

  BpeTokenizer() = default;
  absl::Status Init(std::string_view json);
  // The steps of Init that fill the tables below from tokenizer.json's model and root.
  absl::Status LoadVocab(const nlohmann::json& model);
  absl::Status LoadMerges(const nlohmann::json& model);
  absl::Status LoadAddedTokens(const nlohmann::json& root);
  absl::Status SetTokenBytes(int64_t id, const std::string& bytes);

  // Normalizes, pre-tokenizes and BPE-encodes text that contains no added tokens.
  void EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
  void MergeWord(std::string_view word, std::vector<int32_t>* out) const;
  // Length of the longest added token that starts `text`, and its id; 0 if none.
  std::pair<size_t, int32_t> MatchAddedToken(std::string_view text) const;

  SplitPattern split_ = SplitPattern::kQwen2;
  bool nfc_ = false;
  bool ignore_merges_ = false;
  absl::flat_hash_map<std::string, int32_t> vocab_;  // raw bytes -> id (vocab and added tokens)
  std::vector<std::string> id_to_bytes_;
  std::vector<bool> is_added_;
  int32_t byte_ids_[256] = {};
  // (left id << 32 | right id) -> (rank, merged id).
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  // Added tokens grouped by first byte, longest first.
  std::vector<AddedToken> added_by_first_byte_[256];

  // Words repeat a lot in real text; caching their BPE result skips the merge loop.
  mutable absl::Mutex cache_mu_;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace tandem::workers
