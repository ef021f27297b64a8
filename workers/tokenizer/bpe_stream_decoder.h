#pragma once

#include <cstdint>
#include <string>

#include "workers/tokenizer/tokenizer.h"

namespace tandem::workers {

class BpeTokenizer;

// BpeTokenizer's StreamDecoder: the bytes of each token are held until they form complete UTF-8
// characters. Bytes that can never become valid UTF-8 turn into U+FFFD (what HF's decode does
// with errors="replace"), so the text is always valid; Flush replaces an unfinished sequence
// at the end the same way.
class BpeStreamDecoder final : public StreamDecoder {
 public:
  explicit BpeStreamDecoder(const BpeTokenizer* tokenizer) : tokenizer_(tokenizer) {}

  std::string Next(int32_t token) override;
  std::string Flush() override;

 private:
  const BpeTokenizer* tokenizer_;
  std::string pending_;
};

}  // namespace tandem::workers
