#pragma once

// A tokenizer double for the engines' thinking-budget tests: the load simulator's tokenizer
// whose "<think>" and "</think>" have chosen ids.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "workers/simulator/synthetic_tokenizer.h"
#include "workers/tokenizer/tokenizer.h"

namespace tandem::testing {

class ThinkTokenizer final : public workers::Tokenizer {
 public:
  ThinkTokenizer(int32_t start, int32_t end) : start_(start), end_(end) {}
  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>& m,
      const tandem::v1::ReasoningOptions& r, bool c) const override {
    return inner_.EncodeChat(m, r, c);
  }
  std::unique_ptr<workers::StreamDecoder> NewStreamDecoder() const override {
    return inner_.NewStreamDecoder();
  }
  int32_t SpecialTokenId(std::string_view text) const override {
    return text == "<think>" ? start_ : text == "</think>" ? end_ : -1;
  }

 private:
  workers::SyntheticTokenizer inner_{0};
  int32_t start_;
  int32_t end_;
};

}  // namespace tandem::testing
