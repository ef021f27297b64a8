#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

absl::Status TooLarge(const std::string& path, int64_t max_bytes, absl::string_view limit_name) {
  return absl::ResourceExhaustedError(
      absl::StrCat(path, ": larger than ", max_bytes, " bytes",
                   limit_name.empty() ? "" : absl::StrCat(" (", limit_name, ")")));
}

// Reads at most max_bytes + 1 bytes; more is TooLarge.
absl::StatusOr<std::string> Read(const std::string& path, int64_t max_bytes,
                                 absl::string_view limit_name) {
  // O_NONBLOCK: opening a FIFO blocking would wait for a writer (a reload thread stuck for
  // good). Opened like this, a FIFO nobody writes reads as empty at once; a pipe with a writer
  // (--image=/dev/stdin, <(...)) reads to its end as before, blocking again.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
  struct stat st;
  int error = fstat(fd, &st) != 0 ? errno : (S_ISDIR(st.st_mode) ? EISDIR : 0);
  if (error == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) error = errno;
  if (error != 0) {
    close(fd);
    return absl::ErrnoToStatus(error, absl::StrCat("cannot read ", path));
  }
  const bool regular = S_ISREG(st.st_mode);
  if (regular && st.st_size > max_bytes) {
    close(fd);
    return TooLarge(path, max_bytes, limit_name);
  }
  std::string out;
  // Sized up front for a regular file; pipes and devices grow until EOF or the limit.
  if (regular && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  // One byte past the limit tells "exactly the limit" from "more" (a file that grew since fstat,
  // a pipe, /dev/zero).
  const uint64_t cap = static_cast<uint64_t>(max_bytes) + 1;
  char buf[1 << 16];
  while (out.size() < cap) {
    const size_t want = static_cast<size_t>(
        std::min<uint64_t>(sizeof(buf), cap - static_cast<uint64_t>(out.size())));
    const ssize_t n = read(fd, buf, want);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      close(fd);
      return absl::ErrnoToStatus(error, absl::StrCat("cannot read ", path));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (out.size() >= cap) return TooLarge(path, max_bytes, limit_name);
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  return Read(path, std::numeric_limits<int64_t>::max() - 1, "");
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes,
                                             absl::string_view limit_name) {
  return Read(path, std::max<int64_t>(max_bytes, 0), limit_name);
}

std::string FileStamp(const std::string& path) {
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

}  // namespace tandem
