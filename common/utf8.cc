#include "common/utf8.h"

#include <cstdint>

namespace tandem {
namespace {

// Number of bytes in the sequence introduced by lead byte `c`, or 0 if `c` cannot lead one.
int SequenceLength(uint8_t c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    const int len = SequenceLength(c);
    if (len == 0 || i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
    }
    // The second byte's range rules out overlongs (E0, F0), surrogates (ED) and > U+10FFFF (F4).
    const uint8_t c1 = p[i + 1];
    if (c == 0xE0 && c1 < 0xA0) return false;
    if (c == 0xED && c1 > 0x9F) return false;
    if (c == 0xF0 && c1 < 0x90) return false;
    if (c == 0xF4 && c1 > 0x8F) return false;
    i += len;
  }
  return true;
}

size_t CompleteUtf8PrefixLength(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  // Look back at most 3 bytes for the lead byte of the last sequence.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const uint8_t c = p[n - back];
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const int len = SequenceLength(c);
    if (len == 0) return n;  // not a lead byte: invalid, nothing to hold back for
    return static_cast<size_t>(len) > back ? n - back : n;
  }
  return n;
}

}  // namespace tandem
