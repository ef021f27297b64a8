#include "workers/upstream/engine_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace tandem::workers::upstream {

EngineProcess::EngineProcess(Options options) : options_(std::move(options)) {}

EngineProcess::~EngineProcess() { Stop(); }

pid_t EngineProcess::Spawn() {
  // Everything the child needs is built before fork: between fork and exec only async-signal-safe
  // calls run (the worker has threads).
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0) env.emplace_back(*e);
  }
  env.push_back(
      absl::StrCat("CUDA_VISIBLE_DEVICES=", options_.device == "cpu" ? "" : options_.device));
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string script = absl::StrCat("exec ", options_.command);
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // The worker blocks termination signals (its main thread waits for them) and ignores
    // SIGPIPE; the engine must get neither.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    setpgid(0, 0);                        // its own group: SIGTERM reaches what it spawns
    prctl(PR_SET_PDEATHSIG, SIGKILL);     // the worker gone, the engine goes too
    if (getppid() != parent) _exit(127);  // the worker died before prctl took effect
    execve("/bin/sh", const_cast<char* const*>(argv), envp.data());
    _exit(127);
  }
  if (pid < 0) {
    spdlog::error("cannot start the engine: fork: {}", std::strerror(errno));
    return 0;
  }
  setpgid(pid, pid);
  spdlog::info("started the engine (pid {}): {}", pid, options_.command);
  return pid;
}

void EngineProcess::Start() {
  pid_.store(Spawn());
  supervisor_ = std::thread([this] { Supervise(); });
}

void EngineProcess::Supervise() {
  absl::Duration backoff = options_.min_backoff;
  for (;;) {
    const pid_t pid = pid_.load();
    int status = 0;
    const auto started = absl::Now();
    if (pid > 0) {
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    pid_.store(0);
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    // What the engine started (vLLM's engine core, tensor-parallel ranks) may outlive it and
    // hold the GPU and the port: its whole process group goes before the restart.
    if (pid > 0) kill(-pid, SIGKILL);
    // An engine that ran for a while before dying starts over at the shortest backoff.
    if (absl::Now() - started > options_.max_backoff) backoff = options_.min_backoff;
    spdlog::warn("the engine (pid {}) {} {}; restarting in {}", pid,
                 WIFSIGNALED(status) ? "was killed by signal" : "exited with status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                 absl::FormatDuration(backoff));
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff)) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
    restarts_.fetch_add(1);
    pid_.store(Spawn());
  }
}

void EngineProcess::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  const pid_t pid = pid_.load();
  if (pid > 0) {
    // The whole group: the engine and whatever it started. Polled until no member is left (the
    // leader is reaped by Supervise).
    kill(-pid, SIGTERM);
    const absl::Time deadline = absl::Now() + options_.stop_timeout;
    while (kill(-pid, 0) == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));  // polling the group's exit
    }
    if (kill(-pid, 0) == 0) {
      spdlog::warn("the engine (process group {}) did not stop within {}; SIGKILL", pid,
                   absl::FormatDuration(options_.stop_timeout));
      kill(-pid, SIGKILL);
    }
  }
  if (supervisor_.joinable()) supervisor_.join();
}

}  // namespace tandem::workers::upstream
