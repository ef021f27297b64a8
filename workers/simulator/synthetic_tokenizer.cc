#include "workers/simulator/synthetic_tokenizer.h"

#include <array>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

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
// Continuations (see the class comment). After kResumeToken come only word ids (< 48), which no
// other prompt token is; kAfterWordToken ends an open message of other text that ends in a word.
constexpr int32_t kResumeToken = 902;
constexpr int32_t kAfterWordToken = 903;

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

// "<|im_start|>assistant\n<think>\n", plus "\n</think>\n\n" when reasoning is off.
void AppendGenerationPrompt(const tandem::v1::ReasoningOptions& reasoning,
                            std::vector<int32_t>* ids) {
  ids->insert(ids->end(), reasoning.mode() == tandem::v1::REASONING_MODE_OFF ? 7 : 4,
              kTemplateToken);
}

// The word ids of `text` when it is the simulator's words joined by single spaces (as its decoder
// writes them; "" is no words); false for any other text.
bool SimulatorWords(std::string_view text, std::vector<int32_t>* ids) {
  if (text.empty()) return true;
  while (true) {
    const size_t space = text.find(' ');
    const int32_t id = SyntheticTokenizer::WordId(text.substr(0, space));
    if (id < 0) return false;
    ids->push_back(id);
    if (space == std::string_view::npos) return true;
    text.remove_prefix(space + 1);
  }
}

class SyntheticStreamDecoder final : public StreamDecoder {
 public:
  // `leading_space`: the text continues one that ends in a word.
  explicit SyntheticStreamDecoder(bool leading_space) : first_(!leading_space) {}
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
  bool first_;
  std::string held_;
};

}  // namespace

int32_t SyntheticTokenizer::VocabularySize() { return static_cast<int32_t>(kWords.size()); }

std::string_view SyntheticTokenizer::Word(int32_t id) { return kWords[id]; }

int32_t SyntheticTokenizer::WordId(std::string_view word) {
  for (size_t i = 0; i < kWords.size(); ++i) {
    if (kWords[i] == word) return static_cast<int32_t>(i);
  }
  return -1;
}

SyntheticTokenizer::Continuation SyntheticTokenizer::ParseContinuation(
    absl::Span<const int32_t> prompt) {
  size_t i = prompt.size();
  while (i > 0 && prompt[i - 1] >= 0 && prompt[i - 1] < VocabularySize()) --i;
  Continuation c;
  if (i > 0 && prompt[i - 1] == kResumeToken) {
    c.stream_prefix = i - 1;
    c.resume_at = static_cast<int32_t>(prompt.size() - i);
    c.leading_space = c.resume_at > 0;
  } else {
    c.stream_prefix = prompt.size();
    c.leading_space = !prompt.empty() && prompt.back() == kAfterWordToken;
  }
  return c;
}

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
    const bool open = continue_final && m + 1 == messages.size();
    if (open) {
      // The simulator's own partial answer: the fresh prompt, then where the answer resumes.
      std::string partial;
      bool text_only = true;
      for (const auto& part : message.content()) {
        if (part.has_image()) text_only = false;
        partial += part.text();
      }
      std::vector<int32_t> words;
      if (text_only && SimulatorWords(partial, &words)) {
        AppendGenerationPrompt(reasoning, &ids);
        ids.push_back(kResumeToken);
        ids.insert(ids.end(), words.begin(), words.end());
        return ids;
      }
    }
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
    if (open) {  // left open
      if (message.content_size() > 0) {
        const auto& last = message.content(message.content_size() - 1);
        if (!last.has_image() && !last.text().empty() &&
            KindOf(last.text().back()) != CharKind::kSpace) {
          ids.push_back(kAfterWordToken);
        }
      }
      return ids;
    }
    ids.insert(ids.end(), {kTemplateToken, kTemplateToken});
  }
  AppendGenerationPrompt(reasoning, &ids);
  return ids;
}

std::unique_ptr<StreamDecoder> SyntheticTokenizer::NewStreamDecoder() const {
  return std::make_unique<SyntheticStreamDecoder>(/*leading_space=*/false);
}

std::unique_ptr<StreamDecoder> SyntheticTokenizer::NewStreamDecoderAfter(
    absl::Span<const int32_t> prompt) const {
  return std::make_unique<SyntheticStreamDecoder>(ParseContinuation(prompt).leading_space);
}

}  // namespace tandem::workers
