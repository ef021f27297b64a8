#include "workers/tokenizer/bpe_tokenizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "workers/tokenizer/bpe_stream_decoder.h"
#include "workers/tokenizer/word_splitter.h"

namespace tandem::workers {
namespace {

using Json = nlohmann::json;

// The Split regexes WordSplitter implements by hand (word_splitter.h). Matching the exact pattern
// string means a tokenizer.json with any other regex is rejected instead of split wrongly.
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Words up to this many bytes are cached; longer ones are rare and would bloat the cache.
constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kMaxCacheEntries = 200000;

// GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100 onwards, so that every vocabulary entry is a printable string.
void ByteToUnicode(uint32_t table[256]) {
  bool direct[256] = {};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) table[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
}

// Its inverse: the byte each code point below 512 stands for, or -1.
const std::array<int16_t, 512>& UnicodeToByte() {
  static const std::array<int16_t, 512> table = [] {
    uint32_t byte_to_cp[256];
    ByteToUnicode(byte_to_cp);
    std::array<int16_t, 512> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_cp[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return table;
}

// Vocabulary entries are byte-level strings; the tokenizer works on the raw bytes they stand
// for. False for an empty entry or one with a character outside the byte-level alphabet.
bool ByteLevelToBytes(const std::string& s, std::string* out) {
  const std::array<int16_t, 512>& to_byte = UnicodeToByte();
  out->clear();
  for (size_t pos = 0; pos < s.size();) {
    size_t len;
    const int32_t cp = DecodeUtf8(s, pos, &len);
    if (cp < 0 || cp >= 512 || to_byte[cp] < 0) return false;
    out->push_back(static_cast<char>(to_byte[cp]));
    pos += len;
  }
  return !out->empty();
}

// Debian's Abseil has its own string_view, which its hash maps need for lookups.
absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// "" or a missing/null field count as unset for the BPE model's string options.
bool StringOptionSet(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && !it->is_null() &&
         !(it->is_string() && it->get_ref<const std::string&>().empty());
}

bool BoolOption(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() && it->get<bool>();
}

std::string TypeOf(const Json& obj) {
  auto it = obj.find("type");
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

absl::Status CheckByteLevel(const Json& step, const char* where) {
  if (BoolOption(step, "add_prefix_space")) {
    return absl::UnimplementedError(absl::StrCat(where, ": ByteLevel add_prefix_space"));
  }
  if (BoolOption(step, "use_regex")) {
    return absl::UnimplementedError(absl::StrCat(where, ": ByteLevel use_regex (GPT-2 regex)"));
  }
  return absl::OkStatus();
}

// Normalizer: none, or NFC (returns whether NFC).
absl::StatusOr<bool> ParseNormalizer(const Json& root) {
  auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return false;
  if (TypeOf(*it) != "NFC")
    return absl::UnimplementedError(absl::StrCat("normalizer ", it->dump()));
  return true;
}

// A Split step with one of the regexes WordSplitter implements, isolating the matches.
absl::StatusOr<BpeTokenizer::SplitPattern> ParseSplit(const Json& step) {
  auto pattern = step.find("pattern");
  const Json* regex = nullptr;
  if (pattern != step.end() && pattern->is_object()) {
    auto r = pattern->find("Regex");
    if (r != pattern->end() && r->is_string()) regex = &*r;
  }
  if (regex == nullptr) return absl::UnimplementedError("Split without a Regex pattern");
  auto behavior = step.find("behavior");
  const std::string& re = regex->get_ref<const std::string&>();
  BpeTokenizer::SplitPattern split;
  if (re == kQwen2Regex) {
    split = BpeTokenizer::SplitPattern::kQwen2;
  } else if (re == kQwen35Regex) {
    split = BpeTokenizer::SplitPattern::kQwen35;
  } else if (re == kTekkenRegex) {
    split = BpeTokenizer::SplitPattern::kTekken;
  } else {
    return absl::UnimplementedError(absl::StrCat("Split regex ", re));
  }
  if (behavior == step.end() || !behavior->is_string() ||
      behavior->get_ref<const std::string&>() != "Isolated" || BoolOption(step, "invert")) {
    return absl::UnimplementedError("Split behavior other than Isolated");
  }
  return split;
}

// Pre-tokenizer: Sequence[Split(known regex, Isolated), ByteLevel(no regex, no prefix space)],
// or those two steps in either order.
absl::StatusOr<BpeTokenizer::SplitPattern> ParsePreTokenizer(const Json& root) {
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || !it->is_object()) {
    return absl::UnimplementedError("missing pre_tokenizer");
  }
  std::vector<const Json*> steps;
  if (TypeOf(*it) == "Sequence") {
    auto list = it->find("pretokenizers");
    if (list == it->end() || !list->is_array()) {
      return absl::InvalidArgumentError("pre_tokenizer Sequence without pretokenizers");
    }
    for (const Json& step : *list) steps.push_back(&step);
  } else {
    steps.push_back(&*it);
  }
  std::optional<BpeTokenizer::SplitPattern> split;
  bool have_byte_level = false;
  for (const Json* step : steps) {
    const std::string type = TypeOf(*step);
    if (type == "Split" && !split.has_value()) {
      ASSIGN_OR_RETURN(split, ParseSplit(*step));
    } else if (type == "ByteLevel" && !have_byte_level) {
      RETURN_IF_ERROR(CheckByteLevel(*step, "pre_tokenizer"));
      have_byte_level = true;
    } else {
      return absl::UnimplementedError(absl::StrCat("pre_tokenizer step ", step->dump()));
    }
  }
  if (!split.has_value() || !have_byte_level) {
    return absl::UnimplementedError("pre_tokenizer must be Split followed by ByteLevel");
  }
  return *split;
}

absl::Status CheckDecoder(const Json& root) {
  auto it = root.find("decoder");
  if (it != root.end() && !it->is_null() && TypeOf(*it) != "ByteLevel") {
    return absl::UnimplementedError(absl::StrCat("decoder ", TypeOf(*it)));
  }
  return absl::OkStatus();
}

// The BPE model, refusing the options this tokenizer does not implement.
absl::StatusOr<const Json*> FindBpeModel(const Json& root) {
  auto it = root.find("model");
  if (it == root.end() || !it->is_object()) return absl::InvalidArgumentError("missing model");
  const Json& model = *it;
  if (const std::string type = TypeOf(model); !type.empty() && type != "BPE") {
    return absl::UnimplementedError(absl::StrCat("model type ", type));
  }
  if (BoolOption(model, "byte_fallback") || StringOptionSet(model, "continuing_subword_prefix") ||
      StringOptionSet(model, "end_of_word_suffix")) {
    return absl::UnimplementedError(
        "BPE byte_fallback, continuing_subword_prefix or end_of_word_suffix");
  }
  if (auto d = model.find("dropout"); d != model.end() && !d->is_null()) {
    return absl::UnimplementedError("BPE dropout");
  }
  return &model;
}

// One merge: "a b" (older files; byte-level tokens never contain a space) or ["a", "b"].
struct MergePair {
  std::string left, right;
};
absl::StatusOr<MergePair> ParseMerge(const Json& merge) {
  if (merge.is_string()) {
    const std::string& s = merge.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad merge \"", s, "\""));
    }
    return MergePair{s.substr(0, space), s.substr(space + 1)};
  }
  if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    return MergePair{merge[0].get<std::string>(), merge[1].get<std::string>()};
  }
  return absl::InvalidArgumentError(absl::StrCat("bad merge ", merge.dump()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Load(const std::string& path) {
  absl::StatusOr<std::string> json = ReadFileToString(path);
  if (!json.ok()) return json.status();
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tok = FromJson(*json);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(), absl::StrCat(path, ": ", tok.status().message()));
  }
  return tok;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJson(std::string_view json) {
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer());
  absl::Status status = tok->Init(json);
  if (!status.ok()) return status;
  return tok;
}

absl::Status BpeTokenizer::Init(std::string_view text) {
  const Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  }
  ASSIGN_OR_RETURN(nfc_, ParseNormalizer(root));
  ASSIGN_OR_RETURN(split_, ParsePreTokenizer(root));
  RETURN_IF_ERROR(CheckDecoder(root));
  ASSIGN_OR_RETURN(const Json* model, FindBpeModel(root));
  ignore_merges_ = BoolOption(*model, "ignore_merges");
  RETURN_IF_ERROR(LoadVocab(*model));
  RETURN_IF_ERROR(LoadMerges(*model));
  return LoadAddedTokens(root);
}

absl::Status BpeTokenizer::SetTokenBytes(int64_t id, const std::string& bytes) {
  if (id < 0 || id > (1 << 24)) return absl::InvalidArgumentError(absl::StrCat("bad id ", id));
  if (static_cast<size_t>(id) >= id_to_bytes_.size()) {
    id_to_bytes_.resize(id + 1);
    is_added_.resize(id + 1);
  }
  id_to_bytes_[id] = bytes;
  return absl::OkStatus();
}

absl::Status BpeTokenizer::LoadVocab(const Json& model) {
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) {
    return absl::InvalidArgumentError("model.vocab is not an object");
  }
  vocab_.reserve(vocab_it->size());
  std::string bytes;
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("vocab id of ", it.key()));
    }
    if (!ByteLevelToBytes(it.key(), &bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("vocab entry is not byte-level: ", it.key()));
    }
    const int64_t id = it.value().get<int64_t>();
    RETURN_IF_ERROR(SetTokenBytes(id, bytes));
    vocab_[bytes] = static_cast<int32_t>(id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("vocab lacks byte ", b));
    }
    byte_ids_[b] = it->second;
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::LoadMerges(const Json& model) {
  auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) {
    return absl::InvalidArgumentError("model.merges is not an array");
  }
  merges_.reserve(merges_it->size());
  int32_t rank = 0;
  std::string left, right;
  for (const Json& merge : *merges_it) {
    ASSIGN_OR_RETURN(const MergePair pair, ParseMerge(merge));
    if (!ByteLevelToBytes(pair.left, &left) || !ByteLevelToBytes(pair.right, &right)) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge is not byte-level: ", pair.left, " ", pair.right));
    }
    auto l = vocab_.find(left), r = vocab_.find(right), m = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("merge out of vocabulary: ", pair.left, " ", pair.right));
    }
    const uint64_t key = static_cast<uint64_t>(l->second) << 32 | static_cast<uint32_t>(r->second);
    // The first (lowest-rank) occurrence wins, as in HF.
    merges_.try_emplace(key, rank, m->second);
    ++rank;
  }
  return absl::OkStatus();
}

// Added tokens: matched on the raw text before normalization and pre-tokenization.
absl::Status BpeTokenizer::LoadAddedTokens(const Json& root) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) return absl::InvalidArgumentError("added_tokens is not an array");
  for (const Json& t : *it) {
    auto id = t.find("id");
    auto content = t.find("content");
    if (!t.is_object() || id == t.end() || !id->is_number_integer() || content == t.end() ||
        !content->is_string() || content->get_ref<const std::string&>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("bad added token ", t.dump()));
    }
    if (BoolOption(t, "lstrip") || BoolOption(t, "rstrip") || BoolOption(t, "single_word")) {
      return absl::UnimplementedError(absl::StrCat("added token options of ", t.dump()));
    }
    const std::string& c = content->get_ref<const std::string&>();
    RETURN_IF_ERROR(SetTokenBytes(id->get<int64_t>(), c));
    is_added_[id->get<int64_t>()] = true;
    vocab_[c] = static_cast<int32_t>(id->get<int64_t>());
    added_by_first_byte_[static_cast<uint8_t>(c[0])].push_back(
        {c, static_cast<int32_t>(id->get<int64_t>())});
  }
  for (auto& group : added_by_first_byte_) {
    std::stable_sort(group.begin(), group.end(), [](const AddedToken& x, const AddedToken& y) {
      return x.content.size() > y.content.size();
    });
  }
  return absl::OkStatus();
}

std::pair<size_t, int32_t> BpeTokenizer::MatchAddedToken(std::string_view text) const {
  for (const AddedToken& t : added_by_first_byte_[static_cast<uint8_t>(text[0])]) {
    if (text.substr(0, t.content.size()) == t.content) return {t.content.size(), t.id};
  }
  return {0, 0};
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  const TextPiece piece{text, allow_special};
  EncodePieces(absl::MakeConstSpan(&piece, 1), &ids);
  return ids;
}

void BpeTokenizer::EncodePieces(absl::Span<const TextPiece> pieces,
                                std::vector<int32_t>* out) const {
  // Text between matched added tokens is collected across pieces and encoded as one run, exactly
  // as HF encodes the concatenated string.
  std::string run;
  for (const TextPiece& piece : pieces) {
    if (!piece.allow_special) {
      run.append(piece.text);
      continue;
    }
    const std::string_view text = piece.text;
    size_t start = 0;
    for (size_t pos = 0; pos < text.size();) {
      const auto [len, id] = MatchAddedToken(text.substr(pos));
      if (len == 0) {
        ++pos;
        continue;
      }
      run.append(text.substr(start, pos - start));
      EncodeOrdinary(run, out);
      run.clear();
      out->push_back(id);
      pos += len;
      start = pos;
    }
    run.append(text.substr(start));
  }
  EncodeOrdinary(run, out);
}

void BpeTokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::string normalized;
  if (nfc_ && !std::all_of(text.begin(), text.end(),
                           [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
    const icu::StringPiece in(text.data(), static_cast<int32_t>(text.size()));
    // ICU would replace invalid UTF-8; such text is left as it is so that its bytes survive.
    if (U_SUCCESS(status) && IsValidUtf8(text) && !nfc->isNormalizedUTF8(in, status) &&
        U_SUCCESS(status)) {
      icu::StringByteSink<std::string> sink(&normalized);
      nfc->normalizeUTF8(0, in, sink, nullptr, status);
      if (U_SUCCESS(status)) text = normalized;
    }
  }
  SplitWords(text, split_,
             [&](size_t begin, size_t end) { EncodeWord(text.substr(begin, end - begin), out); });
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.size() == 1) {
    out->push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    if (auto it = vocab_.find(AsAbsl(word)); it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    absl::MutexLock lock(&cache_mu_);
    if (auto it = cache_.find(AsAbsl(word)); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out->size();
  MergeWord(word, out);
  if (cacheable) {
    absl::MutexLock lock(&cache_mu_);
    if (cache_.size() < kMaxCacheEntries) {
      cache_.try_emplace(std::string(word), out->begin() + first, out->end());
    }
  }
}

void BpeTokenizer::MergeWord(std::string_view word, std::vector<int32_t>* out) const {
  // HF's BPE: start from single bytes and repeatedly apply the lowest-rank merge among adjacent
  // pairs, leftmost first, using a heap and a linked list so long words stay O(n log n).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const uint64_t key =
        static_cast<uint64_t>(symbols[pos].id) << 32 | static_cast<uint32_t>(symbols[next].id);
    if (auto it = merges_.find(key); it != merges_.end()) {
      heap.push({it->second.first, pos, it->second.second});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Skip stale entries: one side was merged into something else since this was pushed.
    const uint64_t key = static_cast<uint64_t>(left.id) << 32 | static_cast<uint32_t>(right.id);
    auto it = merges_.find(key);
    if (it == merges_.end() || it->second.second != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    push(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

std::string BpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out.append(TokenBytes(id));
  return out;
}

std::string_view BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= VocabSize()) return {};
  return id_to_bytes_[id];
}

std::optional<int32_t> BpeTokenizer::TokenId(std::string_view token) const {
  auto it = vocab_.find(AsAbsl(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

bool BpeTokenizer::IsAddedToken(int32_t id) const {
  return id >= 0 && id < VocabSize() && is_added_[id];
}

std::unique_ptr<StreamDecoder> BpeTokenizer::NewStreamDecoder() const {
  return std::make_unique<BpeStreamDecoder>(this);
}

}  // namespace tandem::workers
