#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
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
  std::string out;
  // Sized up front for a regular file; pipes and devices grow until EOF.
  if (S_ISREG(st.st_mode) && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
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
  return out;
}

}  // namespace tandem
