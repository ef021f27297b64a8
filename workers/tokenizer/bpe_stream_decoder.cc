#include "workers/tokenizer/bpe_stream_decoder.h"

#include <string_view>

#include "workers/tokenizer/bpe_tokenizer.h"

namespace tandem::workers {
namespace {

// Length of a valid UTF-8 sequence at the start of `s`, 0 if the bytes can never form one, or
// -1 if they are a valid start cut off by the end of `s`.
int Utf8SequenceAt(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t c = p[0];
  if (c < 0x80) return 1;
  int len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (static_cast<size_t>(k) >= s.size()) return -1;
    const uint8_t b = p[k];
    if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) return 0;
  }
  return len;
}

// Moves the complete part of `*pending` to the result. Bytes that cannot become valid UTF-8
// turn into U+FFFD (what HF's decode does with errors="replace"), so the output is always valid;
// a valid but unfinished sequence at the end stays pending unless `flush`.
std::string TakeValidUtf8(std::string* pending, bool flush) {
  std::string out;
  size_t pos = 0;
  while (pos < pending->size()) {
    const int len = Utf8SequenceAt(std::string_view(*pending).substr(pos));
    if (len > 0) {
      out.append(*pending, pos, len);
      pos += len;
    } else if (len < 0 && !flush) {
      break;
    } else {
      out.append("\xEF\xBF\xBD");
      // A cut-off sequence at the end is replaced as a whole; an invalid byte alone.
      pos = len < 0 ? pending->size() : pos + 1;
    }
  }
  pending->erase(0, pos);
  return out;
}

}  // namespace

std::string BpeStreamDecoder::Next(int32_t token) {
  pending_.append(tokenizer_->TokenBytes(token));
  return TakeValidUtf8(&pending_, /*flush=*/false);
}

std::string BpeStreamDecoder::Flush() { return TakeValidUtf8(&pending_, /*flush=*/true); }

}  // namespace tandem::workers
