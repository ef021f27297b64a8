#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tandem {

// The whole file's bytes. On failure the status follows errno (NOT_FOUND for a missing file,
// PERMISSION_DENIED, FAILED_PRECONDITION for a directory, ...) and says
// "cannot read PATH: REASON". Pipes are read to their end; a FIFO with no writer reads as empty
// at once (never a wait for a writer).
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace tandem
