#include "workers/tokenizer/word_splitter.h"

#include <unicode/uchar.h>

namespace tandem::workers {
namespace {

bool IsCrLf(int32_t cp) { return cp == '\r' || cp == '\n'; }

int32_t AsciiLower(int32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

}  // namespace

int32_t DecodeUtf8(std::string_view s, size_t pos, size_t* len) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const size_t n = s.size() - pos;
  const uint8_t c = p[0];
  *len = 1;
  if (c < 0x80) return c;
  int need;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    cp = c & 0x07;
  } else {
    return -1;
  }
  if (n < static_cast<size_t>(need) + 1) return -1;
  for (int k = 1; k <= need; ++k) {
    if ((p[k] & 0xC0) != 0x80) return -1;
    cp = cp << 6 | (p[k] & 0x3F);
  }
  // Overlongs, surrogates and values above U+10FFFF.
  if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return -1;
  }
  *len = need + 1;
  return static_cast<int32_t>(cp);
}

WordSplitter::WordSplitter(std::string_view text, BpeTokenizer::SplitPattern pattern)
    : text_size_(text.size()),
      tekken_(pattern == BpeTokenizer::SplitPattern::kTekken),
      marks_are_letters_(pattern == BpeTokenizer::SplitPattern::kQwen35) {
  chars_.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len;
    const int32_t cp = DecodeUtf8(text, pos, &len);
    chars_.push_back({cp, static_cast<uint32_t>(pos), Classify(cp)});
    pos += len;
  }
}

size_t WordSplitter::WordEnd(size_t i) const {
  size_t end = tekken_ ? i : ContractionEnd(i);
  if (end == i) end = tekken_ ? TekkenLetterEnd(i) : LetterEnd(i);
  if (end > i) return end;
  if (chars_[i].cls == kNumber) return i + 1;
  if (Punct(i) || (chars_[i].cp == ' ' && Punct(i + 1))) return PunctEnd(i);
  return SpaceEnd(i);
}

WordSplitter::CharClass WordSplitter::Classify(int32_t cp) {
  if (cp < 0) return kOther;  // an invalid byte: neither letter, number nor space
  if (cp < 0x80) {            // ASCII fast path
    if (cp >= 'a' && cp <= 'z') return kLl;
    if (cp >= 'A' && cp <= 'Z') return kLu;
    if (cp >= '0' && cp <= '9') return kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return kSpace;
    return kOther;
  }
  if (u_isUWhiteSpace(cp)) return kSpace;
  switch (u_charType(cp)) {
    case U_UPPERCASE_LETTER:
      return kLu;
    case U_LOWERCASE_LETTER:
      return kLl;
    case U_TITLECASE_LETTER:
      return kLt;
    case U_MODIFIER_LETTER:
      return kLm;
    case U_OTHER_LETTER:
      return kLo;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      return kMark;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    default:
      return kOther;
  }
}

bool WordSplitter::Letter(size_t k) const {
  return k < size() && (IsLetter(chars_[k].cls) || (marks_are_letters_ && chars_[k].cls == kMark));
}

bool WordSplitter::Prefix(size_t k) const {
  return k < size() && !IsLetter(chars_[k].cls) && chars_[k].cls != kNumber &&
         !IsCrLf(chars_[k].cp);
}

bool WordSplitter::Punct(size_t k) const {
  return k < size() && (chars_[k].cls == kOther || (!marks_are_letters_ && chars_[k].cls == kMark));
}

bool WordSplitter::Upper(size_t k) const {
  if (k >= size()) return false;
  const CharClass c = chars_[k].cls;
  return c == kLu || c == kLt || c == kLm || c == kLo || c == kMark;
}

bool WordSplitter::Lower(size_t k) const {
  if (k >= size()) return false;
  const CharClass c = chars_[k].cls;
  return c == kLl || c == kLm || c == kLo || c == kMark;
}

size_t WordSplitter::ContractionEnd(size_t i) const {
  if (chars_[i].cp != '\'' || i + 1 >= size()) return i;
  const int32_t a = AsciiLower(chars_[i + 1].cp);
  const int32_t b = i + 2 < size() ? AsciiLower(chars_[i + 2].cp) : 0;
  if (a == 's' || a == 0x17F || a == 't' || a == 'm' || a == 'd') return i + 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return i;
}

size_t WordSplitter::LetterEnd(size_t i) const {
  if (!Letter(i) && !(Prefix(i) && Letter(i + 1))) return i;
  size_t end = i + 1;
  while (Letter(end)) ++end;
  return end;
}

size_t WordSplitter::UpperThenLower(size_t s) const {
  size_t u = s;
  while (Upper(u)) ++u;
  size_t k = u;
  if (!Lower(k)) {
    while (k > s && !Lower(k - 1)) --k;
    if (k == s) return s;
    --k;
  }
  while (Lower(k)) ++k;
  return k;
}

size_t WordSplitter::UpperRun(size_t s) const {
  if (!Upper(s)) return s;
  size_t u = s;
  while (Upper(u)) ++u;
  while (Lower(u)) ++u;
  return u;
}

size_t WordSplitter::TekkenLetterEnd(size_t i) const {
  const bool p = Prefix(i);
  size_t e;
  if (p && (e = UpperThenLower(i + 1)) > i + 1) return e;
  if ((e = UpperThenLower(i)) > i) return e;
  if (p && (e = UpperRun(i + 1)) > i + 1) return e;
  if ((e = UpperRun(i)) > i) return e;
  return i;
}

size_t WordSplitter::PunctEnd(size_t i) const {
  size_t end = i + 1;
  while (Punct(end)) ++end;
  while (end < size() && (IsCrLf(chars_[end].cp) || (tekken_ && chars_[end].cp == '/'))) ++end;
  return end;
}

size_t WordSplitter::SpaceEnd(size_t i) const {
  size_t run = i;
  while (run < size() && chars_[run].cls == kSpace) ++run;
  for (size_t k = run; k > i; --k) {
    if (IsCrLf(chars_[k - 1].cp)) return k;
  }
  if (run == size() || run - 1 == i) return run;
  return run - 1;
}

}  // namespace tandem::workers
