#include "tests/support/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace tandem::testing {
namespace {

// The exitcode= of ASAN_OPTIONS/UBSAN_OPTIONS and TSAN_OPTIONS in CMakePresets.json.
constexpr int kAsanExitCode = 86;
constexpr int kTsanExitCode = 66;

// Forks on one thread that lives as long as the process and runs `in_child` in the child.
// PR_SET_PDEATHSIG fires when the thread that forked the child exits, not the process: a child
// forked on a test's helper thread would get its SIGTERM when that thread ended. `mu` is held
// across fork(), but the child only runs `in_child` (system calls, then exec) and never touches
// it, so an absl::Mutex does as well there as a std::mutex would.
pid_t ForkOnSpawnerThread(const std::function<void()>& in_child) {
  struct Spawner {
    absl::Mutex call_mu;  // one fork at a time
    absl::Mutex mu ABSL_ACQUIRED_AFTER(call_mu);
    absl::CondVar cv;
    const std::function<void()>* job ABSL_GUARDED_BY(mu) = nullptr;
    pid_t pid ABSL_GUARDED_BY(mu) = -1;
    bool done ABSL_GUARDED_BY(mu) = false;
  };
  // Never destroyed: the thread runs until the process exits.
  static Spawner* const spawner = [] {
    auto* s = new Spawner;
    std::thread([s] {
      absl::MutexLock l(&s->mu);
      while (true) {
        while (s->job == nullptr) s->cv.Wait(&s->mu);
        const pid_t pid = fork();
        if (pid == 0) {
          (*s->job)();
          _exit(127);
        }
        s->pid = pid;
        s->job = nullptr;
        s->done = true;
        s->cv.SignalAll();
      }
    }).detach();
    return s;
  }();
  absl::MutexLock call(&spawner->call_mu);
  absl::MutexLock l(&spawner->mu);
  spawner->job = &in_child;
  spawner->done = false;
  spawner->cv.SignalAll();
  while (!spawner->done) spawner->cv.Wait(&spawner->mu);
  return spawner->pid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::string& binary, const std::vector<std::string>& args, const std::string& log_path) {
  // Close-on-exec, so that children started at the same time do not inherit each other's pipes
  // (dup2 clears the flag on the child's own stdout and stderr).
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("cannot open ", log_path));
  }
  // Built before the fork: the child only makes system calls.
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ForkOnSpawnerThread([&] {
    // If the test process dies (a crash skips destructors), the child gets SIGTERM too.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    dup2(out[1], STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(binary.c_str(), argv.data());
  });
  close(out[1]);
  close(log_fd);
  if (pid < 0) {
    close(out[0]);
    return absl::InternalError(absl::StrCat("fork failed: ", strerror(errno)));
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, out[0], log_path));
}

ChildProcess::~ChildProcess() {
  if (!exited_) {
    Signal(SIGTERM);
    if (Wait(absl::Seconds(10)) == -1) {
      Signal(SIGKILL);
      Wait(absl::Seconds(10));
    }
  }
  close(stdout_fd_);
  // Sanitizer builds (scripts/sanitize.sh) make a report exit with these codes: the test that ran
  // the process fails, not only the script that scans the reports afterwards.
  if (WIFEXITED(exit_status_) &&
      (WEXITSTATUS(exit_status_) == kAsanExitCode || WEXITSTATUS(exit_status_) == kTsanExitCode)) {
    ADD_FAILURE() << "child " << pid_ << " exited " << WEXITSTATUS(exit_status_)
                  << ": a sanitizer report; see its log " << log_path_;
  }
  // scripts/sanitize.sh looks for "child crashed" so that a rerun that passes cannot hide it.
  const int sig = WIFSIGNALED(exit_status_) ? WTERMSIG(exit_status_) : 0;
  if (sig > 0 && (sig >= 64 || (signals_sent_ >> sig & 1) == 0)) {
    ADD_FAILURE() << "child crashed: " << pid_ << " died of signal " << sig << " ("
                  << strsignal(sig) << "); see its log " << log_path_;
  }
}

absl::StatusOr<std::string> ChildProcess::WaitForLine(const std::string& needle,
                                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t nl;
    while ((nl = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.find(needle) != std::string::npos) return line;
    }
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("no line with '", needle, "'; log:\n", ReadLog()));
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left_ms));
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n <= 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("process exited before printing '", needle, "'; log:\n", ReadLog()));
    }
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

std::string ChildProcess::ReadStdoutToEnd(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) break;
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left_ms)) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n <= 0) break;  // closed
    buffer_.append(buf, static_cast<size_t>(n));
  }
  std::string out;
  out.swap(buffer_);
  return out;
}

void ChildProcess::Signal(int sig) {
  if (exited_) return;
  if (sig > 0 && sig < 64) signals_sent_ |= uint64_t{1} << sig;
  kill(pid_, sig);
}

int ChildProcess::Wait(absl::Duration timeout) {
  if (exited_) return exit_status_;
  // waitpid has no timeout; poll it, as the child's exit cannot be waited on otherwise without
  // a SIGCHLD handler that would disturb the test process.
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout);
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      exit_status_ = status;
      return status;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string ChildProcess::ReadLog() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tandem::testing
