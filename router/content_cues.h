#pragma once

#include <cstdint>
#include <string_view>

namespace tandem::router {

// Cheap lexical cues of what a prompt asks for, counted by case-insensitive phrase matching.
// They feed the transparent rules and, later, the learned classifier.
struct ContentCues {
  // Code fences, syntax fragments, tracebacks.
  int code = 0;
  // "solve", "equation", formulas, arithmetic like "12 * 7".
  int math = 0;
  // "step by step", "explain why", "prove", "compare".
  int reasoning = 0;
  // Requests for JSON, YAML, CSV, schemas, tables.
  int structured_output = 0;
};

// Only the first kMaxCueScanBytes of each text part are scanned, so a huge document costs a bounded
// time.
inline constexpr size_t kMaxCueScanBytes = 16 * 1024;

// Adds the cues found in `text` to `cues`.
void ScanContentCues(std::string_view text, ContentCues* cues);

}  // namespace tandem::router
