// libFuzzer target: BPE encode/decode/stream-decode of arbitrary bytes with the Qwen3 vocabulary.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "workers/tokenizer/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* bpe = [] {
    auto t = tandem::workers::BpeTokenizer::Load(TANDEM_SOURCE_DIR
                                                 "/tests/tokenizer/qwen3/tokenizer.json");
    return t.ok() ? t->release() : nullptr;
  }();
  if (bpe == nullptr) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool special : {false, true}) {
    // Encode normalizes (NFC), so the first round trip may change the text; after that it must
    // be stable: decode(encode(y)) == y for every y that came out of a decode.
    const std::string once = bpe->Decode(bpe->Encode(text, special));
    const std::string twice = bpe->Decode(bpe->Encode(once, special));
    if (twice != once) __builtin_trap();
  }
  return 0;
}
