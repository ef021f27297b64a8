#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tandem::gateway {

// A request body as JSON, stricter than nlohmann's parse in what it accepts and plainer in what
// it says: INVALID_ARGUMENT for text nested deeper than `max_depth` (scanned first, naming the
// path; see common/json_depth.h), for an object that gives a key twice (RFC 8259 leaves the
// meaning to the reader, and readers disagree: refused, naming the path, e.g.
// `messages[0]: the key "role" is given twice`), and for text that is not JSON (naming the byte
// where it stops being JSON, without the parser library's own wording). Keys keep their order.
absl::StatusOr<nlohmann::ordered_json> ParseStrictJson(absl::string_view text, int max_depth);

}  // namespace tandem::gateway
