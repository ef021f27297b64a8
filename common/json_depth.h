#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem {

// JSON a caller sends is parsed, and later walked, copied and printed by code that recurses once
// per nesting level (nlohmann's dump and copy, the chat templates' printers). A scan that bounds
// the depth before any parse keeps every such walk within a few kilobytes of stack whatever the
// caller sends.

// The default of --max_json_depth: deep enough for any real JSON Schema or tool arguments (those
// seen in the wild nest under 20), far below what would exhaust a thread's stack.
inline constexpr int kDefaultMaxJsonDepth = 64;
// The largest --max_json_depth accepted, and the bound the servers' own parsers apply to JSON
// that reached them past validation (a model's tool-call arguments): the recursive walks above
// use well under 1 KiB of stack a level, so this stays within the 8 MiB of a thread.
inline constexpr int kMaxJsonDepthCeiling = 1000;

// How `text` nests: a scalar is 0, `{}` and `[]` are 1, `{"a":[1]}` is 2. Brackets inside
// strings do not count. One linear pass, no allocation; `text` need not be valid JSON (an
// unbalanced text counts the levels it opens).
int JsonNestingDepth(absl::string_view text);

// OK when `text` nests at most `max_depth` levels. Otherwise INVALID_ARGUMENT naming `field`,
// the limit and where the limit is passed inside the text, as a path of keys and indices:
//   "tools[0].parameters_json: JSON nested deeper than 64 levels (--max_json_depth), at
//    properties.p.a.a.a.a.a..."
// With an empty `field` the path alone names the place (for a whole request body, whose top-level
// keys are the request's fields). The scan stops at the first level past the limit.
absl::Status CheckJsonDepth(absl::string_view text, int max_depth, absl::string_view field);

}  // namespace tandem
