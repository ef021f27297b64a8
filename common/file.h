#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem {

// The whole file's bytes. On failure the status follows errno (NOT_FOUND for a missing file,
// PERMISSION_DENIED, FAILED_PRECONDITION for a directory, ...) and says
// "cannot read PATH: REASON". Pipes are read to their end; a FIFO with no writer reads as empty
// at once (never a wait for a writer).
//
// Unbounded: only for files the caller chose for itself (a tool's --image, tests). A server's
// configuration files take the bounded overload below, since /dev/zero or a runaway pipe read
// this way grows without end.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// As above, but reads at most `max_bytes` + 1 bytes: a file (regular, pipe, device such as
// /dev/zero) with more than `max_bytes` is RESOURCE_EXHAUSTED "PATH: larger than N bytes
// (LIMIT_NAME)", where `limit_name` names what sets the limit (e.g. "--max_policy_bytes"; left
// out when empty). A regular file whose size is already over the limit is refused unread.
absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes,
                                             absl::string_view limit_name);

// "SIZE:MTIME" of `path` (following symlinks), or "" when it cannot be stat'ed: cheap to poll,
// unlike hashing a file every interval.
std::string FileStamp(const std::string& path);

}  // namespace tandem
