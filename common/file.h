#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace tandem {

// The whole file's bytes. NOT_FOUND "cannot read PATH: REASON" when it cannot be opened or read
// (REASON is the system's, e.g. "No such file or directory").
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace tandem
