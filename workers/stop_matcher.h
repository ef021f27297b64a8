#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::workers {

// Applies stop sequences to a stream of generated text. Holds back just enough text (the longest
// stop sequence minus one byte, rounded to a UTF-8 boundary) that a stop sequence split across
// tokens is still caught and never reaches the client.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds generated text and returns the text that is now safe to emit. When a stop sequence
  // matches, returns the text before it, sets *stopped and discards the rest.
  std::string Push(std::string_view text, bool* stopped);
  // End of the stream: returns whatever is still held.
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  size_t hold_bytes_ = 0;
  std::string pending_;
};

}  // namespace tandem::workers
