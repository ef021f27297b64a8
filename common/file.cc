#include "common/file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    // An empty file sets failbit on the copy; only a read error (badbit) is a failure.
    if (!in.bad()) return ss.str();
  }
  const int error = errno;
  return absl::NotFoundError(
      absl::StrCat("cannot read ", path, ": ", error != 0 ? std::strerror(error) : "read failed"));
}

}  // namespace tandem
