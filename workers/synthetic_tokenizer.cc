#include "workers/synthetic_tokenizer.h"

#include <array>
#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace tandem::workers {
namespace {

// Words of the simulator's answers; a few are multi-byte to exercise UTF-8 handling downstream.
constexpr std::array<std::string_view, 48> kWords = {
    "the",    "request", "was",     "served",  "by",      "a",         "synthetic", "engine",
    "that",   "models",  "latency", "and",     "load",    "of",        "token",     "streams",
    "with",   "batch",   "steps",   "prefill", "decode",  "queue",     "gateway",   "worker",
    "route",  "signal",  "policy",  "metric",  "café",    "naïve",     "über",      "señal",
    "日本語", "模型",    "延迟",    "✓",       "→",       "≈",         "data",      "answer",
    "is",     "not",     "from",    "real",    "weights", "simulated", "output",    "here"};

constexpr int32_t kPromptIdBase = 1000;
constexpr int32_t kPromptIdRange = 100000;
constexpr int32_t kImageToken = 900;
constexpr int32_t kTemplateToken = 901;

uint32_t Fnv1a(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

enum class CharKind { kAlnum, kSpace, kOther };

CharKind KindOf(unsigned char c) {
  if (c >= 0x80 || std::isalnum(c)) return CharKind::kAlnum;
  if (std::isspace(c)) return CharKind::kSpace;
  return CharKind::kOther;
}

class SyntheticStreamDecoder final : public StreamDecoder {
 public:
  std::string Next(int32_t token) override {
    if (token < 0 || token >= SyntheticTokenizer::VocabularySize()) return "";
    if (!first_) held_ += ' ';
    first_ = false;
    held_ += SyntheticTokenizer::Word(token);
    const size_t n = CompleteUtf8PrefixLength(held_);
    std::string out = held_.substr(0, n);
    held_.erase(0, n);
    return out;
  }
  std::string Flush() override { return std::exchange(held_, std::string()); }

 private:
  bool first_ = true;
  std::string held_;
};

}  // namespace

int32_t SyntheticTokenizer::VocabularySize() { return static_cast<int32_t>(kWords.size()); }

std::string_view SyntheticTokenizer::Word(int32_t id) { return kWords[id]; }

void SyntheticTokenizer::EncodeText(std::string_view text, std::vector<int32_t>* out) const {
  // Pieces: a run of alphanumerics (with one leading space, as byte-level BPE does), a run of
  // spaces, or one other character. Long runs are cut every 6 bytes, close to BPE's average.
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    CharKind kind = KindOf(text[i]);
    if (kind == CharKind::kSpace && i + 1 < text.size() &&
        KindOf(text[i + 1]) == CharKind::kAlnum) {
      ++j;
      kind = CharKind::kAlnum;
    }
    if (kind == CharKind::kOther) {
      ++j;
    } else {
      while (j < text.size() && KindOf(text[j]) == kind && j - i < 6) ++j;
    }
    out->push_back(kPromptIdBase +
                   static_cast<int32_t>(Fnv1a(text.substr(i, j - i)) % kPromptIdRange));
    i = j;
  }
}

absl::StatusOr<std::vector<int32_t>> SyntheticTokenizer::EncodeChat(
    const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& messages,
    const tandem::v1::ReasoningOptions& reasoning, bool continue_final) const {
  if (continue_final && (messages.empty() || messages[messages.size() - 1].role() != "assistant")) {
    return absl::InvalidArgumentError(
        "continue_final_message: the last message must be the assistant's partial answer");
  }
  std::vector<int32_t> ids;
  for (int m = 0; m < messages.size(); ++m) {
    const auto& message = messages[m];
    // "<|im_start|>", role, "\n" ... "<|im_end|>", "\n"
    ids.insert(ids.end(), {kTemplateToken, kTemplateToken, kTemplateToken});
    for (int p = 0; p < message.content_size(); ++p) {
      const auto& part = message.content(p);
      if (part.has_image()) {
        if (tokens_per_image_ == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "messages[", m, "].content[", p, "].image: this model does not accept images"));
        }
        ids.insert(ids.end(), tokens_per_image_, kImageToken);
      } else {
        EncodeText(part.text(), &ids);
      }
    }
    if (continue_final && m + 1 == messages.size()) return ids;  // left open
    ids.insert(ids.end(), {kTemplateToken, kTemplateToken});
  }
  // Generation prompt: "<|im_start|>assistant\n<think>\n" plus "\n</think>\n\n" when off.
  ids.insert(ids.end(), reasoning.mode() == tandem::v1::REASONING_OFF ? 7 : 4, kTemplateToken);
  return ids;
}

std::unique_ptr<StreamDecoder> SyntheticTokenizer::NewStreamDecoder() const {
  return std::make_unique<SyntheticStreamDecoder>();
}

}  // namespace tandem::workers
