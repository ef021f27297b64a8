#pragma once

#include <string>

namespace tandem::testing {

// A fresh path in this test process's own temp directory. The directory is made with mkdtemp on
// first use, so a directory left by an earlier run whose pid was recycled cannot collide with it,
// and neither can two test processes that ctest runs at once. It is removed at exit when every
// test passed and kept, for its logs, when one failed.
std::string TempPath(const std::string& name);

// Writes `text` to a fresh temp file and returns its path.
std::string WriteTempFile(const std::string& name, const std::string& text);

// Replaces `path` the way a deploy does: a new file written beside it, renamed over it. A
// failure is a test failure.
void ReplaceFile(const std::string& path, const std::string& text);

}  // namespace tandem::testing
