#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "workers/tokenizer/bpe_tokenizer.h"

namespace tandem::workers {

// Decodes the UTF-8 sequence at `s[pos]`. Returns its code point and sets `*len`; for a byte that
// does not start a valid sequence returns -1 with `*len` = 1.
int32_t DecodeUtf8(std::string_view s, size_t pos, size_t* len);

// The words of one text under one of the Split pre-tokenizer's regexes: the text as classified
// characters, and the end of the word that starts at each.
//
// Each regex is an alternation tried in order at each position, leftmost-first with
// backtracking as in Oniguruma. Qwen2/Qwen3 (Qwen3.5's differences in brackets):
//   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)
//   2 [^\r\n\p{L}\p{N}]?\p{L}+          [\p{L}\p{M}]+
//   3 \p{N}                             one digit at a time
//   4 ' '?[^\s\p{L}\p{N}]+[\r\n]*       [^\s\p{L}\p{M}\p{N}]
//   5 \s*[\r\n]+
//   6 \s+(?!\S)
//   7 \s+
// Tekken (Mistral-Nemo style) replaces 1-2 with, U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and
// W = [\p{Ll}\p{Lm}\p{Lo}\p{M}]:
//   A [^\r\n\p{L}\p{N}]?U*W+
//   B [^\r\n\p{L}\p{N}]?U+W*
// and ends 4 with [\r\n/]*. Every character starts some alternative (letters and marks 1-2 or
// A-B, numbers 3, whitespace 5-7, the rest 4), so the words cover the text without gaps.
class WordSplitter {
 public:
  WordSplitter(std::string_view text, BpeTokenizer::SplitPattern pattern);

  size_t size() const { return chars_.size(); }
  // Byte offset of character k (the text's size for k == size()).
  size_t offset(size_t k) const { return k < chars_.size() ? chars_[k].offset : text_size_; }

  // End (one past the last character) of the word that starts at character i: the first
  // alternative that matches there.
  size_t WordEnd(size_t i) const;

 private:
  // Character classes the split regexes distinguish: letters by general category (Tekken's regex
  // tells upper from lower case), marks, numbers, whitespace (Unicode White_Space, which is what \s
  // means in the Oniguruma engine Hugging Face uses; it never overlaps L, N or M) and the rest.
  enum CharClass : uint8_t { kOther, kLu, kLl, kLt, kLm, kLo, kMark, kNumber, kSpace };
  struct Char {
    int32_t cp;
    uint32_t offset;  // byte offset in the text
    CharClass cls;
  };

  static CharClass Classify(int32_t cp);
  static bool IsLetter(CharClass c) { return c >= kLu && c <= kLo; }

  bool Letter(size_t k) const;
  // [^\r\n\p{L}\p{N}]: note this admits marks and whitespace other than CR/LF.
  bool Prefix(size_t k) const;
  bool Punct(size_t k) const;
  bool Upper(size_t k) const;  // U
  bool Lower(size_t k) const;  // W

  // 1: (?i:'s|'t|'re|'ve|'m|'ll|'d), case-insensitive as in Oniguruma, whose case folding also
  // maps U+017F (long s) to s.
  size_t ContractionEnd(size_t i) const;
  // 2: [^\r\n\p{L}\p{N}]?\p{L}+ (with marks as letters for Qwen3.5).
  size_t LetterEnd(size_t i) const;
  // End of U*W+ from `s`, or `s` if it does not match: U* backtracks to the last position from
  // which W+ can start (W+ then runs greedily, possibly past where U* had reached).
  size_t UpperThenLower(size_t s) const;
  // End of U+W* from `s`, or `s`.
  size_t UpperRun(size_t s) const;
  // A: [^\r\n\p{L}\p{N}]?U*W+, then B: [^\r\n\p{L}\p{N}]?U+W*.
  size_t TekkenLetterEnd(size_t i) const;
  // 4: ' '?[^\s\p{L}\p{N}]+[\r\n]* (Tekken: [\r\n/]*).
  size_t PunctEnd(size_t i) const;
  // Whitespace. \s*[\r\n]+ backtracks to the last CR/LF of the run; failing that, \s+(?!\S)
  // leaves the run's last space to join the next word; failing that, \s+.
  size_t SpaceEnd(size_t i) const;

  std::vector<Char> chars_;
  size_t text_size_;
  bool tekken_;
  bool marks_are_letters_;
};

// Calls `emit(begin, end)` with the byte range of every word of the Split pre-tokenizer, in
// order; the words cover the text without gaps (see WordSplitter for the regexes).
template <typename Emit>
void SplitWords(std::string_view text, BpeTokenizer::SplitPattern pattern, Emit emit) {
  const WordSplitter words(text, pattern);
  for (size_t i = 0; i < words.size();) {
    const size_t end = words.WordEnd(i);
    emit(words.offset(i), words.offset(end));
    i = end;
  }
}

}  // namespace tandem::workers
