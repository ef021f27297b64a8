#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem::testing {

// A child process with stdout on a pipe (read line by line with a timeout, never by sleeping)
// and stderr in a log file. The destructor sends SIGTERM, waits up to 10 s, then SIGKILLs. A child
// that exited with a sanitizer's exit code, or died of a signal nobody sent it (a crash: SIGSEGV,
// SIGABRT), fails the test that started it, with a line that says "child crashed".
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::string& binary,
                                                             const std::vector<std::string>& args,
                                                             const std::string& log_path);
  ~ChildProcess();

  // The next stdout line containing `needle`; DEADLINE_EXCEEDED or the child's exit otherwise.
  absl::StatusOr<std::string> WaitForLine(const std::string& needle, absl::Duration timeout);
  // Everything on stdout not yet consumed by WaitForLine, up to the child closing it (normally
  // its exit); what came by `timeout` otherwise.
  std::string ReadStdoutToEnd(absl::Duration timeout);
  void Signal(int sig);
  // Waits for exit and returns the exit status (as from waitpid), or -1 on timeout.
  int Wait(absl::Duration timeout);
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  std::string ReadLog() const;

 private:
  ChildProcess(pid_t pid, int stdout_fd, std::string log_path)
      : pid_(pid), stdout_fd_(stdout_fd), log_path_(std::move(log_path)) {}

  pid_t pid_;
  int stdout_fd_;
  std::string log_path_;
  std::string buffer_;
  bool exited_ = false;
  int exit_status_ = 0;        // as from waitpid, once exited_
  uint64_t signals_sent_ = 0;  // bit N: signal N was sent (Signal)
};

}  // namespace tandem::testing
